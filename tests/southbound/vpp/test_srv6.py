"""`vpp/srv6/localsid/<sid>`, `vpp/srv6/policy/<bsid>` and `vpp/srv6/steering/<name>` through
the scheduler, the VPP southbound and vpp_papi, against the emulator."""

from __future__ import annotations

import pytest

from scheduler import InvalidValueError, ValueState
from southbound.vpp.models.srv6_localsid import check_localsid
from southbound.vpp.models.srv6_policy import check_policy
from southbound.vpp.models.srv6_steering import check_steering
from tests.southbound.vpp.plugin_helpers import calls

pytestmark = pytest.mark.process

CONFIGURED, PENDING, OBTAINED = ValueState.CONFIGURED, ValueState.PENDING, ValueState.OBTAINED
LOOP = {"type": "loopback"}
SR_MESSAGES = ("sr_localsid_add_del", "sr_policy_add_v2", "sr_policy_mod_v2", "sr_policy_del",
               "sr_steering_add_del")
STATE = {
    "vpp/vrf/ipv4/10": {},
    "vpp/interface/up": LOOP,
    "vpp/srv6/localsid/fc00::1": {"behavior": "end", "end_psp": True},
    "vpp/srv6/localsid/fc00::2": {"behavior": "end.dt4", "table": 10},
    "vpp/srv6/localsid/fc00::3": {"behavior": "end.x", "interface": "up",
                                  "next_hop": "fe80::2"},
    "vpp/srv6/localsid/fc00::4": {"behavior": "end.dx4", "interface": "up",
                                  "next_hop": "10.0.0.2"},
    "vpp/srv6/policy/fc00:b::1": {"segment_lists": [
        {"segments": ["fc00::a", "fc00::b"]}, {"segments": ["fc00::c"], "weight": 3}]},
    "vpp/srv6/policy/fc00:b::2": {"segment_lists": [{"segments": ["fc00::d"]}],
                                  "encap": False},
    "vpp/srv6/steering/dc2": {"bsid": "fc00:b::1", "prefix": "10.2.0.0/16", "table": 10},
    "vpp/srv6/steering/v6": {"bsid": "fc00:b::2", "prefix": "2001:db8:2::/48"},
    "vpp/srv6/steering/l2": {"bsid": "fc00:b::1", "interface": "up"},
}


def test_localsids_policies_and_steering_applied_read_back_and_removed(vpp):
    vpp.commit(STATE)
    assert {k: vpp.state(k) for k in STATE if vpp.state(k) is not CONFIGURED} == {}
    sids = {str(d.addr): (int(d.behavior), d.end_psp, d.xconnect_iface_or_vrf_table)
            for d in vpp.papi.api.sr_localsids_dump()}
    up = vpp.sw_if_index("up")
    assert sids == {"fc00::1": (1, True, 0xFFFFFFFF), "fc00::2": (9, False, 0),
                    "fc00::3": (2, False, up), "fc00::4": (7, False, up)}
    policies = {str(d.bsid): [([str(s) for s in sl.sids[:sl.num_sids]], sl.weight)
                              for sl in d.sid_lists] for d in vpp.papi.api.sr_policies_v2_dump()}
    assert policies == {"fc00:b::1": [(["fc00::a", "fc00::b"], 1), (["fc00::c"], 3)],
                        "fc00:b::2": [(["fc00::d"], 1)]}
    steered = {(int(d.traffic_type), str(d.bsid)) for d in vpp.papi.api.sr_steering_pol_dump()}
    assert steered == {(4, "fc00:b::1"), (6, "fc00:b::2"), (2, "fc00:b::1")}
    # Read back exactly (End.DT4's table from the desired value: VPP does not show it).
    before = vpp.control.counters()
    vpp.scheduler.resync({}, kind="downstream")
    assert calls(vpp, before, *SR_MESSAGES) == dict.fromkeys(SR_MESSAGES, 0)
    # Removed in order: steering before its policy.
    vpp.commit(dict.fromkeys(STATE))
    assert vpp.control.state()["srv6"] == {"localsids": [], "policies": {}, "steerings": 0,
                                           "encap_source": "::"}


def test_steering_waits_for_its_policy_and_follows_a_new_bsid(vpp):
    vpp.commit({"vpp/srv6/steering/dc2": {"bsid": "fc00:b::1", "prefix": "10.2.0.0/16"}})
    assert vpp.state("vpp/srv6/steering/dc2") is PENDING
    one = {"segment_lists": [{"segments": ["fc00::a"]}]}
    vpp.commit({"vpp/srv6/policy/fc00:b::1": one, "vpp/srv6/policy/fc00:b::9": one})
    assert vpp.state("vpp/srv6/steering/dc2") is CONFIGURED
    before = vpp.control.counters()
    vpp.commit({"vpp/srv6/steering/dc2": {"bsid": "fc00:b::9", "prefix": "10.2.0.0/16"}})
    assert calls(vpp, before, "sr_steering_add_del") == {"sr_steering_add_del": 1}  # re-pointed
    (d,) = vpp.papi.api.sr_steering_pol_dump()
    assert str(d.bsid) == "fc00:b::9"
    # A policy change re-creates it, its steering removed and put back around it.
    before = vpp.control.counters()
    vpp.commit({"vpp/srv6/policy/fc00:b::9": {"segment_lists": [{"segments": ["fc00::e"]}]}})
    assert calls(vpp, before, "sr_policy_del", "sr_policy_add_v2", "sr_steering_add_del") == {
        "sr_policy_del": 1, "sr_policy_add_v2": 1, "sr_steering_add_del": 2}
    assert vpp.state("vpp/srv6/steering/dc2") is CONFIGURED


def test_what_kvmesh_did_not_create_is_obtained_and_kept(vpp):
    api = vpp.papi.api
    api.sr_localsid_add_del(localsid="fc00::77", behavior=1)
    api.sr_policy_add_v2(bsid_addr="fc00:b::77", is_encap=True, encap_src="::", sids={
        "num_sids": 1, "weight": 1, "sids": ["fc00::1"] + ["::"] * 15})
    api.sr_steering_add_del(bsid_addr="fc00:b::77", traffic_type=4, prefix="10.7.0.0/16")
    vpp.scheduler.resync({}, kind="full")
    for key in ("vpp/srv6/localsid/fc00::77", "vpp/srv6/policy/fc00:b::77",
                "vpp/srv6/steering/vpp-0-10.7.0.0_16"):
        assert vpp.state(key) is OBTAINED, key
    assert len(api.sr_steering_pol_dump()) == 1 and len(api.sr_localsids_dump()) == 1


def test_validation_uses_vpps_limits():
    def bad(check, key: str, value: dict, field: str) -> None:
        with pytest.raises(InvalidValueError) as info:
            check(key, value)
        assert field in info.value.fields, info.value

    bad(check_localsid, "vpp/srv6/localsid/fc00::1", {"behavior": "end.x"}, "interface")
    bad(check_localsid, "vpp/srv6/localsid/fc00::1",
        {"behavior": "end.dx4", "interface": "up", "next_hop": "fe80::1"}, "next_hop")
    bad(check_localsid, "vpp/srv6/localsid/fc00::1", {"behavior": "end", "table": 3}, "table")
    bad(check_localsid, "vpp/srv6/localsid/FC00::1", {"behavior": "end"}, "(key)")
    bad(check_localsid, "vpp/srv6/localsid/10.0.0.1", {"behavior": "end"}, "(key)")
    bad(check_policy, "vpp/srv6/policy/fc00::1", {"segment_lists": []}, "segment_lists")
    bad(check_policy, "vpp/srv6/policy/fc00::1",
        {"segment_lists": [{"segments": ["fc00::1"] * 17}]}, "segment_lists[0].segments")
    bad(check_policy, "vpp/srv6/policy/fc00::1",
        {"segment_lists": [{"segments": ["10.0.0.1"]}]}, "segment_lists[0].segments[0]")
    bad(check_steering, "vpp/srv6/steering/x", {"bsid": "fc00::1"}, "prefix")
    bad(check_steering, "vpp/srv6/steering/vpp-1", {"bsid": "fc00::1", "prefix": "::/0"},
        "(key)")
    bad(check_steering, "vpp/srv6/steering/x",
        {"bsid": "fc00::1", "interface": "up", "table": 2}, "table")

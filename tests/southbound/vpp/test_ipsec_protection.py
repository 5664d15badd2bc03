"""`vpp/ipsec/tunnel-protection/<interface>` through the scheduler, the VPP southbound and
vpp_papi, against the emulator."""

from __future__ import annotations

import pytest

from scheduler import InvalidValueError, TransactionError, ValueState
from southbound.vpp.models.ipsec_protection import check_protection
from tests.southbound.vpp.plugin_helpers import calls
from tests.southbound.vpp.test_ipsec import IN, OUT
from tests.southbound.vpp.test_models_l2l3 import restart_and_resync

pytestmark = pytest.mark.process

CONFIGURED, PENDING, OBTAINED = ValueState.CONFIGURED, ValueState.PENDING, ValueState.OBTAINED
ANY = 0xFFFFFFFF
GRE = {"type": "gre", "gre": {"src": "10.0.0.1", "dst": "10.0.0.2"}}
KEY = "vpp/ipsec/tunnel-protection/gre1"
WRITES = ("ipsec_tunnel_protect_update", "ipsec_tunnel_protect_del")


def protections(vpp) -> list[tuple]:
    return [(d.tun.sw_if_index, d.tun.sa_out, sorted(d.tun.sa_in))
            for d in vpp.papi.api.ipsec_tunnel_protect_dump(sw_if_index=ANY)]


def sa_ids(vpp) -> list[int]:
    return sorted(d.entry.sad_id for d in vpp.papi.api.ipsec_sa_v5_dump(sa_id=ANY))


def test_a_protection_applied_updated_read_back_and_removed(vpp):
    vpp.commit({"vpp/interface/gre1": GRE, "vpp/ipsec/sa/10": OUT, "vpp/ipsec/sa/20": IN,
                "vpp/ipsec/sa/30": IN, KEY: {"sa_out": 10, "sa_in": [20]}})
    gre1 = vpp.sw_if_index("gre1")
    assert protections(vpp) == [(gre1, 10, [20])]
    assert vpp.state(KEY) is CONFIGURED
    # New inbound SAs: updated in place (no delete).
    before = vpp.control.counters()
    vpp.commit({KEY: {"sa_out": 10, "sa_in": [30, 20]}})
    assert calls(vpp, before, *WRITES) == {"ipsec_tunnel_protect_update": 1,
                                           "ipsec_tunnel_protect_del": 0}
    assert protections(vpp) == [(gre1, 10, [20, 30])]
    # Read back exactly: a downstream resync changes nothing.
    before = vpp.control.counters()
    vpp.scheduler.resync({}, kind="downstream")
    assert calls(vpp, before, *WRITES) == dict.fromkeys(WRITES, 0)
    assert vpp.state(KEY) is CONFIGURED
    # Removed before the SAs it holds (VPP would keep an SA in use after its delete).
    vpp.commit({KEY: None, "vpp/ipsec/sa/10": None, "vpp/ipsec/sa/20": None,
                "vpp/ipsec/sa/30": None, "vpp/interface/gre1": None})
    assert protections(vpp) == []
    assert sa_ids(vpp) == []
    assert vpp.control.state()["ipsec"]["protections"] == []


def test_pending_until_the_interface_and_every_sa_exist(vpp):
    vpp.commit({KEY: {"sa_out": 10, "sa_in": [20]}, "vpp/ipsec/sa/10": OUT})
    assert vpp.state(KEY) is PENDING
    vpp.commit({"vpp/interface/gre1": GRE})
    assert vpp.state(KEY) is PENDING  # SA 20 still missing
    assert protections(vpp) == []
    vpp.commit({"vpp/ipsec/sa/20": IN})
    assert vpp.state(KEY) is CONFIGURED
    assert protections(vpp) == [(vpp.sw_if_index("gre1"), 10, [20])]
    # Removing an SA it uses takes the protection down first, and it waits again.
    vpp.commit({"vpp/ipsec/sa/20": None})
    assert vpp.state(KEY) is PENDING
    assert protections(vpp) == []
    assert sa_ids(vpp) == [10]


def test_a_changed_sa_is_recreated_around_the_protection(vpp):
    vpp.commit({"vpp/interface/gre1": GRE, "vpp/ipsec/sa/10": OUT, "vpp/ipsec/sa/20": IN,
                KEY: {"sa_out": 10, "sa_in": [20]}})
    vpp.commit({"vpp/ipsec/sa/10": {**OUT, "crypto_key": "d" * 32}})
    assert vpp.state(KEY) is CONFIGURED
    assert protections(vpp) == [(vpp.sw_if_index("gre1"), 10, [20])]
    (sa,) = [d.entry for d in vpp.papi.api.ipsec_sa_v5_dump(sa_id=ANY) if d.entry.sad_id == 10]
    assert bytes(sa.crypto_key.data[:16]).hex() == "d" * 32


def test_a_protection_kvmesh_did_not_create_is_obtained_and_kept(vpp):
    vpp.commit({"vpp/ipsec/sa/10": OUT})
    foreign = vpp.papi.api.ipip_add_tunnel(tunnel={
        "instance": ANY, "src": "10.0.0.1", "dst": "10.0.0.3", "sw_if_index": ANY,
        "table_id": 0, "flags": 0, "mode": 0, "dscp": 0}).sw_if_index
    assert vpp.papi.api.ipsec_tunnel_protect_update(tunnel={
        "sw_if_index": foreign, "nh": "0.0.0.0", "sa_out": 10, "n_sa_in": 0,
        "sa_in": []}).retval == 0
    vpp.scheduler.resync({"vpp/ipsec/sa/10": OUT}, kind="full")
    key = f"vpp/ipsec/tunnel-protection/sw_if_index-{foreign}"
    assert vpp.state(key) is OBTAINED
    (dumped,) = vpp.scheduler.dump(key_prefix=key)
    assert dumped.value == {"sa_out": 10, "sa_in": [], "next_hop": None}
    vpp.scheduler.resync({}, kind="full")
    assert protections(vpp) == [(foreign, 10, [])]


def test_an_interface_that_is_no_tunnel_is_refused_by_vpp(vpp):
    """A loopback has no tunnel description: VPP refuses it (INVALID_SW_IF_INDEX), and the value
    fails with VPP's code."""
    with pytest.raises(TransactionError):
        vpp.commit({"vpp/interface/lo1": {"type": "loopback"}, "vpp/ipsec/sa/10": OUT,
                    "vpp/ipsec/tunnel-protection/lo1": {"sa_out": 10}})
    status = vpp.scheduler.get_value_status("vpp/ipsec/tunnel-protection/lo1")
    assert status.state is ValueState.FAILED
    assert "INVALID_SW_IF_INDEX" in status.error_message
    assert protections(vpp) == []


def test_validation_uses_vpps_limits():
    assert check_protection(KEY, {"sa_out": 1, "sa_in": [3, 2], "next_hop": "0.0.0.0"}) == \
        {"sa_out": 1, "sa_in": [2, 3], "next_hop": None}
    for bad, match in (({"sa_out": 1, "sa_in": [1, 2, 3, 4, 5]}, "at most 4"),
                       ({"sa_out": 1, "sa_in": [2, 2]}, "twice"),
                       ({"sa_out": -1}, "sa_out"),
                       ({"sa_out": 2**32}, "sa_out"),
                       ({"sa_out": 1, "next_hop": "nope"}, "next_hop"),
                       ({"sa_in": [1]}, "sa_out")):
        with pytest.raises(InvalidValueError, match=match):
            check_protection(KEY, bad)
    for key in ("vpp/ipsec/tunnel-protection/", "vpp/ipsec/tunnel-protection/a b"):
        with pytest.raises(InvalidValueError):
            check_protection(key, {"sa_out": 1})


def test_a_vpp_restart_is_rebuilt_by_a_resync(vpp):
    vpp.commit({"vpp/interface/gre1": GRE, "vpp/ipsec/sa/10": OUT, "vpp/ipsec/sa/20": IN,
                KEY: {"sa_out": 10, "sa_in": [20]}})
    sent = restart_and_resync(vpp)
    assert sent["ipsec_tunnel_protect_update"] == 1
    assert protections(vpp) == [(vpp.sw_if_index("gre1"), 10, [20])]
    assert vpp.state(KEY) is CONFIGURED

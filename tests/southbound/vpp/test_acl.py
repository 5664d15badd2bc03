"""`vpp/acl/<name>` through the scheduler, the VPP southbound and vpp_papi, against the emulator."""

from __future__ import annotations

import pytest

from scheduler import RetryPolicy, TransactionError, ValueState
from tests.southbound.vpp.plugin_helpers import calls, restart_vpp
from tests.util import wait_until

CONFIGURED, PENDING, OBTAINED = ValueState.CONFIGURED, ValueState.PENDING, ValueState.OBTAINED
ANY = 0xFFFFFFFF
LOOP = {"type": "loopback"}
WEB = {"rules": [{"action": "permit", "dst": "10.0.0.0/24", "protocol": "tcp",
                  "dst_ports": [80, 80]}, {"action": "deny"}],
       "interfaces": {"ingress": ["up"], "egress": ["down"]}}
DNS = {"rules": [{"action": "reflect", "protocol": "udp", "dst_ports": [53, 53]}],
       "interfaces": {"ingress": ["up"]}}


def acls(vpp) -> dict:
    """VPP's ACLs by tag: (index, [(action, src, dst, proto, dport)])."""
    return {d.tag: (d.acl_index, [(int(r.is_permit), str(r.src_prefix), str(r.dst_prefix),
                                   int(r.proto), r.dstport_or_icmpcode_first) for r in d.r])
            for d in vpp.papi.api.acl_dump(acl_index=ANY)}


def lists(vpp, name: str) -> tuple[list[int], list[int]]:
    (d,) = vpp.papi.api.acl_interface_list_dump(sw_if_index=vpp.sw_if_index(name))
    return list(d.acls[:d.n_input]), list(d.acls[d.n_input:])


def test_create_update_in_place_and_delete(vpp):
    vpp.commit({"vpp/interface/up": LOOP, "vpp/interface/down": LOOP, "vpp/acl/web": WEB})
    assert vpp.state("vpp/acl/web/interface/ingress/up") is CONFIGURED
    index, rules = acls(vpp)["kvmesh:web"]
    assert rules == [(1, "0.0.0.0/0", "10.0.0.0/24", 6, 80), (0, "0.0.0.0/0", "0.0.0.0/0", 0, 0)]
    assert lists(vpp, "up") == ([index], []) and lists(vpp, "down") == ([], [index])
    # new rules: replaced in place, the index (and the interface lists) stay
    before = vpp.control.counters()
    vpp.commit({"vpp/acl/web": {**WEB, "rules": [{"action": "deny", "protocol": 1}]}})
    assert calls(vpp, before, "acl_add_replace", "acl_del", "acl_interface_set_acl_list") == {
        "acl_add_replace": 1, "acl_del": 0, "acl_interface_set_acl_list": 0}
    assert acls(vpp)["kvmesh:web"] == (index, [(0, "0.0.0.0/0", "0.0.0.0/0", 1, 0)])
    assert lists(vpp, "up") == ([index], [])
    # unchanged: nothing to do
    assert [op for op in vpp.scheduler.plan({"vpp/acl/web": {
        **WEB, "rules": [{"action": "deny", "protocol": "icmp"}]}}) if not op.noop] == []
    # deleted: unbound first (or VPP refuses ACL_IN_USE), then removed
    vpp.commit({"vpp/acl/web": None})
    assert acls(vpp) == {}
    assert lists(vpp, "up") == ([], [])


def test_every_acl_of_an_interface_in_one_list_in_name_order(vpp):
    vpp.commit({"vpp/interface/up": LOOP, "vpp/interface/down": LOOP, "vpp/acl/web": WEB,
                "vpp/acl/dns": DNS})
    web, dns = acls(vpp)["kvmesh:web"][0], acls(vpp)["kvmesh:dns"][0]
    assert lists(vpp, "up") == ([dns, web], [])
    vpp.commit({"vpp/acl/dns": {**DNS, "interfaces": {"egress": ["up"]}}})
    assert lists(vpp, "up") == ([web], [dns])
    vpp.commit({"vpp/acl/web": None})
    assert lists(vpp, "up") == ([], [dns]) and lists(vpp, "down") == ([], [])


def test_binding_waits_for_its_interface_and_goes_before_it(vpp):
    vpp.commit({"vpp/acl/web": WEB})
    assert vpp.state("vpp/acl/web") is CONFIGURED
    status = vpp.scheduler.get_value_status("vpp/acl/web/interface/ingress/up")
    assert (status.state, status.details) == (PENDING, ("interface up",))
    vpp.commit({"vpp/interface/up": LOOP})
    assert vpp.state("vpp/acl/web/interface/ingress/up") is CONFIGURED
    assert lists(vpp, "up") == ([acls(vpp)["kvmesh:web"][0]], [])
    vpp.commit({"vpp/interface/up": None})
    assert vpp.state("vpp/acl/web/interface/ingress/up") is PENDING
    assert vpp.state("vpp/acl/web") is CONFIGURED
    vpp.commit({"vpp/acl/web": None})
    assert acls(vpp) == {}


def test_resync_after_a_restart_rebuilds_with_the_minimum_of_calls(vpp):
    vpp.commit({"vpp/interface/up": LOOP, "vpp/interface/down": LOOP, "vpp/acl/web": WEB,
                "vpp/acl/dns": DNS})
    restart_vpp(vpp)
    before = vpp.control.counters()
    vpp.scheduler.resync({}, kind="downstream")
    # one add per ACL, one list per binding, two dumps per resync
    assert calls(vpp, before, "acl_add_replace", "acl_interface_set_acl_list", "acl_dump",
                 "acl_interface_list_dump", "acl_del") == {
        "acl_add_replace": 2, "acl_interface_set_acl_list": 3, "acl_dump": 1,
        "acl_interface_list_dump": 1, "acl_del": 0}
    vpp.papi = vpp.papi.__class__(bootstrapapi=True, server_address=vpp.emulator.socket_path)
    vpp.papi.connect("kvmesh-test")
    web, dns = acls(vpp)["kvmesh:web"][0], acls(vpp)["kvmesh:dns"][0]
    assert lists(vpp, "up") == ([dns, web], []) and lists(vpp, "down") == ([], [web])
    # and a second resync finds nothing to do
    before = vpp.control.counters()
    vpp.scheduler.resync({}, kind="downstream")
    assert calls(vpp, before, "acl_add_replace", "acl_interface_set_acl_list") == {
        "acl_add_replace": 0, "acl_interface_set_acl_list": 0}


def test_a_refused_acl_is_failed_with_vpps_error_and_a_transient_one_retried(vpp):
    vpp.control.fail("acl_add_replace", retval=-7, count=1)
    with pytest.raises(TransactionError, match=r"VNET_API_ERROR_INVALID_VALUE \(-7\)"):
        vpp.commit({"vpp/acl/dns": DNS})
    status = vpp.scheduler.get_value_status("vpp/acl/dns")
    assert status.state is ValueState.FAILED and "VNET_API_ERROR_INVALID_VALUE" in str(status.error)
    vpp.control.fail("acl_add_replace", retval=-167, count=1)  # BUSY: transient
    with pytest.raises(TransactionError, match=r"VNET_API_ERROR_BUSY \(-167\)"):
        vpp.commit({"vpp/acl/web": WEB},
                   retry=RetryPolicy(period=0.05, max_count=3, exp_backoff=False))
    wait_until(lambda: vpp.state("vpp/acl/web") is CONFIGURED, timeout=30,
               message="created by a retry")
    assert set(acls(vpp)) == {"kvmesh:web"}


def test_acls_kvmesh_did_not_make_are_obtained_and_never_deleted(vpp):
    rule = {"is_permit": 1, "src_prefix": "0.0.0.0/0", "dst_prefix": "0.0.0.0/0", "proto": 0,
            "srcport_or_icmptype_first": 0, "srcport_or_icmptype_last": 65535,
            "dstport_or_icmpcode_first": 0, "dstport_or_icmpcode_last": 65535}
    theirs = vpp.papi.api.acl_add_replace(acl_index=ANY, tag="someone-else", count=1,
                                          r=[rule]).acl_index
    vpp.commit({"vpp/interface/up": LOOP})
    vpp.papi.api.acl_interface_set_acl_list(sw_if_index=vpp.sw_if_index("up"), count=1,
                                            n_input=1, acls=[theirs])
    vpp.scheduler.resync({"vpp/interface/up": LOOP, "vpp/acl/dns": DNS}, kind="full")
    assert vpp.state(f"vpp/acl/vpp-{theirs}") is OBTAINED
    dns = acls(vpp)["kvmesh:dns"][0]
    assert lists(vpp, "up") == ([dns, theirs], [])  # theirs kept on the interface
    vpp.commit({"vpp/acl/dns": None})
    assert lists(vpp, "up") == ([theirs], [])
    assert set(acls(vpp)) == {"someone-else"}

"""Every VPP descriptor against the emulator, through the scheduler and the real vpp_papi client."""

from __future__ import annotations

import pytest

from scheduler import Descriptor, RetryPolicy, TransactionError, ValueState
from southbound.vpp.errors import VppApiError
from tests.util import wait_until

CONFIGURED = ValueState.CONFIGURED
PENDING = ValueState.PENDING
LOOP = {"type": "loopback"}
LO1 = "vpp/interface/lo1"
LO2 = "vpp/interface/lo2"


def test_loopback_create_update_delete(vpp):
    vpp.commit({LO1: {**LOOP, "mtu": 1400, "mac": "02:00:00:00:01:01"}})
    assert vpp.state(LO1) is CONFIGURED
    d = vpp.vpp_interfaces()["kvmesh:lo1"]
    assert d.sw_if_index == vpp.sw_if_index("lo1")
    assert (d.link_mtu, str(d.l2_address), int(d.flags) & 1) == (1400, "02:00:00:00:01:01", 1)

    vpp.commit({LO1: {**LOOP, "mtu": 1500, "mac": "02:00:00:00:01:02", "enabled": False}})
    d = vpp.vpp_interfaces()["kvmesh:lo1"]
    assert (d.link_mtu, str(d.l2_address), int(d.flags) & 1) == (1500, "02:00:00:00:01:02", 0)
    assert d.sw_if_index == vpp.sw_if_index("lo1")  # updated in place

    vpp.commit({LO1: None})
    assert "kvmesh:lo1" not in vpp.vpp_interfaces()
    assert "lo1" not in vpp.scheduler.get_metadata_map("vpp-interface")


def test_addresses_are_derived_values(vpp):
    vpp.commit({LO1: {**LOOP, "addresses": ["10.0.0.1/24", "fd00::1/64"]}})
    idx = vpp.sw_if_index("lo1")
    assert sorted(vpp.vpp_addresses(idx)) == ["10.0.0.1/24", "fd00::1/64"]
    assert vpp.state("vpp/interface/lo1/address/fd00::1/64") is CONFIGURED
    vpp.commit({LO1: {**LOOP, "addresses": ["10.0.0.2/24"]}})
    assert vpp.vpp_addresses(idx) == ["10.0.0.2/24"]
    assert vpp.sw_if_index("lo1") == idx
    assert vpp.state("vpp/interface/lo1/address/10.0.0.1/24") is ValueState.NONEXISTENT


def test_vrf_binds_the_interface_to_its_table_and_a_change_recreates_it(vpp):
    # (issue 19: the tables are vpp/vrf values the interface depends on, not made implicitly;
    # the IPv6 binding is made when the interface has IPv6 addresses)
    tables: dict = {"vpp/vrf/ipv4/5": {}, "vpp/vrf/ipv4/6": {}, "vpp/vrf/ipv6/5": {}}
    vpp.commit({**tables, LO1: {**LOOP, "vrf": 5, "addresses": ["10.5.0.1/24", "fd05::1/64"]}})
    idx = vpp.sw_if_index("lo1")
    assert vpp.papi.api.sw_interface_get_table(sw_if_index=idx).vrf_id == 5
    assert vpp.papi.api.sw_interface_get_table(sw_if_index=idx, is_ipv6=True).vrf_id == 5
    vpp.commit({LO1: {**LOOP, "vrf": 6, "addresses": ["10.5.0.1/24"]}})
    new = vpp.sw_if_index("lo1")
    assert new != idx
    assert vpp.papi.api.sw_interface_get_table(sw_if_index=new).vrf_id == 6
    assert vpp.vpp_addresses(new) == ["10.5.0.1/24"]


def test_tap_interface(vpp):
    key = "vpp/interface/tap1"
    vpp.commit({key: {"type": "tap", "tap": {"host_if_name": "kvtap1", "rx_ring_size": 512}}})
    (tap,) = vpp.papi.api.sw_interface_tap_v2_dump()
    assert (tap.sw_if_index, tap.host_if_name, tap.rx_ring_sz, tap.tx_ring_sz) == (
        vpp.sw_if_index("tap1"),
        "kvtap1",
        512,
        256,
    )
    vpp.commit({key: None})
    assert vpp.papi.api.sw_interface_tap_v2_dump() == []


def test_af_packet_waits_for_its_host_interface(vpp):
    # `lo` exists in the emulator's namespace; the dependency is on the Linux host value, which
    # the Linux southbound's watcher would push (here: a stand-in descriptor for those keys).
    vpp.scheduler.register_descriptor(
        Descriptor(name="host-links", key_selector=lambda k: k.startswith("linux/interface/host/"))
    )
    key = "vpp/interface/host-lo"
    vpp.commit({key: {"type": "af_packet", "af_packet": {"host_if_name": "lo"}}})
    status = vpp.scheduler.get_value_status(key)
    assert status.state is PENDING
    assert status.details == ("host interface lo",)
    assert vpp.papi.api.af_packet_dump() == []
    vpp.scheduler.push_sb_notification("linux/interface/host/lo", {"name": "lo"})
    wait_until(lambda: vpp.state(key) is CONFIGURED, timeout=20, message="af_packet created")
    assert [d.host_if_name for d in vpp.papi.api.af_packet_dump()] == ["lo"]
    vpp.scheduler.push_sb_notification("linux/interface/host/lo", None)
    wait_until(lambda: vpp.state(key) is PENDING, timeout=20, message="af_packet removed")
    assert vpp.papi.api.af_packet_dump() == []


def test_unnumbered_waits_for_an_address_and_returns_to_l2(vpp):
    vpp.commit(
        {
            LO1: LOOP,
            LO2: {**LOOP, "unnumbered": {"interface_with_ip": "lo1"}},
        }
    )
    unnumbered = "vpp/interface/lo2/unnumbered"
    assert vpp.state(unnumbered) is PENDING
    assert vpp.papi.api.ip_unnumbered_dump() == []
    vpp.commit({LO1: {**LOOP, "addresses": ["10.0.0.1/24"]}})
    assert vpp.state(unnumbered) is CONFIGURED
    (d,) = vpp.papi.api.ip_unnumbered_dump()
    assert (d.sw_if_index, d.ip_sw_if_index) == (vpp.sw_if_index("lo2"), vpp.sw_if_index("lo1"))
    vpp.commit({LO1: LOOP})
    assert vpp.state(unnumbered) is PENDING
    assert vpp.state(LO2) is CONFIGURED
    assert vpp.papi.api.ip_unnumbered_dump() == []
    assert "kvmesh:lo2" in vpp.vpp_interfaces()


def test_bridge_domain_with_members_flags_and_bvi(vpp):
    bd = "vpp/bd/b1"
    members = [{"name": "lo1", "bvi": True}, {"name": "lo2"}]
    vpp.commit({bd: {"bd_id": 10, "arp_term": True, "interfaces": members}, LO1: LOOP})
    assert vpp.state(bd) is CONFIGURED
    assert vpp.state("vpp/bd/b1/interface/lo2") is PENDING
    (d,) = vpp.papi.api.bridge_domain_dump(bd_id=10)
    assert (d.bd_tag, d.arp_term, d.learn, d.bvi_sw_if_index) == (
        "kvmesh:b1",
        True,
        True,
        vpp.sw_if_index("lo1"),
    )
    assert [m.sw_if_index for m in d.sw_if_details] == [vpp.sw_if_index("lo1")]

    vpp.commit({LO2: LOOP, bd: {"bd_id": 10, "learn": False, "interfaces": members}})
    (d,) = vpp.papi.api.bridge_domain_dump(bd_id=10)
    assert (d.arp_term, d.learn) == (False, False)
    assert sorted(m.sw_if_index for m in d.sw_if_details) == sorted(
        [vpp.sw_if_index("lo1"), vpp.sw_if_index("lo2")]
    )
    # a new bd_id re-creates the domain and its members
    vpp.commit({bd: {"bd_id": 11, "interfaces": members}})
    assert [d.bd_id for d in vpp.papi.api.bridge_domain_dump()] == [11]
    assert len(vpp.papi.api.bridge_domain_dump(bd_id=11)[0].sw_if_details) == 2
    vpp.commit({bd: None})
    assert vpp.papi.api.bridge_domain_dump() == []
    assert vpp.state(LO1) is CONFIGURED


def test_routes_ipv4_ipv6_and_vrf(vpp):
    r4 = "vpp/route/0/10.1.0.0/16/10.0.0.2"
    r4b = "vpp/route/0/10.1.0.0/16/10.0.0.3"
    r6 = "vpp/route/0/fd01::/64/fd00::2"
    r_vrf = "vpp/route/7/10.7.0.0/16/10.0.0.9"
    via_lo1 = {"outgoing_interface": "lo1"}
    vpp.commit({r4: via_lo1, r4b: {**via_lo1, "weight": 3}, r6: via_lo1, r_vrf: via_lo1,
                "vpp/vrf/ipv4/7": {}})
    assert all(vpp.state(k) is PENDING for k in (r4, r4b, r6, r_vrf))
    vpp.commit({LO1: {**LOOP, "addresses": ["10.0.0.1/24", "fd00::1/64"]}})
    assert all(vpp.state(k) is CONFIGURED for k in (r4, r4b, r6, r_vrf))
    idx = vpp.sw_if_index("lo1")
    assert sorted(vpp.vpp_routes()["10.1.0.0/16"]) == [("10.0.0.2", idx), ("10.0.0.3", idx)]
    assert vpp.vpp_routes(is_ip6=True)["fd01::/64"] == [("fd00::2", idx)]
    assert vpp.vpp_routes(table_id=7)["10.7.0.0/16"] == [("10.0.0.9", idx)]
    vpp.commit({r4: None, r4b: {**via_lo1, "weight": 5}})
    assert vpp.vpp_routes()["10.1.0.0/16"] == [("10.0.0.3", idx)]
    vpp.commit({LO1: None})
    assert all(vpp.state(k) is PENDING for k in (r4b, r6, r_vrf))
    assert "10.1.0.0/16" not in vpp.vpp_routes()


def test_vpp_errors_are_named_and_not_retried(vpp):
    vpp.commit({LO1: {**LOOP, "addresses": ["10.0.0.1/24"]}})
    with pytest.raises(TransactionError) as info:
        vpp.commit(
            {LO2: {**LOOP, "addresses": ["10.0.0.2/24"], "mtu": 9216}},
            retry=RetryPolicy(period=0.01, max_count=3),
        )
    key = "vpp/interface/lo2/address/10.0.0.2/24"
    _op, exc = info.value.errors[key]
    assert isinstance(exc, VppApiError)
    assert "VNET_API_ERROR_ADDRESS_IN_USE (-105)" in str(exc)
    assert not exc.retriable
    assert vpp.scheduler.stats()["scheduled_retries"] == 0  # a retry cannot fix it
    status = vpp.scheduler.get_value_status(key)
    assert status.state is ValueState.FAILED, "kept FAILED with its error, not retried"
    assert "ADDRESS_IN_USE" in status.error_message
    assert vpp.state(LO2) is CONFIGURED
    assert vpp.vpp_addresses(vpp.sw_if_index("lo2")) == []


def test_failed_create_leaves_nothing_behind(vpp):
    vpp.control.fail("hw_interface_set_mtu", retval=-7)
    with pytest.raises(TransactionError, match=r"VNET_API_ERROR_INVALID_VALUE \(-7\)"):
        vpp.commit({LO1: {**LOOP, "mtu": 1400}})
    assert vpp.state(LO1) is ValueState.FAILED
    assert vpp.vpp_interfaces() == {}  # the loopback made before the failing step was removed


def test_invalid_values_are_rejected_with_field_details(vpp):
    requests_before = vpp.control.counters()["requests"]
    with pytest.raises(TransactionError):
        vpp.commit(
            {
                LO1: {"type": "loopback", "mtu": 5, "vrf": "red"},
                "vpp/bd/b1": {"bd_id": 0},
                "vpp/route/0/10.1.0.0/16/10.0.0.2": {"dst": "10.9.0.0/16"},
            }
        )
    status = vpp.scheduler.get_value_status(LO1)
    assert status.state is ValueState.INVALID
    assert set(status.details) == {"mtu", "vrf"}
    assert "field 'mtu': must be an integer 64..9216, got 5" in status.error_message
    assert vpp.scheduler.get_value_status("vpp/bd/b1").details == ("bd_id",)
    assert vpp.scheduler.get_value_status("vpp/route/0/10.1.0.0/16/10.0.0.2").details == ("dst",)
    assert vpp.control.counters()["requests"] == requests_before  # VPP was never asked
    assert vpp.vpp_interfaces() == {}


def test_downstream_resync_repairs_drift(vpp):
    route = "vpp/route/0/10.1.0.0/16/10.0.0.2"
    vpp.commit(
        {
            LO1: {**LOOP, "mtu": 1400, "addresses": ["10.0.0.1/24"]},
            LO2: LOOP,
            "vpp/bd/b1": {"bd_id": 3, "interfaces": [{"name": "lo2"}, {"name": "ghost"}]},
            route: {"outgoing_interface": "lo1"},
            # pending parts must stay pending through resyncs, without changes to VPP
            "vpp/interface/lo3": {**LOOP, "unnumbered": {"interface_with_ip": "lo2"}},
        }
    )
    assert vpp.state("vpp/interface/lo3/unnumbered") is PENDING
    idx1, idx2 = vpp.sw_if_index("lo1"), vpp.sw_if_index("lo2")
    api = vpp.papi.api
    # drift made behind kvmesh's back, through the API like any other VPP client
    api.hw_interface_set_mtu(sw_if_index=idx1, mtu=2000)
    api.sw_interface_set_flags(sw_if_index=idx2, flags=0)
    api.sw_interface_add_del_address(sw_if_index=idx1, is_add=False, prefix="10.0.0.1/24")
    api.sw_interface_set_l2_bridge(rx_sw_if_index=idx2, bd_id=3, enable=False)
    foreign = api.create_loopback().sw_if_index  # not kvmesh's: must survive the resync
    path = {
        "sw_if_index": idx1,
        "nh": {"address": {"ip4": "10.0.0.2"}},
        "label_stack": [{}] * 16,
    }
    route_spec = {"table_id": 0, "prefix": "10.1.0.0/16", "n_paths": 1, "paths": [path]}
    api.ip_route_add_del(is_add=False, is_multipath=True, route=route_spec)
    assert "10.1.0.0/16" not in vpp.vpp_routes()
    vpp.scheduler.resync({}, kind="downstream")
    d1, d2 = vpp.vpp_interfaces()["kvmesh:lo1"], vpp.vpp_interfaces()["kvmesh:lo2"]
    assert d1.link_mtu == 1400 and int(d2.flags) & 1
    assert vpp.vpp_addresses(idx1) == ["10.0.0.1/24"]
    assert [m.sw_if_index for m in api.bridge_domain_dump(bd_id=3)[0].sw_if_details] == [idx2]
    assert vpp.vpp_routes()["10.1.0.0/16"] == [("10.0.0.2", idx1)]
    assert foreign in {d.sw_if_index for d in api.sw_interface_dump()}
    # a second resync has nothing left to do: it reads VPP and changes nothing
    writes_before = vpp_writes(vpp)
    seq = vpp.scheduler.resync({}, kind="downstream")
    (record,) = vpp.scheduler.transaction_history(seq=seq)
    assert [op for op in record.executed if not op.noop] == []
    assert vpp_writes(vpp) == writes_before
    assert vpp.state("vpp/interface/lo3/unnumbered") is PENDING
    assert vpp.state("vpp/bd/b1/interface/ghost") is PENDING


READS = {"control_ping", "sw_interface_get_table", "show_version", "get_api_json",
         "nat44_show_running_config", "lcp_itf_pair_get_v2"}


def vpp_writes(vpp) -> dict:
    """Requests that can change VPP's state, by message, as counted by the emulator."""
    return {
        name: count
        for name, count in vpp.control.counters().items()
        if name.startswith("msg.")
        and not name.endswith("_dump")
        and name[4:] not in READS | {"sockclnt_create", "want_interface_events"}
    }


def test_full_resync_adopts_existing_config_and_removes_what_nb_dropped(emulator, vpp):
    from tests.southbound.vpp.conftest import VppHarness

    vpp.commit({LO1: {**LOOP, "addresses": ["10.0.0.1/24"]}, LO2: LOOP})
    calls_before = emulator.control.counters()["msg.create_loopback"]
    # the agent restarts: a new scheduler and plugin find VPP configured
    second = VppHarness(emulator)
    try:
        seq = second.scheduler.resync({LO1: {**LOOP, "addresses": ["10.0.0.1/24"]}}, kind="full")
        (record,) = second.scheduler.transaction_history(seq=seq)
        executed = {(op.key, str(op.op)) for op in record.executed if not op.noop}
        assert executed == {(LO2, "DELETE")}
        assert second.state(LO1) is CONFIGURED
        assert set(second.vpp_interfaces()) == {"kvmesh:lo1"}
        assert emulator.control.counters()["msg.create_loopback"] == calls_before
    finally:
        second.close()


def test_interface_events_reach_the_plugin(vpp):
    events: list = []
    vpp.plugin.on_interface_event(events.append)
    vpp.commit({LO1: LOOP})
    wait_until(
        lambda: any(e.name == "lo1" and e.admin_up for e in events),
        timeout=20,
        message="admin-up event for lo1",
    )
    assert vpp.plugin.link_state["lo1"].link_up
    vpp.papi.api.delete_loopback(sw_if_index=vpp.sw_if_index("lo1"))
    wait_until(
        lambda: any(e.name == "lo1" and e.deleted for e in events),
        timeout=20,
        message="deletion event for lo1",
    )
    assert "lo1" not in vpp.plugin.link_state

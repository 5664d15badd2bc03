"""The Linux descriptors through a real KVScheduler, against the kernel, in a namespace per test."""

from __future__ import annotations

import sys

import pytest

from scheduler import KVScheduler, TransactionError, ValueOrigin, ValueState
from southbound.linux import NamespaceNotFoundError, register
from southbound.linux.models.interface import parse_interface
from southbound.linux.models.route import parse_route
from tests.netns import list_netns, netns_available, unique_netns_name
from tests.southbound.linux.harness import (
    assert_warm_restart_writes_nothing,
    commit,
    sb_values,
    state,
)
from tests.util import wait_until

pytestmark = pytest.mark.netns

CONFIGURED = ValueState.CONFIGURED
PENDING = ValueState.PENDING


def veth(peer: str, **fields) -> dict:
    return {"type": "veth", "veth": {"peer": peer}, **fields}


# -- registration ---------------------------------------------------------------------------


def test_register_on_a_missing_namespace_fails_and_creates_nothing() -> None:
    if not netns_available():
        pytest.skip("needs root")
    name = unique_netns_name("kvlx")
    with KVScheduler() as scheduler, pytest.raises(NamespaceNotFoundError, match=name):
        register(scheduler, name)
    assert name not in list_netns()


def test_closing_the_scheduler_first_is_harmless(ns) -> None:
    scheduler = KVScheduler()
    plugin = register(scheduler, ns.name)
    try:
        scheduler.close()
        ns.ip("link", "add", "late0", "type", "bridge")  # the watcher reports into a closed one
        watcher = plugin.watcher
        assert watcher is not None
        wait_until(lambda: "late0" in watcher.host_links(), timeout=10)
        assert watcher.alive and watcher.notify_errors == 0
    finally:
        plugin.close()


OWN_NAMESPACE_SCRIPT = """
from scheduler import KVScheduler, ValueState
from southbound.linux import register
with KVScheduler() as scheduler:
    plugin = register(scheduler)  # netns=None: the namespace this process runs in
    try:
        txn = scheduler.start_txn()
        txn.set_value("linux/interface/own0", {"type": "bridge", "addresses": ["10.13.0.1/24"]})
        txn.commit()
        assert scheduler.get_value_status("linux/interface/host/lo").state is ValueState.OBTAINED
        print("ok")
    finally:
        plugin.close()
"""


def test_register_in_the_callers_own_namespace(ns) -> None:
    result = ns.exec(sys.executable, "-c", OWN_NAMESPACE_SCRIPT, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
    assert ns.addresses("own0") == ["10.13.0.1/24"]


def test_close_stops_the_watcher(linux) -> None:
    _ns, _scheduler, plugin = linux
    assert plugin.watcher is not None and plugin.watcher.alive
    plugin.close()
    assert not plugin.watcher.alive
    plugin.close()


# -- interfaces -----------------------------------------------------------------------------


def test_veth_pair_waits_for_its_second_end(linux) -> None:
    ns, scheduler, _plugin = linux
    commit(scheduler, {"linux/interface/va": veth("vb", addresses=["10.0.0.1/24"])})
    status = scheduler.get_value_status("linux/interface/va")
    assert status.state is PENDING and status.details == ("veth peer vb",)
    assert "va" not in ns.link_names()
    commit(scheduler, {"linux/interface/vb": veth("va", mtu=1400)})
    assert state(scheduler, "linux/interface/va") is CONFIGURED
    assert state(scheduler, "linux/interface/vb") is CONFIGURED
    va, vb = ns.link("va"), ns.link("vb")
    assert va["link"] == "vb" and vb["link"] == "va"
    assert "UP" in va["flags"] and "UP" in vb["flags"] and vb["mtu"] == 1400
    assert ns.addresses("va") == ["10.0.0.1/24"]
    # Deleting either end removes the pair; the other end waits again.
    commit(scheduler, {"linux/interface/va": None})
    assert state(scheduler, "linux/interface/vb") is PENDING
    assert not {"va", "vb"} & ns.link_names()
    commit(scheduler, {"linux/interface/va": veth("vb", addresses=["10.0.0.1/24"])})
    assert {"va", "vb"} <= ns.link_names()
    assert state(scheduler, "linux/interface/vb") is CONFIGURED
    assert ns.link("vb")["mtu"] == 1400 and ns.addresses("va") == ["10.0.0.1/24"]


def test_veth_peer_change_recreates_the_pair(linux) -> None:
    ns, scheduler, _plugin = linux
    commit(scheduler, {"linux/interface/pa": veth("pb", addresses=["10.12.0.1/24"]),
                       "linux/interface/pb": veth("pa")})
    commit(scheduler, {"linux/interface/pa": veth("pc", addresses=["10.12.0.1/24"]),
                       "linux/interface/pb": None,
                       "linux/interface/pc": veth("pa")})
    assert ns.link("pa")["link"] == "pc" and ns.link("pc")["link"] == "pa"
    assert "pb" not in ns.link_names()
    assert ns.addresses("pa") == ["10.12.0.1/24"]
    assert all(state(scheduler, f"linux/interface/{n}") is CONFIGURED for n in ("pa", "pc"))


def test_bridge_update_in_place_and_delete(linux) -> None:
    ns, scheduler, _plugin = linux
    key = "linux/interface/br0"
    commit(scheduler, {key: {"type": "bridge", "mtu": 1400, "enabled": False}})
    index = ns.link("br0")["ifindex"]
    assert "UP" not in ns.link("br0")["flags"]
    commit(scheduler, {key: {"type": "bridge", "mtu": 1300, "mac": "02:00:00:00:00:aa"}})
    link = ns.link("br0")
    assert (link["ifindex"], link["mtu"], link["address"]) == (index, 1300, "02:00:00:00:00:aa")
    assert "UP" in link["flags"]
    assert scheduler.get_metadata_map("linux-interface")["br0"] == {"index": index}
    assert sb_values(scheduler)[key] == parse_interface(key, {
        "type": "bridge", "mtu": 1300, "mac": "02:00:00:00:00:aa"}).to_value()
    commit(scheduler, {key: None})
    assert "br0" not in ns.link_names()
    assert state(scheduler, key) is ValueState.NONEXISTENT


def test_tap_vxlan_macvlan_and_recreate_on_identity_change(linux) -> None:
    ns, scheduler, _plugin = linux
    values = {
        "linux/interface/u0": veth("u1", addresses=["192.0.2.1/24"]),
        "linux/interface/u1": veth("u0"),
        "linux/interface/tap0": {"type": "tap", "mtu": 9000},
        "linux/interface/vx0": {"type": "vxlan", "vxlan": {
            "vni": 10, "local": "192.0.2.1", "remote": "192.0.2.2", "device": "u0"}},
        "linux/interface/mv0": {"type": "macvlan", "macvlan": {"parent": "u0", "mode": "vepa"}},
    }
    commit(scheduler, values)
    for key in values:
        assert state(scheduler, key) is CONFIGURED, key
    tap = ns.link("tap0")
    assert tap["linkinfo"]["info_kind"] == "tun" and tap["mtu"] == 9000
    vxlan = ns.link("vx0")["linkinfo"]["info_data"]
    assert (vxlan["id"], vxlan["local"], vxlan["remote"], vxlan["port"], vxlan["link"]) == (
        10, "192.0.2.1", "192.0.2.2", 4789, "u0")
    assert ns.link("mv0")["linkinfo"]["info_data"]["mode"] == "vepa"
    retrieved = sb_values(scheduler, "linux/interface/")
    for key, value in values.items():
        assert retrieved[key] == parse_interface(key, value).to_value(), key
    # A new VNI cannot be set in place: the link is re-created (new ifindex).
    old_index = ns.link("vx0")["ifindex"]
    commit(scheduler, {"linux/interface/vx0": {"type": "vxlan", "vxlan": {
        "vni": 11, "local": "192.0.2.1", "remote": "192.0.2.2", "device": "u0"}}})
    assert ns.link("vx0")["linkinfo"]["info_data"]["id"] == 11
    assert ns.link("vx0")["ifindex"] != old_index
    commit(scheduler, dict.fromkeys(values))
    assert ns.link_names() == {"lo"}


def test_vxlan_with_a_taken_vni_fails_naming_the_holder(linux) -> None:
    """Issue 17: the kernel refuses a second VXLAN with one VNI and port (EEXIST although the
    name is free): the error names the device that holds them and is not retried."""
    ns, scheduler, _plugin = linux
    vxlan = {"type": "vxlan", "vxlan": {"vni": 42, "local": "192.0.2.1"}}
    commit(scheduler, {"linux/interface/vx1": vxlan})
    with pytest.raises(TransactionError):
        commit(scheduler, {"linux/interface/vx2": vxlan}, retry=True)
    status = scheduler.get_value_status("linux/interface/vx2")
    assert status.state is ValueState.FAILED  # not RETRYING: a retry would fail the same way
    assert status.error_message == (
        "create interface vx2: VNI 42 on UDP port 4789 is in use by vx1 (one VXLAN device "
        "per VNI and port in a namespace) (EEXIST)")
    assert ns.link_names() == {"lo", "vx1"}
    commit(scheduler, {"linux/interface/vx1": None, "linux/interface/vx2": None})


def test_type_change_recreates_the_link(linux) -> None:
    ns, scheduler, _plugin = linux
    key = "linux/interface/x0"
    commit(scheduler, {key: {"type": "bridge", "addresses": ["10.8.0.1/24"]}})
    index = ns.link("x0")["ifindex"]
    commit(scheduler, {key: {"type": "tap", "addresses": ["10.8.0.1/24"]}})
    link = ns.link("x0")
    assert link["linkinfo"]["info_kind"] == "tun" and link["ifindex"] != index
    assert ns.addresses("x0") == ["10.8.0.1/24"]  # derived values re-created with it
    assert state(scheduler, key) is CONFIGURED


def test_lower_link_dependency(linux) -> None:
    ns, scheduler, _plugin = linux
    commit(scheduler, {"linux/interface/mv0": {"type": "macvlan", "macvlan": {"parent": "p0"}}})
    status = scheduler.get_value_status("linux/interface/mv0")
    assert status.state is PENDING and status.details == ("macvlan lower link p0",)
    commit(scheduler, {"linux/interface/p0": {"type": "bridge"}})
    assert state(scheduler, "linux/interface/mv0") is CONFIGURED
    assert ns.link("mv0")["link"] == "p0"
    commit(scheduler, {"linux/interface/p0": None})
    assert state(scheduler, "linux/interface/mv0") is PENDING
    assert "mv0" not in ns.link_names()


def test_bridge_members_enslaved_when_both_exist(linux) -> None:
    ns, scheduler, _plugin = linux
    commit(scheduler, {
        "linux/interface/m0": veth("m1", master="br0"),
        "linux/interface/m1": veth("m0", master="br0"),
    })
    assert state(scheduler, "linux/interface/m0") is CONFIGURED
    binding = scheduler.get_value_status("linux/interface/m0/master")
    assert binding.state is PENDING and binding.details == ("bridge br0",)
    assert ns.link("m0").get("master") is None
    commit(scheduler, {"linux/interface/br0": {"type": "bridge"}})
    assert state(scheduler, "linux/interface/m0/master") is CONFIGURED
    assert ns.link("m0")["master"] == "br0" and ns.link("m1")["master"] == "br0"
    # Moving a member to another bridge, then out of any bridge.
    commit(scheduler, {"linux/interface/br1": {"type": "bridge"},
                       "linux/interface/m1": veth("m0", master="br1")})
    assert ns.link("m1")["master"] == "br1" and ns.link("m0")["master"] == "br0"
    commit(scheduler, {"linux/interface/m1": veth("m0")})
    assert ns.link("m1").get("master") is None
    commit(scheduler, {"linux/interface/br0": None})
    assert state(scheduler, "linux/interface/m0/master") is PENDING
    assert state(scheduler, "linux/interface/m0") is CONFIGURED
    assert ns.link("m0").get("master") is None


# -- addresses and routes -------------------------------------------------------------------


def test_addresses_are_added_and_removed_one_by_one(linux) -> None:
    ns, scheduler, _plugin = linux
    key = "linux/interface/br0"
    commit(scheduler, {key: {"type": "bridge", "addresses": ["10.1.0.1/24", "fd00::1/64"]}})
    assert sorted(ns.addresses("br0")) == ["10.1.0.1/24", "fd00::1/64"]
    assert state(scheduler, "linux/interface/br0/address/fd00::1/64") is CONFIGURED
    commit(scheduler, {key: {"type": "bridge", "addresses": ["10.1.0.1/24", "10.2.0.1/16"]}})
    assert sorted(ns.addresses("br0")) == ["10.1.0.1/24", "10.2.0.1/16"]
    assert state(scheduler, "linux/interface/br0/address/fd00::1/64") is ValueState.NONEXISTENT


def test_route_pending_until_interface_and_gateway_subnet_address(linux) -> None:
    ns, scheduler, _plugin = linux
    route = "linux/route/main/10.9.0.0/16/r0"
    commit(scheduler, {route: {"gateway": "10.0.0.2", "metric": 50}})
    status = scheduler.get_value_status(route)
    assert status.state is PENDING
    assert status.details == ("interface r0", "address of r0 in the subnet of 10.0.0.2")
    commit(scheduler, {"linux/interface/r0": veth("r1", addresses=["10.1.0.1/24"]),
                       "linux/interface/r1": veth("r0")})
    # The interface exists, but none of its addresses reaches the gateway.
    status = scheduler.get_value_status(route)
    assert status.state is PENDING
    assert status.details == ("address of r0 in the subnet of 10.0.0.2",)
    commit(scheduler, {"linux/interface/r0": veth("r1", addresses=["10.1.0.1/24",
                                                                   "10.0.0.1/24"])})
    assert state(scheduler, route) is CONFIGURED
    shown = [r for r in ns.routes("main") if r["dst"] == "10.9.0.0/16"]
    assert shown and shown[0]["gateway"] == "10.0.0.2" and shown[0]["metric"] == 50
    assert sb_values(scheduler, "linux/route/")[route] == parse_route(
        route, {"gateway": "10.0.0.2", "metric": 50}).to_value()
    # Gateway change in place; removing the address pends the route again.
    commit(scheduler, {route: {"gateway": "10.0.0.3", "metric": 50}})
    assert [r["gateway"] for r in ns.routes("main") if r["dst"] == "10.9.0.0/16"] == ["10.0.0.3"]
    commit(scheduler, {"linux/interface/r0": veth("r1", addresses=["10.1.0.1/24"])})
    assert state(scheduler, route) is PENDING
    assert not [r for r in ns.routes("main") if r["dst"] == "10.9.0.0/16"]


def test_routes_in_other_tables_ipv6_and_metric_change(linux) -> None:
    ns, scheduler, _plugin = linux
    values = {
        "linux/interface/s0": veth("s1", addresses=["10.3.0.1/24", "fd00:3::1/64"]),
        "linux/interface/s1": veth("s0"),
        "linux/route/1000/10.30.0.0/16/s0": {},
        "linux/route/main/fd00:30::/64/s0": {"gateway": "fd00:3::2"},
    }
    commit(scheduler, values)
    assert all(state(scheduler, key) is CONFIGURED for key in values)
    assert [r["dst"] for r in ns.routes("1000")] == ["10.30.0.0/16"]
    assert ns.routes("1000")[0]["scope"] == "link"
    assert any(r["dst"] == "fd00:30::/64" and r["gateway"] == "fd00:3::2"
               for r in ns.routes("main"))
    commit(scheduler, {"linux/route/1000/10.30.0.0/16/s0": {"metric": 5}})
    assert [(r["dst"], r.get("metric")) for r in ns.routes("1000")] == [("10.30.0.0/16", 5)]


# -- host links -----------------------------------------------------------------------------


def test_host_link_is_obtained_and_unblocks_dependents(linux) -> None:
    ns, scheduler, _plugin = linux
    route = "linux/route/main/10.50.0.0/16/h0"
    macvlan = "linux/interface/mv0"
    commit(scheduler, {route: {"gateway": "10.5.0.2"},
                       macvlan: {"type": "macvlan", "macvlan": {"parent": "h0"}}})
    assert state(scheduler, route) is PENDING and state(scheduler, macvlan) is PENDING
    # Up before the address: the route's dependencies (the host link and an address in the
    # gateway's subnet) then appear on a link that can already carry it.
    ns.ip("link", "add", "h0", "type", "veth", "peer", "name", "h1")
    ns.ip("link", "set", "h1", "up")
    ns.ip("link", "set", "h0", "up")
    ns.ip("addr", "add", "10.5.0.1/24", "dev", "h0")
    wait_until(lambda: state(scheduler, route) is CONFIGURED, timeout=15,
               message="route via the host link configured")
    wait_until(lambda: state(scheduler, macvlan) is CONFIGURED, timeout=15,
               message="macvlan on the host link configured")
    host = scheduler.get_value_status("linux/interface/host/h0")
    assert host.state is ValueState.OBTAINED and host.origin is ValueOrigin.FROM_SB
    assert any(r["dst"] == "10.50.0.0/16" for r in ns.routes("main"))
    # The host link goes away: its value disappears and dependents wait again.
    ns.ip("link", "del", "h0")
    wait_until(lambda: state(scheduler, "linux/interface/host/h0") is ValueState.NONEXISTENT,
               timeout=15, message="host link retracted")
    wait_until(lambda: state(scheduler, macvlan) is PENDING, timeout=15,
               message="macvlan pending again")
    assert state(scheduler, route) is PENDING


def test_host_links_are_read_only_for_the_nb(linux) -> None:
    _ns, scheduler, _plugin = linux
    with pytest.raises(TransactionError):
        commit(scheduler, {"linux/interface/host/eth9": {"name": "eth9"}})
    status = scheduler.get_value_status("linux/interface/host/eth9")
    assert status.state is ValueState.INVALID and "read-only" in str(status.error)


def test_resync_never_removes_host_links_but_removes_kvmesh_leftovers(linux) -> None:
    ns, scheduler, _plugin = linux
    commit(scheduler, {"linux/interface/old0": {"type": "bridge"}})
    ns.ip("link", "add", "hostbr", "type", "bridge")
    wait_until(lambda: state(scheduler, "linux/interface/host/hostbr") is ValueState.OBTAINED,
               timeout=15)
    scheduler.resync({"linux/interface/new0": {"type": "bridge"}}, kind="full")
    assert ns.link_names() == {"lo", "hostbr", "new0"}
    assert state(scheduler, "linux/interface/host/lo") is ValueState.OBTAINED


# -- resync, restart, drift -----------------------------------------------------------------


def _pair_with_route() -> dict:
    return {
        "linux/interface/d0": veth("d1", mtu=1400, addresses=["10.4.0.1/24", "fd00:4::1/64"]),
        "linux/interface/d1": veth("d0"),
        "linux/route/main/10.40.0.0/16/d0": {"gateway": "10.4.0.2"},
    }


def test_drift_is_repaired_by_downstream_resync(linux) -> None:
    ns, scheduler, _plugin = linux
    commit(scheduler, _pair_with_route())
    before = ns.dump()
    ns.ip("link", "set", "d0", "mtu", "1500")
    ns.ip("addr", "del", "10.4.0.1/24", "dev", "d0")
    ns.ip("addr", "add", "10.4.0.99/24", "dev", "d0")
    ns.ip("route", "del", "10.40.0.0/16", check=False)  # may be gone with the address already
    ns.ip("link", "set", "d1", "down")
    assert ns.dump() != before
    scheduler.resync(kind="downstream")
    assert ns.dump() == before
    record = scheduler.transaction_history()[-1]
    assert record.executed, "the resync repaired something"
    # Nothing left to repair: the next resync executes nothing.
    scheduler.resync(kind="downstream")
    assert not scheduler.transaction_history()[-1].executed
    # A change right after a resync is seen by the next one (no stale dump is reused).
    ns.ip("link", "set", "d0", "mtu", "1300")
    scheduler.resync(kind="downstream")
    assert ns.link("d0")["mtu"] == 1400


def test_deleted_link_and_bridge_membership_are_restored(linux) -> None:
    ns, scheduler, _plugin = linux
    commit(scheduler, {
        "linux/interface/br0": {"type": "bridge", "addresses": ["10.11.0.1/24"]},
        "linux/interface/m0": veth("m1", master="br0"),
        "linux/interface/m1": veth("m0"),
        "linux/route/main/10.110.0.0/16/br0": {"gateway": "10.11.0.2"},
    })
    before = ns.dump()
    ns.ip("link", "set", "m0", "nomaster")
    ns.ip("link", "del", "br0")  # takes its address and route with it
    scheduler.resync(kind="downstream")
    assert ns.dump() == before
    assert state(scheduler, "linux/route/main/10.110.0.0/16/br0") is CONFIGURED


def test_restart_adopts_existing_state_without_changes(ns) -> None:
    assert_warm_restart_writes_nothing(ns, _pair_with_route())


# -- transactions ---------------------------------------------------------------------------


def test_revert_leaves_the_namespace_exactly_as_before(linux) -> None:
    ns, scheduler, _plugin = linux
    commit(scheduler, {"linux/interface/keep0": {"type": "bridge", "addresses": ["10.6.0.1/24"]}})
    before = ns.dump()
    txn = {
        "linux/interface/n0": veth("n1", addresses=["10.7.0.1/24"]),
        "linux/interface/n1": veth("n0"),
        "linux/route/main/10.70.0.0/16/n0": {"gateway": "10.7.0.2"},
        "linux/interface/keep0": {"type": "bridge", "mtu": 1400, "addresses": ["10.6.0.2/24"]},
        # The kernel refuses a macvlan with a larger MTU than its parent: the txn fails late.
        "linux/interface/zz0": {"type": "macvlan", "mtu": 9000, "macvlan": {"parent": "n0"}},
    }
    with pytest.raises(TransactionError) as caught:
        commit(scheduler, txn, revert=True)
    assert "linux/interface/zz0" in caught.value.errors
    assert ns.dump() == before


def test_invalid_values_are_rejected_with_field_errors_and_never_applied(linux) -> None:
    ns, scheduler, _plugin = linux
    key = "linux/interface/bad0"
    with pytest.raises(TransactionError) as caught:
        commit(scheduler, {key: {"type": "bridge", "mtu": 20, "addresses": ["10.0.0.1"]},
                           "linux/route/main/10.0.0.1/8/bad0": {}})
    status = scheduler.get_value_status(key)
    assert status.state is ValueState.INVALID
    assert set(status.details) == {"mtu", "addresses[0]"}
    assert "field 'mtu': must be an integer 68..65535" in str(status.error)
    assert key in caught.value.errors
    route = scheduler.get_value_status("linux/route/main/10.0.0.1/8/bad0")
    assert route.state is ValueState.INVALID and "host bits zero" in str(route.error)
    assert ns.link_names() == {"lo"}

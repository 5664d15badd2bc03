"""Routes beyond one device and one gateway, through a real KVScheduler in a namespace per test:
IPv6, typed routes (blackhole, unreachable, prohibit), ECMP next hops, preferred source."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler import TransactionError, ValueState
from southbound.linux.models.route import parse_route
from tests.southbound.linux.harness import (
    agent,
    assert_warm_restart_writes_nothing,
    commit,
    last_ops,
    last_record,
    sb_values,
    state,
)
from tests.util import wait_until

pytestmark = pytest.mark.netns

CONFIGURED, PENDING = ValueState.CONFIGURED, ValueState.PENDING
BLACKHOLE = "linux/route/main/203.0.113.0/24/-"
UNREACHABLE6 = "linux/route/main/2001:db8:1::/64/-"
ECMP = "linux/route/100/0.0.0.0/0/-"
ECMP6 = "linux/route/main/fd99::/64/-"


def veth(name: str, peer: str, addresses: list[str]) -> dict:
    return {f"linux/interface/{name}": {"type": "veth", "veth": {"peer": peer},
                                         "addresses": addresses},
            f"linux/interface/{peer}": {"type": "veth", "veth": {"peer": name}}}


def links() -> dict:
    return {**veth("a0", "a1", ["10.0.0.1/24", "fd00:a::1/64"]),
            **veth("b0", "b1", ["10.1.0.1/24", "fd00:b::1/64"])}


def ecmp(weight: int = 1) -> dict:
    return {"nexthops": [{"gateway": "10.0.0.2", "dev": "a0", "weight": weight},
                         {"gateway": "10.1.0.2", "dev": "b0"}]}


def ecmp6() -> dict:
    return {"nexthops": [{"gateway": "fd00:a::2", "dev": "a0"},
                         {"gateway": "fd00:b::2", "dev": "b0", "weight": 3}]}


def kernel_route(ns, dst: str, table: str = "main") -> dict[str, Any]:
    """The route to ``dst`` (``default`` for 0.0.0.0/0) as ``ip -j route`` shows it ({}: none)."""
    found = [route for route in ns.routes(table) if route["dst"] == dst]
    return found[0] if found else {}


def hops(route: dict[str, Any]) -> list[tuple[str, str, int]]:
    return sorted((hop["dev"], hop["gateway"], hop.get("weight", 1)) for hop in route["nexthops"])


# -- typed routes ---------------------------------------------------------------------------


def test_typed_routes_are_created_replaced_in_place_and_deleted(linux) -> None:
    ns, scheduler, _plugin = linux
    commit(scheduler, {BLACKHOLE: {"type": "blackhole"},
                       UNREACHABLE6: {"type": "unreachable", "metric": 10}})
    assert state(scheduler, BLACKHOLE) is CONFIGURED
    assert state(scheduler, UNREACHABLE6) is CONFIGURED
    assert kernel_route(ns, "203.0.113.0/24")["type"] == "blackhole"
    assert kernel_route(ns, "2001:db8:1::/64")["type"] == "unreachable"
    assert sb_values(scheduler, "linux/route/")[BLACKHOLE] == parse_route(
        BLACKHOLE, {"type": "blackhole"}).to_value()
    # A new type is replaced in place; a new metric re-creates the route.
    commit(scheduler, {BLACKHOLE: {"type": "prohibit"}})
    assert last_ops(scheduler, BLACKHOLE) == [("UPDATE", False)]
    assert kernel_route(ns, "203.0.113.0/24")["type"] == "prohibit"
    commit(scheduler, {UNREACHABLE6: {"type": "unreachable", "metric": 20}})
    assert [op for op, _ in last_ops(scheduler, UNREACHABLE6)] == ["DELETE", "CREATE"]
    assert kernel_route(ns, "2001:db8:1::/64")["metric"] == 20
    commit(scheduler, {BLACKHOLE: None, UNREACHABLE6: None})
    assert kernel_route(ns, "203.0.113.0/24") == {}
    assert kernel_route(ns, "2001:db8:1::/64") == {}


# -- ECMP -----------------------------------------------------------------------------------


def test_ecmp_route_waits_for_every_next_hop_and_goes_before_them(linux) -> None:
    ns, scheduler, _plugin = linux
    commit(scheduler, {ECMP: ecmp(), ECMP6: ecmp6()})
    status = scheduler.get_value_status(ECMP)
    assert status.state is PENDING
    assert set(status.details) == {"interface a0", "interface b0",
                                   "address of a0 in the subnet of 10.0.0.2",
                                   "address of b0 in the subnet of 10.1.0.2"}
    commit(scheduler, veth("a0", "a1", ["10.0.0.1/24", "fd00:a::1/64"]))
    status = scheduler.get_value_status(ECMP)
    assert status.state is PENDING
    assert set(status.details) == {"interface b0", "address of b0 in the subnet of 10.1.0.2"}
    commit(scheduler, veth("b0", "b1", ["10.1.0.1/24", "fd00:b::1/64"]))
    assert state(scheduler, ECMP) is CONFIGURED and state(scheduler, ECMP6) is CONFIGURED
    assert hops(kernel_route(ns, "default", "100")) == [("a0", "10.0.0.2", 1),
                                                        ("b0", "10.1.0.2", 1)]
    assert hops(kernel_route(ns, "fd99::/64")) == [("a0", "fd00:a::2", 1),
                                                  ("b0", "fd00:b::2", 3)]
    sb = sb_values(scheduler, "linux/route/")
    assert sb[ECMP] == parse_route(ECMP, ecmp()).to_value()
    assert sb[ECMP6] == parse_route(ECMP6, ecmp6()).to_value()
    # A new weight is replaced in place.
    commit(scheduler, {ECMP: ecmp(weight=5)})
    assert last_ops(scheduler, ECMP) == [("UPDATE", False)]
    assert hops(kernel_route(ns, "default", "100"))[0] == ("a0", "10.0.0.2", 5)
    # One next hop's device goes: the route is removed first, then waits.
    commit(scheduler, {"linux/interface/b0": None})
    executed = [op.key for op in last_record(scheduler).executed]
    assert executed.index(ECMP) < executed.index("linux/interface/b0")
    assert state(scheduler, ECMP) is PENDING and state(scheduler, ECMP6) is PENDING
    assert kernel_route(ns, "default", "100") == {} and kernel_route(ns, "fd99::/64") == {}
    commit(scheduler, {ECMP: None, ECMP6: None})
    assert state(scheduler, ECMP) is ValueState.NONEXISTENT


def test_multipath_over_one_device_keeps_the_device_in_its_key(linux) -> None:
    ns, scheduler, _plugin = linux
    key = "linux/route/main/10.70.0.0/16/a0"
    value = {"nexthops": [{"gateway": "10.0.0.2", "dev": "a0"},
                          {"gateway": "10.0.0.3", "dev": "a0", "weight": 2}]}
    commit(scheduler, {**links(), key: value})
    assert state(scheduler, key) is CONFIGURED
    assert hops(kernel_route(ns, "10.70.0.0/16")) == [("a0", "10.0.0.2", 1),
                                                     ("a0", "10.0.0.3", 2)]
    assert sb_values(scheduler, "linux/route/")[key] == parse_route(key, value).to_value()


# -- preferred source -----------------------------------------------------------------------


def test_route_with_a_preferred_source_waits_for_that_address_on_any_link(linux) -> None:
    ns, scheduler, _plugin = linux
    route = "linux/route/main/10.90.0.0/16/a0"
    route6 = "linux/route/main/fd90::/64/a0"
    commit(scheduler, {**links(), route: {"gateway": "10.0.0.2", "src": "192.0.2.7"},
                       route6: {"gateway": "fd00:a::2", "src": "fd00:7::7"}})
    status = scheduler.get_value_status(route)
    assert status.state is PENDING and status.details == ("address 192.0.2.7 on some link",)
    # The source lives on another link than the route's device (a kvmesh bridge).
    commit(scheduler, {"linux/interface/lo7": {
        "type": "bridge", "addresses": ["192.0.2.7/32", "fd00:7::7/128"]}})
    assert state(scheduler, route) is CONFIGURED and state(scheduler, route6) is CONFIGURED
    assert kernel_route(ns, "10.90.0.0/16")["prefsrc"] == "192.0.2.7"
    assert kernel_route(ns, "fd90::/64")["prefsrc"] == "fd00:7::7"
    # A new source is replaced in place; losing the address pends the route first.
    commit(scheduler, {route: {"gateway": "10.0.0.2", "src": "10.1.0.1"}})
    assert last_ops(scheduler, route) == [("UPDATE", False)]
    assert kernel_route(ns, "10.90.0.0/16")["prefsrc"] == "10.1.0.1"
    commit(scheduler, {"linux/interface/lo7": {"type": "bridge"}})
    assert state(scheduler, route6) is PENDING and kernel_route(ns, "fd90::/64") == {}
    assert state(scheduler, route) is CONFIGURED


def test_a_host_links_address_satisfies_the_source(linux) -> None:
    ns, scheduler, _plugin = linux
    route = "linux/route/main/10.91.0.0/16/a0"
    commit(scheduler, {**links(), route: {"src": "198.51.100.9"}})
    assert state(scheduler, route) is PENDING
    ns.ip("link", "add", "h0", "type", "bridge")
    ns.ip("addr", "add", "198.51.100.9/32", "dev", "h0")
    wait_until(lambda: state(scheduler, route) is CONFIGURED, timeout=15,
               message="route configured once the host link has the source address")
    assert kernel_route(ns, "10.91.0.0/16")["prefsrc"] == "198.51.100.9"


# -- drift, restart, ownership --------------------------------------------------------------


def _everything() -> dict:
    return {**links(), BLACKHOLE: {"type": "blackhole"}, UNREACHABLE6: {"type": "unreachable"},
            ECMP: ecmp(weight=2), ECMP6: ecmp6(),
            "linux/route/main/10.90.0.0/16/a0": {"gateway": "10.0.0.2", "src": "10.1.0.1"},
            # IPv4 next hops may be devices only (scope universe, as `ip route` makes them).
            "linux/route/main/10.77.0.0/16/-": {"nexthops": [{"dev": "a0"},
                                                             {"dev": "b0", "weight": 2}]}}


def test_drift_of_new_route_kinds_is_repaired_by_downstream_resync(linux) -> None:
    ns, scheduler, _plugin = linux
    commit(scheduler, _everything())
    before = ns.dump()
    ns.ip("route", "del", "203.0.113.0/24")
    ns.ip("-6", "route", "del", "2001:db8:1::/64")
    ns.ip("route", "replace", "default", "table", "100", "proto", "107", "nexthop", "via",
          "10.0.0.2", "dev", "a0", "weight", "9", "nexthop", "via", "10.1.0.2", "dev", "b0")
    ns.ip("route", "replace", "10.90.0.0/16", "via", "10.0.0.2", "dev", "a0", "proto", "107")
    ns.ip("-6", "route", "del", "fd99::/64")
    assert ns.dump() != before
    scheduler.resync(kind="downstream")
    assert ns.dump() == before
    assert last_record(scheduler).executed
    scheduler.resync(kind="downstream")
    assert not last_record(scheduler).executed


def test_warm_restart_makes_no_southbound_write(ns) -> None:
    assert_warm_restart_writes_nothing(ns, _everything())


def test_routes_made_by_others_are_never_deleted(linux) -> None:
    ns, scheduler, _plugin = linux
    commit(scheduler, links())
    ns.ip("route", "add", "blackhole", "203.0.113.0/24", "metric", "7")
    ns.ip("route", "add", "10.80.0.0/16", "proto", "static", "nexthop", "via", "10.0.0.2",
          "dev", "a0", "nexthop", "via", "10.1.0.2", "dev", "b0")
    ns.ip("-6", "route", "add", "prohibit", "2001:db8:1::/64", "metric", "7")
    foreign = [r for r in ns.dump()["routes"] if ("dst", "10.80.0.0/16") in r
               or ("dst", "203.0.113.0/24") in r or ("dst", "2001:db8:1::/64") in r]
    assert len(foreign) == 3
    # kvmesh routes next to them (same destinations, other metrics), then gone again.
    commit(scheduler, {BLACKHOLE: {"type": "blackhole"}, UNREACHABLE6: {"type": "unreachable"}})
    assert state(scheduler, BLACKHOLE) is CONFIGURED
    # A full resync whose desired state has the links only removes kvmesh's routes alone.
    scheduler.resync(links(), kind="full")
    assert state(scheduler, BLACKHOLE) is ValueState.NONEXISTENT
    remaining = ns.dump()["routes"]
    assert all(route in remaining for route in foreign)
    assert kernel_route(ns, "203.0.113.0/24")["metric"] == 7
    assert not [k for k in sb_values(scheduler, "linux/route/") if "10.80.0.0" in k]


# -- validation -----------------------------------------------------------------------------


@pytest.mark.parametrize(("key", "value", "fragment"), [
    ("linux/route/main/203.0.113.0/24/a0", {"type": "blackhole"}, "must be '-'"),
    ("linux/route/main/203.0.113.0/24/-", {}, "needs a type other than 'unicast'"),
    ("linux/route/main/203.0.113.0/24/-", {"type": "blackhole", "gateway": "10.0.0.1"},
     "not allowed with type 'blackhole'"),
    (ECMP, {"nexthops": [{"gateway": "10.0.0.2", "dev": "a0"}]}, "at least two"),
    ("linux/route/100/0.0.0.0/0/a0", ecmp(), "must be '-'"),
    (ECMP, {"nexthops": [{"gateway": "10.0.0.2", "dev": "a0"},
                         {"gateway": "10.0.0.3", "dev": "a0"}]}, "must be 'a0'"),
    (ECMP, {**ecmp(), "gateway": "10.0.0.9"}, "not allowed with nexthops"),
    (ECMP6, {"nexthops": [{"dev": "a0"}, {"gateway": "fd00:b::2", "dev": "b0"}]},
     "required for an IPv6 next hop"),
    (ECMP, {"nexthops": [{"gateway": "10.0.0.2", "dev": "a0", "weight": 0},
                         {"gateway": "10.1.0.2", "dev": "b0"}]}, "weight"),
    ("linux/route/main/10.90.0.0/16/a0", {"src": "fd00::1"}, "IPv4"),
    ("linux/route/main/10.90.0.0/16/a0", {"type": "anycast"}, "type"),
])
def test_bad_route_values_are_invalid_with_a_one_line_reason(linux, key, value,
                                                             fragment) -> None:
    ns, scheduler, _plugin = linux
    with pytest.raises(TransactionError):
        commit(scheduler, {key: value})
    status = scheduler.get_value_status(key)
    assert status.state is ValueState.INVALID
    reason = str(status.error)
    assert fragment in reason and "\n" not in reason, reason
    assert not [r for r in ns.routes() if r.get("protocol") == "107"]


# -- plan -----------------------------------------------------------------------------------


def test_plan_shows_what_apply_does_and_nothing_for_an_unchanged_state(ns) -> None:
    values = _everything()
    changed = {**values, ECMP: ecmp(weight=4),
               "linux/route/main/10.90.0.0/16/a0": {"gateway": "10.0.0.2", "src": "10.0.0.1"}}
    with agent(ns) as (first, _plugin):
        commit(first, values)
        assert first.plan(values) == []
        assert first.plan(values, resync="full") == []
        # A changed weight and source: the plan is the apply, operation for operation.
        planned = [(str(op.op), op.key) for op in first.plan(changed)]
        assert sorted(planned) == [("UPDATE", ECMP),
                                   ("UPDATE", "linux/route/main/10.90.0.0/16/a0")]
        commit(first, changed)
        executed = [(str(op.op), op.key) for op in last_record(first).executed]
        assert sorted(executed) == sorted(planned)
    # After a restart, the same desired state plans to nothing (the kernel's state reads back
    # exactly as the model's canonical values).
    with agent(ns) as (second, _plugin):
        assert second.plan(changed, resync="full") == []

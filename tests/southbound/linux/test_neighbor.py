"""linux/neighbor/<dev>/<ip> through a real scheduler and plugin, in a namespace per test."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler import TransactionError, TxnOperation, ValueState
from southbound.linux.context import KVMESH_ROUTE_PROTO
from tests.southbound.linux.harness import (
    commit,
    last_writes,
    linux_plugin,
    sb_values,
    state,
    veth_pair,
)
from tests.util import wait_until

pytestmark = pytest.mark.netns

CONFIGURED = ValueState.CONFIGURED
PENDING = ValueState.PENDING
V4 = "linux/neighbor/n0/10.9.0.2"
V6 = "linux/neighbor/n0/fd00:9::2"
MAC = "02:00:00:00:09:02"


def neighbors(ns: Any) -> dict[tuple[str, str], dict[str, Any]]:
    """Every neighbor entry (NOARP ones too, which `ip neigh` hides by default)."""
    return {(entry["dev"], entry["dst"]): entry
            for entry in ns.ip_json("neigh", "show", "nud", "all")}


def kvmesh_neighbors(ns: Any) -> dict[tuple[str, str], dict[str, Any]]:
    return {k: v for k, v in neighbors(ns).items()
            if v.get("protocol") == str(KVMESH_ROUTE_PROTO)}


def base() -> dict[str, Any]:
    return veth_pair("n0", "n1", addresses=["10.9.0.1/24", "fd00:9::1/64"])


def test_create_update_in_place_and_delete(ns) -> None:
    with linux_plugin(ns.name) as (scheduler, _plugin):
        commit(scheduler, {**base(), V4: {"mac": MAC},
                           V6: {"mac": MAC, "state": "noarp", "dev": "n0", "ip": "fd00:9::2"}})
        assert state(scheduler, V4) is CONFIGURED and state(scheduler, V6) is CONFIGURED
        found = kvmesh_neighbors(ns)
        assert found[("n0", "10.9.0.2")]["lladdr"] == MAC
        assert found[("n0", "10.9.0.2")]["state"] == ["PERMANENT"]
        assert found[("n0", "fd00:9::2")]["state"] == ["NOARP"]
        assert sb_values(scheduler, "linux/neighbor/")[V4] == {
            "dev": "n0", "ip": "10.9.0.2", "mac": MAC, "state": "permanent"}
        # MAC and state change in place (one replace, no delete).
        commit(scheduler, {V4: {"mac": "02:00:00:00:09:99", "state": "reachable"}})
        record = scheduler.transaction_history()[-1]
        assert [op.op for op in record.executed] == [TxnOperation.UPDATE]
        entry = kvmesh_neighbors(ns)[("n0", "10.9.0.2")]
        assert entry["lladdr"] == "02:00:00:00:09:99" and entry["state"] != ["PERMANENT"]
        assert sb_values(scheduler, "linux/neighbor/")[V4]["state"] == "reachable"
        commit(scheduler, {V4: None, V6: None})
        assert kvmesh_neighbors(ns) == {}


def test_pending_until_the_link_exists_and_removed_before_it_goes(ns) -> None:
    host = "linux/neighbor/h0/10.8.0.2"
    with linux_plugin(ns.name) as (scheduler, _plugin):
        commit(scheduler, {host: {"mac": MAC}, V4: {"mac": MAC}})
        status = scheduler.get_value_status(V4)
        assert status.state is PENDING and status.details == ("interface n0",)
        assert state(scheduler, host) is PENDING
        # A host link (made by hand) satisfies the dependency.
        ns.ip("link", "add", "h0", "type", "veth", "peer", "name", "h1")
        wait_until(lambda: state(scheduler, host) is CONFIGURED, timeout=15,
                   message="neighbor on the host link configured")
        assert ("h0", "10.8.0.2") in kvmesh_neighbors(ns)
        commit(scheduler, base())
        assert state(scheduler, V4) is CONFIGURED
        # The link goes: the neighbor is deleted first, then waits again.
        commit(scheduler, dict.fromkeys(base()))
        ops = [(op.op, op.key) for op in scheduler.transaction_history()[-1].executed]
        assert ops.index((TxnOperation.DELETE, V4)) < ops.index(
            (TxnOperation.DELETE, "linux/interface/n0"))
        assert state(scheduler, V4) is PENDING


def test_downstream_resync_repairs_drift(ns) -> None:
    with linux_plugin(ns.name) as (scheduler, _plugin):
        commit(scheduler, {**base(), V4: {"mac": MAC}, V6: {"mac": MAC}})
        before = kvmesh_neighbors(ns)
        ns.ip("neigh", "del", "10.9.0.2", "dev", "n0")
        ns.ip("neigh", "replace", "fd00:9::2", "lladdr", "02:00:00:00:00:66", "dev", "n0",
              "nud", "permanent")
        scheduler.resync(kind="downstream")
        assert kvmesh_neighbors(ns) == before
        scheduler.resync(kind="downstream")
        assert last_writes(scheduler) == 0


def test_warm_restart_writes_nothing(ns) -> None:
    values = {**base(), V4: {"mac": MAC}, V6: {"mac": MAC, "state": "noarp"}}
    with linux_plugin(ns.name) as (scheduler, _plugin):
        commit(scheduler, values)
    before = kvmesh_neighbors(ns)
    with linux_plugin(ns.name) as (scheduler, _plugin):
        scheduler.resync(values, kind="full")
        assert last_writes(scheduler) == 0
        assert state(scheduler, V4) is CONFIGURED and state(scheduler, V6) is CONFIGURED
    assert kvmesh_neighbors(ns) == before


def test_entries_kvmesh_did_not_make_are_never_deleted(ns) -> None:
    with linux_plugin(ns.name) as (scheduler, _plugin):
        commit(scheduler, base())
        # A static entry made by hand, and one the kernel would have learned (dynamic).
        ns.ip("neigh", "add", "10.9.0.50", "lladdr", "02:00:00:00:00:50", "dev", "n0",
              "nud", "permanent")
        ns.ip("neigh", "add", "10.9.0.2", "lladdr", "02:00:00:00:00:51", "dev", "n0",
              "nud", "stale")
        scheduler.resync(base(), kind="full")
        assert ("n0", "10.9.0.50") in neighbors(ns)
        assert ("n0", "10.9.0.2") in neighbors(ns)
        # Pinning an address the kernel learned replaces the learned entry.
        commit(scheduler, {V4: {"mac": MAC}})
        assert kvmesh_neighbors(ns)[("n0", "10.9.0.2")]["lladdr"] == MAC
        # A static entry of someone else is not taken over: the create fails (retriable).
        taken = "linux/neighbor/n0/10.9.0.50"
        with pytest.raises(TransactionError):
            commit(scheduler, {taken: {"mac": MAC}})
        assert "not kvmesh's" in str(scheduler.get_value_status(taken).error)
        assert neighbors(ns)[("n0", "10.9.0.50")]["lladdr"] == "02:00:00:00:00:50"
        # Deleting it leaves the foreign entry alone.
        commit(scheduler, {taken: None})
        assert ("n0", "10.9.0.50") in neighbors(ns)
        # kvmesh's entry taken over by another owner (protocol 4): deleting leaves it alone.
        ns.ip("neigh", "replace", "10.9.0.2", "lladdr", MAC, "dev", "n0", "nud", "permanent",
              "proto", "4")
        commit(scheduler, {V4: None})
        assert neighbors(ns)[("n0", "10.9.0.2")]["protocol"] == "static"
        assert kvmesh_neighbors(ns) == {}


@pytest.mark.parametrize(("key", "value", "reason"), [
    (V4, {"mac": "01:00:00:00:00:01"}, "field 'mac': must be a unicast MAC address"),
    (V4, {"mac": MAC, "state": "stale"}, "field 'state': must be one of"),
    ("linux/neighbor/n0/FD00:9::2", {"mac": MAC}, "write the address FD00:9::2 as fd00:9::2"),
    ("linux/neighbor/n0/224.0.0.1", {"mac": MAC}, "is not a unicast address"),
    (V4, {"mac": MAC, "ip": "10.9.0.3"}, "field 'ip': must match the key (10.9.0.2)"),
])
def test_bad_values_are_invalid_with_a_one_line_reason(ns, key, value, reason) -> None:
    with linux_plugin(ns.name) as (scheduler, _plugin):
        with pytest.raises(TransactionError):
            commit(scheduler, {**base(), key: value})
        status = scheduler.get_value_status(key)
        assert status.state is ValueState.INVALID
        assert reason in str(status.error) and "\n" not in str(status.error)
        assert kvmesh_neighbors(ns) == {}

"""linux/rule/<ipv4|ipv6>/<priority> through a real scheduler and plugin, in a namespace per
test."""

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
R4 = "linux/rule/ipv4/1000"
R6 = "linux/rule/ipv6/1100"
MARK = "linux/rule/ipv4/1200"


def rules(ns: Any) -> list[dict[str, Any]]:
    return [*ns.ip_json("-4", "rule", "show"), *ns.ip_json("-6", "rule", "show")]


def kvmesh_rules(ns: Any) -> dict[int, dict[str, Any]]:
    return {rule["priority"]: rule for rule in rules(ns)
            if rule.get("protocol") == str(KVMESH_ROUTE_PROTO)}


def kernel_rules(ns: Any) -> list[dict[str, Any]]:
    return [rule for rule in rules(ns) if rule.get("protocol") != str(KVMESH_ROUTE_PROTO)]


def values() -> dict[str, Any]:
    return {R4: {"from": "10.1.0.0/16", "table": 100},
            R6: {"to": "fd00:66::/64", "action": "unreachable"},
            MARK: {"fwmark": 7, "fwmask": 255, "table": "main"}}


def test_create_recreate_on_change_and_delete(ns) -> None:
    with linux_plugin(ns.name) as (scheduler, _plugin):
        kernel = kernel_rules(ns)
        commit(scheduler, values())
        assert all(state(scheduler, key) is CONFIGURED for key in values())
        found = kvmesh_rules(ns)
        assert (found[1000]["src"], found[1000]["srclen"], found[1000]["table"]) == (
            "10.1.0.0", 16, "100")
        assert (found[1100]["dst"], found[1100]["action"]) == ("fd00:66::", "unreachable")
        assert (found[1200]["fwmark"], found[1200]["fwmask"], found[1200]["table"]) == (
            "0x7", "0xff", "main")
        assert sb_values(scheduler, "linux/rule/")[R4] == {
            "priority": 1000, "family": "ipv4", "from": "10.1.0.0/16", "to": None, "iif": None,
            "oif": None, "fwmark": None, "fwmask": None, "table": 100, "action": "lookup"}
        # The kernel cannot change a rule: a new table re-creates it.
        commit(scheduler, {R4: {"from": "10.1.0.0/16", "table": 200}})
        ops = [op.op for op in scheduler.transaction_history()[-1].executed]
        assert ops == [TxnOperation.DELETE, TxnOperation.CREATE]
        assert kvmesh_rules(ns)[1000]["table"] == "200"
        assert len([r for r in rules(ns) if r["priority"] == 1000]) == 1
        commit(scheduler, dict.fromkeys(values()))
        assert kvmesh_rules(ns) == {}
        assert kernel_rules(ns) == kernel


def test_iif_and_oif_wait_for_their_links(ns) -> None:
    key = "linux/rule/ipv4/1300"
    with linux_plugin(ns.name) as (scheduler, _plugin):
        commit(scheduler, {key: {"iif": "r0", "oif": "h0", "table": 100}})
        status = scheduler.get_value_status(key)
        assert status.state is PENDING
        assert set(status.details) == {"incoming interface r0", "outgoing interface h0"}
        commit(scheduler, veth_pair("r0", "r1"))
        assert state(scheduler, key) is PENDING
        ns.ip("link", "add", "h0", "type", "bridge")
        wait_until(lambda: state(scheduler, key) is CONFIGURED, timeout=15,
                   message="rule configured once both links exist")
        rule = kvmesh_rules(ns)[1300]
        assert (rule["iif"], rule["oif"]) == ("r0", "h0")
        # The link goes: the rule is removed first, then waits again.
        commit(scheduler, dict.fromkeys(veth_pair("r0", "r1")))
        ops = [(op.op, op.key) for op in scheduler.transaction_history()[-1].executed]
        assert ops.index((TxnOperation.DELETE, key)) < ops.index(
            (TxnOperation.DELETE, "linux/interface/r0"))
        assert state(scheduler, key) is PENDING and kvmesh_rules(ns) == {}


def test_downstream_resync_repairs_drift(ns) -> None:
    with linux_plugin(ns.name) as (scheduler, _plugin):
        commit(scheduler, values())
        before = kvmesh_rules(ns)
        ns.ip("rule", "del", "priority", "1000")
        ns.ip("-6", "rule", "del", "priority", "1100")
        scheduler.resync(kind="downstream")
        assert kvmesh_rules(ns) == before
        scheduler.resync(kind="downstream")
        assert last_writes(scheduler) == 0


def test_warm_restart_writes_nothing(ns) -> None:
    with linux_plugin(ns.name) as (scheduler, _plugin):
        commit(scheduler, values())
    before = rules(ns)
    with linux_plugin(ns.name) as (scheduler, _plugin):
        scheduler.resync(values(), kind="full")
        assert last_writes(scheduler) == 0
        assert all(state(scheduler, key) is CONFIGURED for key in values())
    assert rules(ns) == before


def test_rules_kvmesh_did_not_make_are_never_deleted(ns) -> None:
    ns.ip("rule", "add", "priority", "1000", "from", "10.1.0.0/16", "table", "100")
    ns.ip("rule", "add", "priority", "2000", "to", "10.2.0.0/16", "table", "100")
    with linux_plugin(ns.name) as (scheduler, _plugin):
        before = rules(ns)
        scheduler.resync({}, kind="full")
        assert rules(ns) == before
        # kvmesh's rule at a priority someone else uses: both live, deleting ours keeps theirs.
        commit(scheduler, {R4: {"from": "10.1.0.0/16", "table": 100}})
        assert len([r for r in rules(ns) if r["priority"] == 1000]) == 2
        commit(scheduler, {R4: None})
        assert rules(ns) == before


@pytest.mark.parametrize(("key", "value", "reason"), [
    ("linux/rule/ipv4/32766", {}, "kernel's default rule"),
    ("linux/rule/ipv4/0", {}, "kernel's default rule"),
    ("linux/rule/inet/10", {}, "family must be ipv4 or ipv6"),
    ("linux/rule/ipv4/010", {}, "priority must be a decimal integer"),
    (R4, {"from": "fd00::/64"}, "field 'from': must be an IPv4 network"),
    (R4, {"to": "10.1.2.3/16"}, "field 'to': must have host bits zero"),
    (R4, {"action": "blackhole", "table": 5}, "field 'table': not allowed with action"),
    (R4, {"fwmask": 255}, "field 'fwmask': needs fwmark"),
    (R4, {"action": "nat"}, "field 'action': must be one of"),
])
def test_bad_values_are_invalid_with_a_one_line_reason(ns, key, value, reason) -> None:
    with linux_plugin(ns.name) as (scheduler, _plugin):
        with pytest.raises(TransactionError):
            commit(scheduler, {key: value})
        status = scheduler.get_value_status(key)
        assert status.state is ValueState.INVALID
        assert reason in str(status.error) and "\n" not in str(status.error)
        assert kvmesh_rules(ns) == {}

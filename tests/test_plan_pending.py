"""`kvmesh plan`/`apply`: which written values a node's scheduler would leave PENDING, and why
(kvmesh/cli/devices.py); the whole flow on a real cluster is in tests/test_operator.py."""

from __future__ import annotations

from kvmesh.cli.devices import (
    Waiting,
    describe_pending,
    describe_unchecked,
    pending_values,
    unchecked_nodes,
)
from kvmesh.statefile import NodeDiff

ROUTE = "linux/route/100/0.0.0.0/0/-"


def _op(key: str, state: str, details: list[str] | None = None,
        absent: list[str] | None = None) -> dict:
    op = {"operation": "CREATE", "key": key, "new_state": state, "details": details or []}
    if absent is not None:
        op["absent"] = absent
    return op


def test_only_written_values_the_plan_ends_pending_are_reported() -> None:
    diffs = {"n2": NodeDiff("n2", added={"linux/interface/r1": {}, ROUTE: {},
                                         "linux/sysctl/x": {}})}
    plans = {"n2": {"operations": [
        _op("linux/interface/r1", "PENDING", ["existing link r1"], ["existing link r1"]),
        _op(ROUTE, "PENDING", ["interface r1"], []),
        # parked PENDING first, then created later in the same plan: not pending
        _op("linux/sysctl/x", "PENDING", ["y"], ["y"]), _op("linux/sysctl/x", "CONFIGURED"),
        # derived, not written by the file
        _op("linux/interface/r1/address/10.0.0.1/24", "PENDING", ["z"], ["z"]),
    ]}}
    pending = pending_values(plans, diffs)
    assert pending == {"n2": {"linux/interface/r1": Waiting(("existing link r1",),
                                                            ("existing link r1",)),
                              ROUTE: Waiting(("interface r1",), ())}}
    assert describe_pending(pending) == [
        "node n2: linux/interface/r1 would stay PENDING: existing link r1: not on node n2 and "
        "not in the desired state",
        f"node n2: {ROUTE} would stay PENDING: waits for interface r1 (desired, but not "
        "created: it waits itself)",
    ]


def test_an_older_agent_is_quoted_without_claiming_what_is_absent() -> None:
    diffs = {"n2": NodeDiff("n2", added={ROUTE: {}})}
    plans = {"n2": {"operations": [_op(ROUTE, "PENDING", ["interface r3"])]}}
    assert describe_pending(pending_values(plans, diffs)) == [
        f"node n2: {ROUTE} would stay PENDING: waits for interface r3"]


def test_a_node_not_asked_is_unchecked_never_missing() -> None:
    diffs = {"n2": NodeDiff("n2", added={ROUTE: {}}), "n3": NodeDiff("n3", added={ROUTE: {}}),
             "n4": NodeDiff("n4", removed={ROUTE: {}})}
    plans = {"n2": {"error": "no agent with a REST API is registered for node 'n2'"},
             "n3": {"operations": []}}
    assert pending_values(plans, diffs) == {}
    assert describe_unchecked(unchecked_nodes(plans, diffs)) == [
        "node n2: dependencies not checked (its scheduler could not be asked: no agent with a "
        "REST API is registered for node 'n2')"]
    # Offline: every node that gets values is unchecked (a removal has no dependency).
    assert set(unchecked_nodes({}, diffs, offline=True)) == {"n2", "n3"}

"""`kvmesh plan`/`apply`: which written values a node's scheduler would leave PENDING, and why
(kvmesh/cli/devices.py); the whole flow on a real cluster is in tests/test_operator.py."""

from __future__ import annotations

from typing import Any

from kvmesh.cli.devices import (
    Waiting,
    describe_coming,
    describe_pending,
    describe_unchecked,
    pending_values,
    unchecked_nodes,
)
from kvmesh.statefile import NodeDiff

ROUTE = "linux/route/100/0.0.0.0/0/-"


def _op(key: str, state: str, details: list[str] | None = None,
        absent: list[str] | None = None, keys: list[list[str]] | None = None) -> dict:
    op: dict[str, Any] = {"operation": "CREATE", "key": key, "new_state": state,
                          "details": details or []}
    if absent is not None:
        op["absent"] = absent
    if keys is not None:
        op["waits_for_keys"] = keys
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
    pending, coming = pending_values(plans, diffs)
    assert coming == {}
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
    assert describe_pending(pending_values(plans, diffs)[0]) == [
        f"node n2: {ROUTE} would stay PENDING: waits for interface r3"]


def test_a_node_not_asked_is_unchecked_never_missing() -> None:
    diffs = {"n2": NodeDiff("n2", added={ROUTE: {}}), "n3": NodeDiff("n3", added={ROUTE: {}}),
             "n4": NodeDiff("n4", removed={ROUTE: {}})}
    plans = {"n2": {"error": "no agent with a REST API is registered for node 'n2'"},
             "n3": {"operations": []}}
    assert pending_values(plans, diffs) == ({}, {})
    assert describe_unchecked(unchecked_nodes(plans, diffs)) == [
        "node n2: dependencies not checked (its scheduler could not be asked: no agent with a "
        "REST API is registered for node 'n2')"]
    # Offline: every node that gets values is unchecked (a removal has no dependency).
    assert set(unchecked_nodes({}, diffs, offline=True)) == {"n2", "n3"}


# docs/examples/vpp-router.yaml: a Linux-CP pair makes the Linux link be0 that Linux values use.
LCP, BE0, BE0_ROUTE = "vpp/lcp/bond0", "linux/interface/be0", "linux/route/main/10.0.0.2/32/be0"
HOST_BE0 = "linux/interface/host/be0"
ROUTER_N1: dict[str, dict[str, Any]] = {
    "vpp/interface/bond0": {"type": "bond"}, LCP: {"host_if_name": "be0"},
    BE0: {"type": "existing", "addresses": ["192.0.2.1/24"]},
    BE0_ROUTE: {"dst": "10.0.0.2/32", "dev": "be0", "gateway": "192.0.2.2"}}
# The node's plan: the pair CONFIGURED, the link and the route PENDING (the link does not exist
# until VPP makes it), with what they wait for by key, as an agent of this release says it.
ROUTER_PLAN = {"n1": {"operations": [
    _op("vpp/interface/bond0", "CONFIGURED"), _op(LCP, "CONFIGURED"),
    _op(BE0, "PENDING", ["existing link be0"], ["existing link be0"], [[HOST_BE0]]),
    _op(BE0_ROUTE, "PENDING", ["interface be0", "address of be0"], [],
        [[BE0, HOST_BE0], [BE0]]),
]}}


def test_a_value_waiting_for_what_a_desired_value_of_another_plane_makes_is_not_missing() -> None:
    diffs = {"n1": NodeDiff("n1", added=dict(ROUTER_N1))}
    pending, coming = pending_values(ROUTER_PLAN, diffs)
    assert pending == {}
    assert coming == {"n1": {BE0: ((HOST_BE0, LCP),),
                             BE0_ROUTE: ((HOST_BE0, LCP), (BE0, None))}}
    assert describe_coming(coming) == [
        f"node n1: {BE0} waits for {HOST_BE0} (made by {LCP})",
        f"node n1: {BE0_ROUTE} waits for {HOST_BE0} (made by {LCP}), {BE0} (which waits for "
        "its provider)"]


def test_a_provider_that_would_not_apply_leaves_its_dependents_reported() -> None:
    """The pair refused (the node has no VPP device), or itself left PENDING, or made in
    another namespace (the node's Linux southbound never sees that link): the Linux values
    would stay PENDING, and are said to."""
    diffs = {"n1": NodeDiff("n1", added=dict(ROUTER_N1))}
    no_vpp = {"n1": {"vpp": ["vpp/interface/bond0", LCP]}}
    pending, coming = pending_values(ROUTER_PLAN, diffs, no_vpp)
    assert coming == {} and set(pending["n1"]) == {BE0, BE0_ROUTE}
    assert describe_pending(pending)[0] == (
        f"node n1: {BE0} would stay PENDING: existing link be0: not on node n1 and not in the "
        f"desired state (made by {LCP}, which would not apply either)")
    plan_pair_pending = {"n1": {"operations": [
        *ROUTER_PLAN["n1"]["operations"],
        _op(LCP, "PENDING", ["interface bond0"], ["interface bond0"], [["vpp/interface/bond0"]])]}}
    pending, coming = pending_values(plan_pair_pending, diffs)
    assert coming == {} and set(pending["n1"]) == {LCP, BE0, BE0_ROUTE}
    # The pair applies, but the route lacks something else too: no word against the pair.
    plan_route_missing = {"n1": {"operations": [
        *ROUTER_PLAN["n1"]["operations"],
        _op(BE0_ROUTE, "PENDING", ["interface be0", "table 7"], ["table 7"],
            [[BE0, HOST_BE0], ["linux/table/7"]])]}}
    pending, coming = pending_values(plan_route_missing, diffs)
    assert set(coming["n1"]) == {BE0} and set(pending["n1"]) == {BE0_ROUTE}
    assert describe_pending(pending) == [
        f"node n1: {BE0_ROUTE} would stay PENDING: table 7: not on node n1 and not in the "
        "desired state; waits for interface be0 (desired, but not created: it waits itself)"]
    elsewhere = {**ROUTER_N1, LCP: {"host_if_name": "be0", "netns": "dataplane"}}
    pending, coming = pending_values(ROUTER_PLAN, {"n1": NodeDiff("n1", added=elsewhere)})
    assert coming == {} and set(pending["n1"]) == {BE0, BE0_ROUTE}


def test_an_older_agent_saying_no_keys_is_taken_at_its_word() -> None:
    """Without the dependencies by key nothing is known to be coming: reported as before."""
    plan = {"n1": {"operations": [
        _op(BE0, "PENDING", ["existing link be0"], ["existing link be0"])]}}
    pending, coming = pending_values(plan, {"n1": NodeDiff("n1", added=dict(ROUTER_N1))})
    assert coming == {} and set(pending["n1"]) == {BE0}
    plan["n1"]["operations"][0]["waits_for_keys"] = HOST_BE0  # malformed: no better
    pending, coming = pending_values(plan, {"n1": NodeDiff("n1", added=dict(ROUTER_N1))})
    assert coming == {} and set(pending["n1"]) == {BE0}

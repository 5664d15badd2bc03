"""Values that would never apply on their node: `plan` reports them, `plan` and `apply` refuse
them unless `--allow-missing-device` (docs/operator.md). Two kinds:

- values for a plane the node does not have (below);
- values that would stay PENDING: a dependency (an interface, a link, another value) that is
  neither in the node's desired state nor on the node, as the node's own scheduler sees it
  (its read-only plan, `POST /scheduler/plan`: the operations left PENDING and, from agents
  that say it, which missing dependencies nothing desired or found there provides, `absent`).
  A node whose scheduler was not asked (`plan --offline`, no agent with a REST API, the agent
  down) is not judged: its dependencies are said to be unchecked, never missing.
  A missing dependency that a desired value of the same node makes for another plane (a Linux-CP
  pair's Linux link, ``ModelSpec.provides``) is not missing: the value waits for its provider,
  which `plan` says; unless the provider would not apply itself (``kvmesh.provided``).

A node's agent announces each southbound device it drives as `node/<N>/device/<dev>` (`linux`,
`vpp`), whatever its state. A value of plane `vpp` for a node that announces devices but no
`vpp` one would never apply: every row UNIMPLEMENTED, as a VPP file applied to a Linux-only node
showed with no reason. A node that announces no device at all (its agent has not started yet, or
an unknown node written with --allow-unknown-node) is not judged: nothing is known of it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import click

from kvmesh.agent.keys import NODE, device_of
from kvmesh.agent.status import waits_for_keys
from kvmesh.provided import Coming, describe_waits, waiting_for_providers
from kvmesh.statefile import NodeDiff
from kvstore import KvStoreClient

ALLOW_OPTION = "--allow-missing-device"
F = TypeVar("F", bound=Callable[..., Any])
Missing = dict[str, dict[str, list[str]]]  # node -> plane it lacks -> model keys for it


@dataclass(frozen=True)
class Waiting:
    """A written value the node's scheduler would leave PENDING."""

    waits_for: tuple[str, ...]  # the labels of its missing dependencies
    absent: tuple[str, ...] | None  # of those, what nothing provides; None: the agent is older
    # the same dependencies by key (the keys any one of which satisfies each); None: older agent
    keys: tuple[tuple[str, ...], ...] | None = None
    # desired values that would make a missing dependency but would not apply themselves
    makers_not_applied: tuple[str, ...] = ()


Pending = dict[str, dict[str, Waiting]]  # node -> model key -> why it would stay PENDING


def allow_missing_device_option(command: F) -> F:
    return click.option(
        ALLOW_OPTION, "allow_missing_device", is_flag=True,
        help="Write values for a plane the node has no device of (no node/<N>/device/<plane>, "
             "e.g. vpp on a node without VPP), or whose dependency (e.g. an interface) is "
             "neither desired nor on the node: they would not apply until it has them.")(command)


def node_devices(client: KvStoreClient, node: str) -> set[str]:
    """The devices `node`'s agent announces (keys only: hashes are dumped)."""
    prefix = f"{NODE}{node}/device/"
    return {key[len(prefix):] for key in client.hash_dump(prefix)} - {""}


def missing_devices(client: KvStoreClient, diffs: Mapping[str, NodeDiff]) -> Missing:
    """For each node that announces devices: the values to write whose plane it has none of."""
    missing: Missing = {}
    for node, diff in diffs.items():
        planes = {device_of(key) for key, value in diff.writes().items() if value is not None}
        if not planes:
            continue
        devices = node_devices(client, node)
        if not devices:
            continue
        for key, value in sorted(diff.writes().items()):
            if value is not None and device_of(key) not in devices:
                missing.setdefault(node, {}).setdefault(device_of(key), []).append(key)
    return missing


def describe(missing: Missing) -> list[str]:
    """One line per node and plane: which values, and why they would not apply."""
    lines = []
    for node, planes in sorted(missing.items()):
        for plane, keys in sorted(planes.items()):
            shown = ", ".join(keys[:3]) + (f" (+{len(keys) - 3} more)" if len(keys) > 3 else "")
            lines.append(f"node {node} has no {plane} device (no {NODE}{node}/device/{plane}): "
                         f"{len(keys)} value(s) would not apply there: {shown}")
    return lines


def pending_values(plans: Mapping[str, Any], diffs: Mapping[str, NodeDiff],
                   missing: Missing | None = None) -> tuple[Pending, dict[str, Coming]]:
    """For each node whose scheduler plan was fetched: the values to write it would leave
    PENDING (the last operation on a key is the state the plan ends in), split into those that
    would stay PENDING and those that wait for a provider: a desired value of the node that
    makes what they lack and is not refused itself (`missing`: values for a device the node
    does not have; ``kvmesh.provided``)."""
    pending: Pending = {}
    coming: dict[str, Coming] = {}
    for node, plan in plans.items():
        if "error" in plan or node not in diffs:
            continue
        written = {key: value for key, value in diffs[node].writes().items()
                   if value is not None}
        last = {op["key"]: op for op in plan.get("operations") or ()}
        waiting = {key: _waiting(last[key]) for key in sorted(written.keys() & last.keys())
                   if last[key].get("new_state") == "PENDING"}
        refused = set(waiting).union(*(missing or {}).get(node, {}).values())
        from kvmesh.agent.models import provided_by  # every model: only when planning

        provided = provided_by(written)
        live = written.keys() - refused
        found = waiting_for_providers(
            {key: w.keys for key, w in waiting.items() if w.keys is not None}, provided,
            live.__contains__)
        if found:
            coming[node] = found
        for key, w in waiting.items():
            if key not in found:
                makers = sorted({provided[k] for keys in w.keys or () for k in keys
                                 if k in provided} - live - found.keys())
                pending.setdefault(node, {})[key] = dataclasses.replace(
                    w, makers_not_applied=tuple(makers))
    return pending, coming


def _waiting(op: Mapping[str, Any]) -> Waiting:
    absent, keys = op.get("absent"), waits_for_keys(op)
    return Waiting(tuple(op.get("details") or ()), None if absent is None else tuple(absent),
                   None if keys is None else tuple(tuple(k) for k in keys))


def describe_coming(coming: Mapping[str, Coming]) -> list[str]:
    """One line per value that waits for a provider, saying which."""
    return [f"node {node}: {key} waits for {describe_waits(waits)}"
            for node, values in sorted(coming.items()) for key, waits in sorted(values.items())]


def unchecked_nodes(plans: Mapping[str, Any], diffs: Mapping[str, NodeDiff],
                    offline: bool = False) -> dict[str, str]:
    """Node -> why its values' dependencies were not checked (its scheduler not asked)."""
    out = {}
    for node, diff in diffs.items():
        if not any(value is not None for value in diff.writes().values()):
            continue
        if offline:
            out[node] = "--offline: its scheduler was not asked"
        elif "error" in plans.get(node, {}):
            out[node] = f"its scheduler could not be asked: {plans[node]['error']}"
    return out


def describe_pending(pending: Pending) -> list[str]:
    """One line per value that would stay PENDING, saying which dependency it lacks and why."""
    lines = []
    for node, values in sorted(pending.items()):
        for key, waiting in sorted(values.items()):
            if waiting.absent is None:
                why = "waits for " + ", ".join(waiting.waits_for)
            else:
                why = "; ".join(
                    [f"{label}: not on node {node} and not in the desired state"
                     for label in waiting.absent]
                    + [f"waits for {label} (desired, but not created: it waits itself)"
                       for label in waiting.waits_for if label not in waiting.absent])
            if waiting.makers_not_applied:
                why += (f" (made by {', '.join(waiting.makers_not_applied)}, which would not "
                        "apply either)")
            lines.append(f"node {node}: {key} would stay PENDING: {why}")
    return lines


def describe_unchecked(unchecked: Mapping[str, str]) -> list[str]:
    return [f"node {node}: dependencies not checked ({why})"
            for node, why in sorted(unchecked.items())]

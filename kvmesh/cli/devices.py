"""Values for a plane a node does not have: `plan` reports them, `plan --detailed-exitcode` and
`apply` refuse them unless `--allow-missing-device` (docs/operator.md).

A node's agent announces each southbound device it drives as `node/<N>/device/<dev>` (`linux`,
`vpp`), whatever its state. A value of plane `vpp` for a node that announces devices but no
`vpp` one would never apply: every row UNIMPLEMENTED, as a VPP file applied to a Linux-only node
showed with no reason. A node that announces no device at all (its agent has not started yet, or
an unknown node written with --allow-unknown-node) is not judged: nothing is known of it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import click

from kvmesh.agent.keys import NODE, device_of
from kvmesh.statefile import NodeDiff
from kvstore import KvStoreClient

ALLOW_OPTION = "--allow-missing-device"
F = TypeVar("F", bound=Callable[..., Any])
Missing = dict[str, dict[str, list[str]]]  # node -> plane it lacks -> model keys for it


def allow_missing_device_option(command: F) -> F:
    return click.option(
        ALLOW_OPTION, "allow_missing_device", is_flag=True,
        help="Write values for a plane the node has no device of (no node/<N>/device/<plane>, "
             "e.g. vpp on a node without VPP): they would not apply until it has one.")(command)


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

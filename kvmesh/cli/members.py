"""Which nodes are cluster members, for commands that write a node's desired state (issue 17).

A node name no member has (a typo: `n9` in a 3-node cluster) would be written to the mesh where
no agent ever reads it: `apply` then waits for statuses that never come and records a revision.
`config set`, `plan` and `apply` refuse such a name unless `--allow-unknown-node` is given.

The members are read from the mesh (any node sees the whole cluster): every node whose agent
publishes something under `node/<name>/` (its REST address `node/<name>/agent`, its southbounds'
`node/<name>/device/<dev>`; refreshed while the agent runs), and every node that already has
desired state under `config/<name>/` (a member whose agent is down for a while stays one).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import click

from kvmesh.agent.keys import NODE, config_prefix
from kvmesh.cli.common import fail
from kvstore import KvStoreClient

ALLOW_OPTION = "--allow-unknown-node"
F = TypeVar("F", bound=Callable[..., Any])


def allow_unknown_node_option(command: F) -> F:
    return click.option(
        "--allow-unknown-node", "allow_unknown", is_flag=True,
        help="Write for a node no cluster member has (no agent publishes node/<name>/ and it "
             "has no desired state yet): e.g. before its agent first starts.")(command)


def announced_nodes(client: KvStoreClient) -> set[str]:
    """The node names under `node/` in the mesh (keys only: hashes are dumped)."""
    names = {key[len(NODE):].partition("/")[0] for key in client.hash_dump(NODE)}
    names.discard("")
    return names


def has_desired_state(client: KvStoreClient, node: str) -> bool:
    """Does `node` hold any desired value (a tombstone left by `config del` is none)?"""
    return any(value.value for value in client.dump(config_prefix(node)).values())


def unknown_nodes(client: KvStoreClient, nodes: Iterable[str]) -> tuple[list[str], set[str]]:
    """The names in `nodes` no member has, and the announced members (for the message)."""
    announced = announced_nodes(client)
    unknown = [node for node in sorted(set(nodes) - announced)
               if not has_desired_state(client, node)]
    return unknown, announced


def refuse_unknown_nodes(client: KvStoreClient, nodes: Iterable[str], allow: bool) -> None:
    """Exit 1 with one line naming the unknown nodes (and the members), before anything is
    written; nothing when `allow`."""
    if allow:
        return
    unknown, announced = unknown_nodes(client, nodes)
    if unknown:
        known = ", ".join(sorted(announced)) or "none"
        fail(f"unknown node(s) {', '.join(unknown)}: no cluster member has that name "
             f"(members: {known}); give {ALLOW_OPTION} to write anyway")

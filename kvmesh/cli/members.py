"""Which nodes are cluster members, for commands that write a node's desired state (issue 17).

A node name no member has (a typo: `n9` in a 3-node cluster) would be written to the mesh where
no agent ever reads it: `apply` then waits for statuses that never come and records a revision.
`config set`, `plan` and `apply` refuse such a name unless `--allow-unknown-node` is given.

The members are read from the mesh (any node sees the whole cluster): every node whose agent
publishes something under `node/<name>/` (its REST address `node/<name>/agent`, its southbounds'
`node/<name>/device/<dev>`; refreshed while the agent runs), and every node that already has
desired state under `config/<name>/` (a member whose agent is down for a while stays one), and
every active `member/<name>` record (kvstore/membership.py). A node whose member record says
"removed" is not a member, whatever else the mesh still holds for it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import click

from kvmesh.agent.keys import NODE, config_prefix
from kvmesh.cli.common import fail
from kvstore import KvStoreClient, membership

ALLOW_OPTION = "--allow-unknown-node"
F = TypeVar("F", bound=Callable[..., Any])


def allow_unknown_node_option(command: F) -> F:
    return click.option(
        "--allow-unknown-node", "allow_unknown", is_flag=True,
        help="Write for a node no cluster member has (no agent publishes node/<name>/ and it "
             "has no desired state yet): e.g. before its agent first starts.")(command)


def member_records(client: KvStoreClient) -> membership.MemberView:
    values = client.dump(prefix=membership.MEMBER_PREFIX)
    return membership.MemberView.from_values((key, value.value) for key, value in values.items())


def announced_nodes(client: KvStoreClient, view: membership.MemberView | None = None) -> set[str]:
    """The node names under `node/` in the mesh (keys only: hashes are dumped) and the active
    members, less the removed members."""
    view = view if view is not None else member_records(client)
    names = {key[len(NODE):].partition("/")[0] for key in client.hash_dump(NODE)}
    names |= {member.name for member in view.active()}
    names.discard("")
    return names - view.removed_names()


def has_desired_state(client: KvStoreClient, node: str) -> bool:
    """Does `node` hold any desired value (a tombstone left by `config del` is none)?"""
    return any(value.value for value in client.dump(config_prefix(node)).values())


def unknown_nodes(client: KvStoreClient, nodes: Iterable[str]
                  ) -> tuple[list[str], set[str], list[str]]:
    """The names in `nodes` no member has, the announced members (for the message), and the
    names in `nodes` whose member record says removed."""
    view = member_records(client)
    announced = announced_nodes(client, view)
    removed = sorted(set(nodes) & view.removed_names())
    unknown = [node for node in sorted(set(nodes) - announced - set(removed))
               if not has_desired_state(client, node)]
    return unknown, announced, removed


def refuse_unknown_nodes(client: KvStoreClient, nodes: Iterable[str], allow: bool) -> None:
    """Exit 1 with one line naming the unknown (or removed) nodes and the members, before
    anything is written; nothing when `allow`."""
    if allow:
        return
    unknown, announced, removed = unknown_nodes(client, nodes)
    known = ", ".join(sorted(announced)) or "none"
    if removed:
        fail(f"node(s) {', '.join(removed)} removed from the mesh (member record state "
             f"removed; members: {known}); give {ALLOW_OPTION} to write anyway")
    if unknown:
        fail(f"unknown node(s) {', '.join(unknown)}: no cluster member has that name "
             f"(members: {known}); give {ALLOW_OPTION} to write anyway")

"""Confirm and roll back revisions through the agent (REST `POST /revisions/confirm` and
`/revisions/rollback`, the console's buttons); the same writes as `kvmesh confirm` and the
agent's confirm timer (kvmesh.agent.revisions decides, kvmesh.agent.config_writer writes)."""

from __future__ import annotations

from typing import Any

from kvmesh.agent.config_writer import (
    WriteRefused,
    desired_values,
    mark,
    node_revisions,
    write_node_change,
)
from kvmesh.agent.revisions import (
    CONFIRMED,
    ROLLED_BACK,
    is_pending,
    revision_key,
    rollback_values,
)
from kvstore import KvStoreClient


class RevisionError(Exception):
    """The revision cannot be acted on (unknown, not pending): a 409 with the reason."""


def revision_rows(client: KvStoreClient, node: str) -> list[dict[str, Any]]:
    """`node`'s kept revisions, newest first: rev, time, who, description, state, changes."""
    rows = []
    for rev, (_value, record) in sorted(node_revisions(client, node).items(), reverse=True):
        confirm = record.get("confirm") or {}
        rows.append({"rev": rev, "time": record.get("time"), "who": record.get("who"),
                     "description": record.get("description", ""),
                     "state": confirm.get("state") or "applied",
                     "timeout_s": confirm.get("timeout_s"),
                     "changes": record.get("changes", {})})
    return rows


def confirm_revision(client: KvStoreClient, node: str, rev: int) -> dict[str, Any]:
    """Mark pending revision `rev` confirmed: the agent does not roll it back."""
    value, record = _pending(client, node, rev)
    refused = client.set({revision_key(node, rev): mark(client, value, record, CONFIRMED)})
    if refused:
        raise WriteRefused(f"{node}: confirm refused: {refused}")
    return {"node": node, "rev": rev, "state": CONFIRMED}


def roll_back_revision(client: KvStoreClient, node: str, rev: int, who: str) -> dict[str, Any]:
    """Undo pending revision `rev` now (what its timer would do when it runs out): its keys
    back to their values before, marked rolled back, as one new revision."""
    value, record = _pending(client, node, rev)
    writes = rollback_values(record)
    new_rev = write_node_change(
        client, node, writes, desired_values(client, node, writes), who=who,
        description=f"rollback of revision {rev} (console)",
        extra={revision_key(node, rev): mark(client, value, record, ROLLED_BACK)})
    return {"node": node, "rev": rev, "state": ROLLED_BACK, "revision": new_rev}


def _pending(client: KvStoreClient, node: str, rev: int) -> tuple[Any, dict[str, Any]]:
    kept = node_revisions(client, node)
    if rev not in kept:
        raise RevisionError(f"{node} has no revision {rev}")
    value, record = kept[rev]
    if not is_pending(record):
        state = (record.get("confirm") or {}).get("state") or "not awaiting confirmation"
        raise RevisionError(f"{node} revision {rev} is {state}, not pending")
    return value, record

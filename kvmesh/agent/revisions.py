"""Revisions of a node's desired state, kept in the mesh, and confirm-or-roll-back (sans-I/O).

Every `kvmesh apply` (and `config rollback`) records a revision per node under
`revision/<N>/<REV>` (zero-padded, infinite TTL; the oldest beyond `MAX_REVISIONS` are
expired; not under `node/<N>/`, which only node N's own agent may write: an operator records
revisions): when, who and where, and for each model key it changed the value before and after.
An apply with `--confirm-timeout S` records its revision as `pending`; the node's agent (not the
CLI, which may be gone) rolls it back — writes the previous values of its keys back to
`config/<N>/...` — unless `kvmesh confirm` marks it `confirmed` within S seconds of the agent
first seeing it.

This module decides; `kvmesh.agent.confirm` (the timer) and the CLI do the I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import msgpack

REVISION = "revision/"  # revision/<node>/<rev>
MAX_REVISIONS = 50
PENDING, CONFIRMED, ROLLED_BACK = "pending", "confirmed", "rolled-back"
#: Lifetime of the tombstone that expires a revision beyond MAX_REVISIONS.
EXPIRED_TTL_MS = 60_000

Values = Mapping[str, dict[str, Any] | None]


def revision_prefix(node: str) -> str:
    return f"{REVISION}{node}/"


def revision_key(node: str, rev: int) -> str:
    return f"{revision_prefix(node)}{rev:08d}"


def revision_of(key: str, node: str) -> int | None:
    rest = key[len(revision_prefix(node)):] if key.startswith(revision_prefix(node)) else ""
    return int(rest) if rest.isdigit() else None


def new_revision(rev: int, who: str, now: float, before: Values, after: Values,
                 confirm_timeout_s: float | None = None,
                 description: str = "apply") -> dict[str, Any]:
    """The record of revision `rev`: for each changed model key its value before and after."""
    record: dict[str, Any] = {
        "rev": rev, "time": round(now, 3), "who": who, "description": description,
        "changes": {key: {"before": before.get(key), "after": after.get(key)}
                    for key in sorted(after)},
        "confirm": None,
    }
    if confirm_timeout_s is not None:
        record["confirm"] = {"state": PENDING, "timeout_s": confirm_timeout_s}
    return record


def encode(record: Mapping[str, Any]) -> bytes:
    return bytes(msgpack.packb(dict(record), use_bin_type=True))


def decode(raw: bytes | None) -> dict[str, Any] | None:
    if not raw:
        return None
    try:
        record = msgpack.unpackb(raw, raw=False)
    except Exception:  # msgpack raises several unrelated types; a bad record is skipped
        return None
    return record if isinstance(record, dict) and isinstance(record.get("rev"), int) else None


def with_confirm_state(record: Mapping[str, Any], state: str) -> dict[str, Any]:
    return {**record, "confirm": {**(record.get("confirm") or {}), "state": state}}


def is_pending(record: Mapping[str, Any]) -> bool:
    confirm = record.get("confirm")
    return isinstance(confirm, dict) and confirm.get("state") == PENDING


def rollback_values(record: Mapping[str, Any]) -> dict[str, dict[str, Any] | None]:
    """What undoes `record`: each changed key back to its value before."""
    return {key: change.get("before") for key, change in record["changes"].items()}


def restore_values(records: Iterable[Mapping[str, Any]], rev: int) -> dict[str, Any]:
    """The writes that bring the desired state back to just after revision `rev`: every later
    revision undone, newest first. Raises ValueError when `rev` or a later one is missing."""
    by_rev = {record["rev"]: record for record in records}
    if rev not in by_rev:
        raise ValueError(f"no revision {rev} (kept: {', '.join(map(str, sorted(by_rev)))})")
    later = sorted(r for r in by_rev if r > rev)
    missing = set(range(rev + 1, max(later, default=rev) + 1)) - set(later)
    if missing:
        raise ValueError(f"revisions {sorted(missing)} are gone: cannot restore {rev}")
    writes: dict[str, Any] = {}
    for number in reversed(later):
        writes.update(rollback_values(by_rev[number]))
    return writes


def expired_revisions(revisions: Iterable[int], newest: int) -> list[int]:
    """Revisions to expire once `newest` is written (keep MAX_REVISIONS)."""
    return sorted(r for r in revisions if r <= newest - MAX_REVISIONS)


class ConfirmTimer:
    """Decides which pending revisions are due for rollback. The timeout runs from when this
    agent first saw the revision pending (its own clock: no clock agreement with the CLI's
    host is needed; an agent restarted meanwhile starts over, rolling back later, not never)."""

    def __init__(self) -> None:
        self._first_seen: dict[int, float] = {}

    def due(self, records: Mapping[int, Mapping[str, Any]], now: float) -> list[int]:
        pending = {rev for rev, record in records.items() if is_pending(record)}
        for rev in list(self._first_seen):
            if rev not in pending:
                del self._first_seen[rev]
        out = []
        for rev in sorted(pending):
            first = self._first_seen.setdefault(rev, now)
            if now - first >= float(records[rev]["confirm"].get("timeout_s", 0)):
                out.append(rev)
        return out

    def forget(self, rev: int) -> None:
        self._first_seen.pop(rev, None)

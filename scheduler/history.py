"""Transaction history and per-key timelines (graph revisions), with age/size trimming."""

from __future__ import annotations

import bisect
from collections import deque
from dataclasses import dataclass

from scheduler.api import Key, Metadata, TxnOperation, Value, ValueOrigin, ValueState
from scheduler.graph import Node
from scheduler.records import TxnRecord


@dataclass(slots=True)
class NodeRevision:
    """One revision of a value in the graph, valid from ``since`` until ``until`` (None = now)."""

    key: Key
    since: float
    until: float | None
    seq: int
    label: str
    value: Value
    metadata: Metadata
    state: ValueState
    origin: ValueOrigin
    available: bool
    derived_from: Key | None
    last_op: TxnOperation
    error: str | None
    details: tuple[str, ...]
    dependencies: tuple[str, ...]
    derived: tuple[Key, ...]
    descriptor: str | None

    @classmethod
    def of(cls, node: Node, since: float, seq: int) -> NodeRevision:
        return cls(
            key=node.key,
            since=since,
            until=None,
            seq=seq,
            label=node.label,
            value=node.value,
            metadata=node.metadata,
            state=node.state,
            origin=node.origin,
            available=node.available,
            derived_from=node.derived_from,
            last_op=node.last_op,
            error=None if node.error is None else str(node.error),
            details=node.details,
            dependencies=tuple(
                dep.key if dep.key is not None else f"{dep.label} (any of)" for dep in node.deps
            ),
            derived=tuple(dk for dk, _ in node.derived),
            descriptor=None if node.descriptor is None else node.descriptor.name,
        )

    def same_as(self, node: Node) -> bool:
        return (
            self.value is node.value
            and self.state is node.state
            and self.available == node.available
            and self.last_op is node.last_op
            and self.details == node.details
            and self.metadata is node.metadata
            and self.error == (None if node.error is None else str(node.error))
        )

    def as_dict(self) -> dict[str, object]:
        return {
            "key": self.key,
            "since": self.since,
            "until": self.until,
            "seq": self.seq,
            "label": self.label,
            "value": self.value,
            "state": self.state.name,
            "origin": self.origin.name,
            "available": self.available,
            "derived_from": self.derived_from,
            "last_op": self.last_op.value,
            "error": self.error,
            "details": list(self.details),
            "dependencies": list(self.dependencies),
            "derived": list(self.derived),
            "descriptor": self.descriptor,
        }


class History:
    """Bounded transaction history plus the per-key timelines."""

    def __init__(self, *, max_transactions: int, age_limit: float, enabled: bool = True) -> None:
        self.enabled = enabled
        self.max_transactions = max_transactions
        self.age_limit = age_limit
        self._txns: deque[TxnRecord] = deque()
        self._timelines: dict[Key, list[NodeRevision]] = {}
        # (until, key) of closed revisions in closing order: trimming pops from the left.
        self._closed: deque[tuple[float, Key]] = deque()

    # -- transactions ----------------------------------------------------------------------

    def add_transaction(self, record: TxnRecord) -> None:
        if not self.enabled:
            return
        self._txns.append(record)
        while len(self._txns) > self.max_transactions:
            self._txns.popleft()

    def transactions(
        self, since: float | None = None, until: float | None = None, seq: int | None = None
    ) -> list[TxnRecord]:
        if seq is not None:
            return [record for record in self._txns if record.seq == seq]
        return [
            record
            for record in self._txns
            if (since is None or record.start >= since) and (until is None or record.start <= until)
        ]

    # -- timelines -------------------------------------------------------------------------

    def record_node(self, key: Key, node: Node | None, now: float, seq: int) -> None:
        if not self.enabled:
            return
        timeline = self._timelines.get(key)
        last = timeline[-1] if timeline else None
        if last is not None and last.until is None:
            if node is not None and last.same_as(node):
                return
            last.until = now
            self._closed.append((now, key))
        if node is not None:
            revision = NodeRevision.of(node, now, seq)
            if timeline is None:
                self._timelines[key] = [revision]
            else:
                timeline.append(revision)

    def timeline(self, key: Key) -> list[NodeRevision]:
        return list(self._timelines.get(key, ()))

    def snapshot(self, at: float) -> list[NodeRevision]:
        """Revisions valid at time ``at`` (one per key), sorted by key."""
        out: list[NodeRevision] = []
        for key in sorted(self._timelines):
            timeline = self._timelines[key]
            index = bisect.bisect_right([rev.since for rev in timeline], at) - 1
            if index < 0:
                continue
            revision = timeline[index]
            if revision.until is None or revision.until > at:
                out.append(revision)
        return out

    def trim(self, now: float) -> None:
        """Drop what is older than the age limit: cost proportional to what is dropped."""
        cutoff = now - self.age_limit
        while self._txns and self._txns[0].end is not None and self._txns[0].end < cutoff:
            self._txns.popleft()
        closed = self._closed
        while closed and closed[0][0] < cutoff:
            _, key = closed.popleft()
            timeline = self._timelines.get(key)
            if not timeline:
                continue
            if timeline[0].until is not None and timeline[0].until < cutoff:
                timeline.pop(0)
            if not timeline:
                del self._timelines[key]

"""Transaction history and per-key timelines (graph revisions), with age/size trimming."""

from __future__ import annotations

import bisect
import threading
from collections import deque

from scheduler.api import (
    Key,
    Metadata,
    TxnOperation,
    Value,
    ValueOrigin,
    ValueState,
    shown_value,
)
from scheduler.graph import Node
from scheduler.records import TxnRecord


class NodeRevision:
    """One revision of a value in the graph, valid from ``since`` until ``until`` (None = now)."""

    __slots__ = (
        "_deps",
        "_derived",
        "available",
        "derived_from",
        "descriptor",
        "details",
        "error",
        "key",
        "label",
        "last_op",
        "metadata",
        "origin",
        "seq",
        "since",
        "state",
        "until",
        "value",
    )

    def __init__(self, node: Node, since: float, seq: int) -> None:
        # Plain attribute copies only: this runs for every value a transaction touches.
        self.key: Key = node.key
        self.since = since
        self.until: float | None = None
        self.seq = seq
        self.label = node.label
        self.value: Value = node.value
        self.metadata: Metadata = node.metadata
        self.state: ValueState = node.state
        self.origin: ValueOrigin = node.origin
        self.available = node.available
        self.derived_from: Key | None = node.derived_from
        self.last_op: TxnOperation = node.last_op
        self.error: BaseException | None = node.error
        self.details: tuple[str, ...] = node.details
        self.descriptor = node.descriptor
        self._deps = node.deps
        self._derived = node.derived

    @classmethod
    def of(cls, node: Node, since: float, seq: int) -> NodeRevision:
        return cls(node, since, seq)

    @property
    def dependencies(self) -> tuple[str, ...]:
        """Dependency targets: the key, or ``label (any of)`` for AnyOf dependencies."""
        return tuple(
            dep.key if dep.key is not None else f"{dep.label} (any of)" for dep in self._deps
        )

    @property
    def derived(self) -> tuple[Key, ...]:
        return tuple(dk for dk, _ in self._derived)

    @property
    def descriptor_name(self) -> str | None:
        return None if self.descriptor is None else self.descriptor.name

    def same_as(self, node: Node) -> bool:
        return (
            self.value is node.value
            and self.state is node.state
            and self.available == node.available
            and self.last_op is node.last_op
            and self.details == node.details
            and self.metadata is node.metadata
            and self.error is node.error
            and self._deps is node.deps
        )

    def as_dict(self) -> dict[str, object]:
        return {
            "key": self.key,
            "since": self.since,
            "until": self.until,
            "seq": self.seq,
            "label": self.label,
            "value": shown_value(self.descriptor, self.key, self.value),
            "state": self.state.name,
            "origin": self.origin.name,
            "available": self.available,
            "derived_from": self.derived_from,
            "last_op": self.last_op.value,
            "error": None if self.error is None else str(self.error),
            "details": list(self.details),
            "dependencies": list(self.dependencies),
            "derived": list(self.derived),
            "descriptor": self.descriptor_name,
        }

    def __repr__(self) -> str:
        return f"NodeRevision({self.key!r}, {self.state.name}, since={self.since}, seq={self.seq})"


class History:
    """Bounded transaction history plus the per-key timelines.

    Bounds: ``max_transactions`` records and ``max_ops`` recorded values and operations in
    total (the oldest records go first), ``max_revisions`` per key, and everything older than
    ``age_limit`` seconds. Has its own lock so readers never wait for a running transaction.
    """

    def __init__(
        self,
        *,
        max_transactions: int,
        age_limit: float,
        enabled: bool = True,
        max_ops: int = 1_000_000,
        max_revisions: int = 1_000,
    ) -> None:
        self.enabled = enabled
        self.max_transactions = max_transactions
        self.max_ops = max_ops
        self.max_revisions = max_revisions
        self.age_limit = age_limit
        self._lock = threading.Lock()
        self._txns: deque[TxnRecord] = deque()
        self._ops = 0
        self._timelines: dict[Key, list[NodeRevision]] = {}
        # (until, key) of closed revisions in closing order: trimming pops from the left.
        self._closed: deque[tuple[float, Key]] = deque()

    # -- transactions ----------------------------------------------------------------------

    def add_transaction(self, record: TxnRecord) -> None:
        if not self.enabled:
            return
        with self._lock:
            self._txns.append(record)
            self._ops += _op_count(record)
            while len(self._txns) > 1 and (
                len(self._txns) > self.max_transactions or self._ops > self.max_ops
            ):
                self._ops -= _op_count(self._txns.popleft())

    def transactions(
        self, since: float | None = None, until: float | None = None, seq: int | None = None
    ) -> list[TxnRecord]:
        with self._lock:
            records = list(self._txns)
        if seq is not None:
            return [record for record in records if record.seq == seq]
        return [
            record
            for record in records
            if (since is None or record.start >= since) and (until is None or record.start <= until)
        ]

    # -- timelines -------------------------------------------------------------------------

    def record_nodes(self, changes: list[tuple[Key, Node | None]], now: float, seq: int) -> None:
        if not self.enabled:
            return
        with self._lock:
            for key, node in changes:
                self._record_node(key, node, now, seq)

    def _record_node(self, key: Key, node: Node | None, now: float, seq: int) -> None:
        timeline = self._timelines.get(key)
        last = timeline[-1] if timeline else None
        if last is not None and last.until is None:
            if node is not None and last.same_as(node):
                return
            last.until = now
            self._closed.append((now, key))
        if node is not None:
            revision = NodeRevision(node, now, seq)
            if timeline is None:
                self._timelines[key] = [revision]
            else:
                timeline.append(revision)
                if len(timeline) > self.max_revisions:
                    del timeline[0]

    def timeline(self, key: Key) -> list[NodeRevision]:
        with self._lock:
            return list(self._timelines.get(key, ()))

    def snapshot(self, at: float) -> list[NodeRevision]:
        """Revisions valid at time ``at`` (one per key), sorted by key."""
        out: list[NodeRevision] = []
        with self._lock:
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
        with self._lock:
            txns = self._txns
            while txns and txns[0].end is not None and txns[0].end < cutoff:
                self._ops -= _op_count(txns.popleft())
            closed = self._closed
            while closed and closed[0][0] < cutoff:
                _, key = closed.popleft()
                timeline = self._timelines.get(key)
                if not timeline:
                    continue
                if timeline[0].until is not None and timeline[0].until < cutoff:
                    del timeline[0]
                if not timeline:
                    del self._timelines[key]


def _op_count(record: TxnRecord) -> int:
    """Size of a record for the history budget: its values and operations."""
    ops = (
        len(record.executed)
        if record.planned is record.executed
        else (len(record.planned) + len(record.executed))
    )
    return ops + len(record.values) + 1

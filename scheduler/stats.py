"""Counters of the scheduler (exported later as Prometheus metrics by the agent).

Written by the worker thread (transactions) and by caller threads (rejected requests), read by
any thread (the agent's REST server): every update and every read takes the one lock here, so
nothing depends on the interpreter making a dict update or copy atomic.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from scheduler.api import TxnType, ValueState
from scheduler.records import TxnRecord

StateChange = tuple[ValueState | None, ValueState | None]


@dataclass
class Stats:
    transactions: Counter[str] = field(default_factory=Counter)
    operations: Counter[str] = field(default_factory=Counter)
    southbound_writes: Counter[str] = field(default_factory=Counter)  # descriptor calls
    errors: int = 0
    failed_transactions: int = 0
    retries: int = 0
    retrieve_errors: int = 0
    retrieve_rejected: int = 0  # retrieved items refused (malformed, not the descriptor's key)
    notifications_ignored: int = 0
    notifications: int = 0
    rejected_requests: int = 0
    # A value comparison (a descriptor's value_comparator, or ==) raised: the value was taken
    # as changed (re-applied) and the failure logged.
    comparison_errors: int = 0
    # A job of the worker raised something other than a descriptor failure (a bug).
    internal_errors: int = 0
    graph_size: int = 0  # as of the end of the last transaction
    states: Counter[ValueState] = field(default_factory=Counter)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def count(self, record: TxnRecord, *, graph_size: int) -> None:
        """Count a finished transaction."""
        with self._lock:
            self.graph_size = graph_size
            self.transactions[record.type_text] += 1
            if record.txn_type is TxnType.SB_NOTIFICATION:
                self.notifications += len(record.values)
            writes = record.txn_type is not TxnType.SB_NOTIFICATION
            for op in record.executed:
                if not op.noop:
                    self.operations[op.op.value] += 1
                    if writes:
                        self.southbound_writes[op.op.value] += 1
            if record.errors:
                self.failed_transactions += 1
                self.errors += len(record.errors)

    def states_changed(self, changes: Iterable[StateChange]) -> None:
        """Move values between states: ``(old, new)``, None for "not in the graph"."""
        with self._lock:
            states = self.states
            for old, new in changes:
                if old is not None:
                    states[old] -= 1
                    if states[old] <= 0:
                        del states[old]
                if new is not None:
                    states[new] += 1

    def add(
        self,
        *,
        retries: int = 0,
        retrieve_errors: int = 0,
        retrieve_rejected: int = 0,
        notifications_ignored: int = 0,
        rejected_requests: int = 0,
        comparison_errors: int = 0,
        internal_errors: int = 0,
    ) -> None:
        """Add to the plain counters (from any thread)."""
        with self._lock:
            self.retries += retries
            self.retrieve_errors += retrieve_errors
            self.retrieve_rejected += retrieve_rejected
            self.notifications_ignored += notifications_ignored
            self.rejected_requests += rejected_requests
            self.comparison_errors += comparison_errors
            self.internal_errors += internal_errors

    def snapshot(self) -> dict[str, object]:
        """A copy of every counter, taken at one instant; nothing in it is shared."""
        with self._lock:
            transactions = dict(self.transactions)
            states = dict(self.states)
            return {
                "transactions": sum(transactions.values()),
                "transactions_by_type": transactions,
                "operations": dict(self.operations),
                "southbound_writes": dict(self.southbound_writes),
                "errors": self.errors,
                "failed_transactions": self.failed_transactions,
                "retries": self.retries,
                "retrieve_errors": self.retrieve_errors,
                "retrieve_rejected": self.retrieve_rejected,
                "notifications": self.notifications,
                "notifications_ignored": self.notifications_ignored,
                "rejected_requests": self.rejected_requests,
                "comparison_errors": self.comparison_errors,
                "internal_errors": self.internal_errors,
                "graph_size": self.graph_size,
                "pending": states.get(ValueState.PENDING, 0),
                "values_by_state": {state.name: n for state, n in states.items()},
            }

"""Counters of the scheduler (exported later as Prometheus metrics by the agent)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from scheduler.api import TxnType, ValueState
from scheduler.records import TxnRecord


@dataclass
class Stats:
    transactions: Counter[str] = field(default_factory=Counter)
    operations: Counter[str] = field(default_factory=Counter)
    southbound_writes: Counter[str] = field(default_factory=Counter)  # descriptor calls
    errors: int = 0
    failed_transactions: int = 0
    retries: int = 0
    retrieve_errors: int = 0
    notifications_ignored: int = 0
    notifications: int = 0
    rejected_requests: int = 0
    states: Counter[ValueState] = field(default_factory=Counter)

    def count(self, record: TxnRecord) -> None:
        self.transactions[record.txn_type.value] += 1
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

    def state_changed(self, old: ValueState | None, new: ValueState | None) -> None:
        if old is not None:
            self.states[old] -= 1
            if self.states[old] <= 0:
                del self.states[old]
        if new is not None:
            self.states[new] += 1

    def snapshot(self) -> dict[str, object]:
        # Read from other threads while the worker updates: copy via list(items()), which the
        # interpreter does in one step (iterating the live dicts could fail mid-update).
        transactions = dict(list(self.transactions.items()))
        states = dict(list(self.states.items()))
        return {
            "transactions": sum(transactions.values()),
            "transactions_by_type": transactions,
            "operations": dict(list(self.operations.items())),
            "southbound_writes": dict(list(self.southbound_writes.items())),
            "errors": self.errors,
            "failed_transactions": self.failed_transactions,
            "retries": self.retries,
            "retrieve_errors": self.retrieve_errors,
            "notifications": self.notifications,
            "notifications_ignored": self.notifications_ignored,
            "rejected_requests": self.rejected_requests,
            "pending": states.get(ValueState.PENDING, 0),
            "values_by_state": {state.name: n for state, n in states.items()},
        }

"""Per-transaction state of the graph walk and the operation record it builds."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from scheduler.api import Dependency, Key, RetryPolicy, TxnOperation, TxnType, Value, ValueState
from scheduler.compare import Comparisons
from scheduler.graph import DerivedPairs
from scheduler.records import RecordedOp

CREATE = TxnOperation.CREATE
DELETE = TxnOperation.DELETE


@dataclass
class WalkContext:
    """Per-transaction state shared by the simulation and the execution of one transaction."""

    seq: int
    txn_type: TxnType
    revert: bool = False  # stop and undo at the first failure of a txn value
    retry: RetryPolicy | None = None  # policy given by the NB transaction
    retry_attempt: int = 0  # > 0 in a retry transaction
    # Re-applied NB values keep the retry policy of the NB transaction that set them (values
    # of a descriptor registered late): the transaction's own ``retry`` is not applied.
    keep_retry_policy: bool = False
    txn_keys: set[Key] = field(default_factory=set)
    # Shared between simulation and execution so each descriptor callback runs once per value.
    relations_cache: dict[Key, tuple[Value, tuple[Dependency, ...], DerivedPairs]] = field(
        default_factory=dict
    )
    validation_cache: dict[Key, tuple[Value, BaseException | None]] = field(default_factory=dict)
    # Keys that give way to a conflicting NB value (``scheduler.conflicts``), with why.
    refused: dict[Key, str] = field(default_factory=dict)
    # Filled by a walk (reset between simulation and execution).
    ops: list[RecordedOp | None] = field(default_factory=list)
    errors: dict[Key, tuple[TxnOperation, BaseException]] = field(default_factory=dict)
    failed: set[Key] = field(default_factory=set)
    touched: dict[Key, None] = field(default_factory=dict)
    comparisons: Comparisons = field(default_factory=Comparisons)
    retry_keys: dict[Key, int] = field(default_factory=dict)
    stop: bool = False
    reverting: bool = False
    _pending_create_op: dict[Key, int] = field(default_factory=dict)
    _pending_delete_op: dict[Key, int] = field(default_factory=dict)

    def reset_outcome(self) -> None:
        self.ops = []
        self.errors = {}
        self.failed = set()
        self.touched = {}
        self.comparisons = Comparisons()
        self.retry_keys = {}
        self.stop = False
        self.reverting = False
        self._pending_create_op = {}
        self._pending_delete_op = {}

    @contextmanager
    def reverting_changes(self) -> Iterator[None]:
        """While the applied values of a failed transaction are put back (whatever raises)."""
        self.reverting = True
        try:
            yield
        finally:
            self.reverting = False

    def retries(self, base_key: Key) -> bool:
        """Whether this is a retry transaction retrying the values of ``base_key``."""
        return self.retry_attempt > 0 and base_key in self.txn_keys

    def next_attempt(self, base_key: Key) -> int:
        """The retry attempt a failure of a value of ``base_key`` leads to. Values failing as a
        consequence of another value's retry (e.g. dependents it lets be created) start their
        own count."""
        return self.retry_attempt + 1 if self.retries(base_key) else 1

    def recorded_ops(self) -> list[RecordedOp]:
        return [op for op in self.ops if op is not None]

    def record(self, record: RecordedOp, new_state: ValueState, *, noop: bool = False) -> None:
        """Append an operation to the record, merging what the anchor merges."""
        ctx = self
        key = record.key
        record.new_state = new_state
        record.noop = noop
        record.revert = ctx.reverting
        record.retry = ctx.retry_attempt > 0
        op = record.op
        if op is CREATE:
            earlier = ctx._pending_create_op.pop(key, None)
            if earlier is not None and not noop:
                # A CREATE that only parked the value as PENDING is superseded by the real one.
                first = ctx.ops[earlier]
                assert first is not None
                record.prev_state = first.prev_state
                record.prev_error = first.prev_error
                record.prev_value = first.prev_value
                ctx.ops[earlier] = None
            if new_state is ValueState.PENDING:
                ctx._pending_create_op[key] = len(ctx.ops)
        elif op is DELETE:
            earlier = ctx._pending_delete_op.pop(key, None)
            if earlier is not None and noop and record.prev_state is ValueState.PENDING:
                # Deleted as a dependent, then by NB in the same transaction: one DELETE.
                first = ctx.ops[earlier]
                assert first is not None
                first.new_state = new_state
                return
            if new_state is ValueState.PENDING:
                ctx._pending_delete_op[key] = len(ctx.ops)
        ctx.ops.append(record)

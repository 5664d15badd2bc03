"""Records of transactions and operations, and their text form (the seed's log format)."""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from scheduler.api import Key, ResyncKind, TxnOperation, TxnType, Value, ValueOrigin, ValueState

WIDTH = 120

# (key, value) -> the value as it may be shown: the registry's, so key material stays hidden.
Redactor = Callable[[Key, Value], Value]


def _as_is(key: Key, value: Value) -> Value:
    return value


@dataclass(slots=True)
class RecordedOp:
    """One planned or executed operation on one value."""

    op: TxnOperation
    key: Key
    prev_value: Value = None
    new_value: Value = None
    prev_state: ValueState = ValueState.NONEXISTENT
    new_state: ValueState = ValueState.NONEXISTENT
    prev_error: BaseException | None = None
    error: BaseException | None = None
    derived: bool = False
    property: bool = False
    noop: bool = False
    revert: bool = False
    retry: bool = False
    recreate: bool = False
    details: tuple[str, ...] = ()  # a PENDING value's missing dependencies
    # Of `details`, those no value of the graph could satisfy: neither desired nor found in the
    # southbound (a plan tells "stays PENDING: not there at all" from "waits for a value that
    # waits itself").
    absent: tuple[str, ...] = ()
    # `details` by key (``scheduler.readiness.WaitedKeys``): set by plans only.
    waits_for: tuple[tuple[Key, ...], ...] = ()

    def flags(self) -> list[str]:
        """Flag names in the anchor's order (shown in brackets in the log)."""
        out: list[str] = []
        if self.derived and not self.property:
            out.append("DERIVED")
        if self.property:
            out.append("PROPERTY")
        if self.noop:
            out.append("NOOP")
        if self.revert:
            out.append("REVERT")
        if self.retry:
            out.append("RETRY")
        if self.recreate:
            out.append("RECREATE")
        if self.new_state is ValueState.OBTAINED:
            out.append("OBTAINED")
        elif self.prev_state is ValueState.OBTAINED:
            out.append("WAS-OBTAINED")
        if self.new_state is ValueState.UNIMPLEMENTED:
            out.append("UNIMPLEMENTED")
        elif self.prev_state is ValueState.UNIMPLEMENTED:
            out.append("WAS-UNIMPLEMENTED")
        if self.prev_state is ValueState.MISSING:
            out.append("WAS-MISSING")
        if self.prev_state is ValueState.DISCOVERED:
            out.append("DISCOVERED")
        pending_before = self.prev_state is ValueState.PENDING
        pending_after = self.new_state is ValueState.PENDING
        if pending_before and pending_after:
            out.append("STILL-PENDING")
        elif pending_before:
            out.append("WAS-PENDING")
        elif pending_after:
            out.append("IS-PENDING")
        failed_before = self.prev_state in (ValueState.FAILED, ValueState.RETRYING)
        failed_after = self.new_state in (ValueState.FAILED, ValueState.RETRYING)
        if failed_before and failed_after:
            out.append("STILL-FAILING")
        elif failed_before:
            out.append("FIXED")
        elif failed_after:
            out.append("FAILED")
        invalid_before = self.prev_state is ValueState.INVALID
        invalid_after = self.new_state is ValueState.INVALID
        if invalid_before and invalid_after:
            out.append("STILL-INVALID")
        elif invalid_before:
            out.append("FIXED")
        elif invalid_after:
            out.append("INVALID")
        return out

    def as_dict(self, shown: Redactor | None = None) -> dict[str, Any]:
        show = shown or _as_is
        return {
            "operation": self.op.value,
            "key": self.key,
            "prev_value": show(self.key, self.prev_value),
            "new_value": show(self.key, self.new_value),
            "prev_state": self.prev_state.name,
            "new_state": self.new_state.name,
            "prev_error": None if self.prev_error is None else str(self.prev_error),
            "error": None if self.error is None else str(self.error),
            "flags": self.flags(),
            "details": list(self.details),
        }


@dataclass(slots=True)
class RecordedValue:
    key: Key
    value: Value
    origin: ValueOrigin


@dataclass(slots=True)
class TxnRecord:
    """Everything about one transaction: arguments, plan, executed operations, errors, times."""

    seq: int
    txn_type: TxnType
    start: float
    description: str = ""
    # A resync is an NB transaction with its own resync type, as Ligato records it
    # (RecordedTxn.TxnType NBTransaction + ResyncType); None for every other transaction.
    resync: ResyncKind | None = None
    retry_for: int | None = None
    retry_attempt: int = 0
    values: list[RecordedValue] = field(default_factory=list)
    planned: list[RecordedOp] = field(default_factory=list)
    executed: list[RecordedOp] = field(default_factory=list)
    errors: dict[Key, tuple[TxnOperation, BaseException]] = field(default_factory=dict)
    end: float | None = None
    revert: bool = False
    # How values are shown (as_dict and the text forms); the records keep the real values.
    shown: Redactor = field(default=_as_is, repr=False, compare=False)

    @property
    def duration(self) -> float:
        return 0.0 if self.end is None else self.end - self.start

    @property
    def southbound_writes(self) -> int:
        """Operations that called a descriptor (Create/Update/Delete): what this transaction
        changed in the southbound. A notification only records what the southbound did."""
        if self.txn_type is TxnType.SB_NOTIFICATION:
            return 0
        return sum(1 for op in self.executed if not op.noop)

    def as_dict(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "type": self.txn_type.value,
            "resync": None if self.resync is None else self.resync.value,
            "description": self.description,
            "retry_for": self.retry_for,
            "retry_attempt": self.retry_attempt,
            "start": self.start,
            "end": self.end,
            "values": [
                {"key": v.key, "value": self.shown(v.key, v.value), "origin": v.origin.name}
                for v in self.values
            ],
            "planned": [op.as_dict(self.shown) for op in self.planned],
            "executed": [op.as_dict(self.shown) for op in self.executed],
            "southbound_writes": self.southbound_writes,
            "errors": {key: [op.value, str(exc)] for key, (op, exc) in self.errors.items()},
        }

    @property
    def type_text(self) -> str:
        """The transaction's type as the log and the counters show it: "NB transaction",
        "NB transaction, full resync", "SB notification", "retry failed ops"."""
        if self.resync is None:
            return self.txn_type.value
        return f"{self.txn_type.value}, {self.resync.value} resync"

    def header_text(self) -> str:
        return format_header(self)

    def executed_text(self) -> str:
        return format_executed(self)

    def text(self) -> str:
        return format_header(self) + format_executed(self)


def _title(record: TxnRecord) -> str:
    if record.txn_type is TxnType.RETRY_FAILED_OPS:
        return f"retrying failed TXN #{record.retry_for} (attempt {record.retry_attempt})"
    if record.resync is not None:
        return f"{record.txn_type.value} ({record.resync.value.capitalize()} resync)"
    return record.txn_type.value


def _boxed(left: str, right: str, edge: str = "|") -> str:
    inner = WIDTH - 4
    gap = max(1, inner - len(left) - len(right))
    return f"{edge} {left}{' ' * gap}{right} {edge}"


def _fmt_time(ts: float) -> str:
    return _dt.datetime.fromtimestamp(ts, tz=_dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f +0000 UTC")


def _fmt_value(value: Value) -> str:
    if value is None:
        return "<nil>"
    if isinstance(value, dict):
        return "{ " + " ".join(f"{k}:{v!r}" for k, v in value.items()) + " }"
    return repr(value)


def _fmt_ops(ops: list[RecordedOp], indent: str, shown: Redactor) -> list[str]:
    lines: list[str] = []
    for n, op in enumerate(ops, 1):
        prev, new = shown(op.key, op.prev_value), shown(op.key, op.new_value)
        flags = op.flags()
        suffix = f" [{' '.join(flags)}]" if flags else ""
        lines.append(f"{indent}{n}. {op.op.value}{suffix}:")
        lines.append(f"{indent}    - key: {op.key}")
        if op.op is TxnOperation.UPDATE:
            lines.append(f"{indent}    - prev-value: {_fmt_value(prev)}")
            lines.append(f"{indent}    - new-value: {_fmt_value(new)}")
        elif op.op is TxnOperation.DELETE:
            lines.append(f"{indent}    - value: {_fmt_value(prev)}")
        else:
            lines.append(f"{indent}    - value: {_fmt_value(new)}")
        if op.prev_error is not None:
            lines.append(f"{indent}    - prev-error: {op.prev_error}")
        if op.error is not None:
            lines.append(f"{indent}    - error: {op.error}")
    return lines


def format_header(record: TxnRecord) -> str:
    bar = "+" + "=" * (WIDTH - 2) + "+"
    lines = [bar, _boxed(f"Transaction #{record.seq}", _title(record)), bar]
    lines.append("  * transaction arguments:")
    lines.append(f"      - seq-num: {record.seq}")
    lines.append(f"      - type: {record.type_text}")
    if record.description:
        desc = record.description.splitlines()
        lines.append(f"      - Description: {desc[0]}")
        lines.extend(f"        {line}" for line in desc[1:])
    if record.revert:
        lines.append("      - revert: on failure")
    if record.values:
        lines.append("      - values:")
        for v in record.values:
            lines.append(f"          - key: {v.key}")
            lines.append(f"            value: {_fmt_value(record.shown(v.key, v.value))}")
            if v.origin is ValueOrigin.FROM_SB:
                lines.append("            origin: from-SB")
    else:
        lines.append("      - values: none")
    if record.planned:
        lines.append("  * planned operations:")
        lines.extend(_fmt_ops(record.planned, "      ", record.shown))
    return "\n".join(lines) + "\n"


def format_executed(record: TxnRecord) -> str:
    lines = ["o" + "-" * (WIDTH - 2) + "o"]
    end = record.end if record.end is not None else record.start
    took = record.duration * 1000.0
    lines.append(
        f"  * executed operations ({_fmt_time(record.start)} - {_fmt_time(end)}, "
        f"duration = {took:.6f}ms):"
    )
    if record.executed:
        lines.extend(_fmt_ops(record.executed, "     ", record.shown))
    else:
        lines.append("     <none>")
    if record.errors:
        lines.append("  * errors:")
        for key, (op, exc) in record.errors.items():
            lines.append(f"     - {key} ({op.value}): {exc}")
    bar = "x" + "-" * (WIDTH - 2) + "x"
    lines.append(bar)
    lines.append(_boxed(f"#{record.seq}", f"took {round(took)}ms", edge="x"))
    lines.append(bar)
    return "\n".join(lines) + "\n"

"""Public API of the KVScheduler: descriptors, dependencies, states, origins, errors, options.

Everything a southbound (descriptor author) or a northbound (transaction author) needs to import
lives here and is re-exported by the ``scheduler`` package. The engine behind it is internal.
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

Key = str
Value = Any
Metadata = Any


class ValueState(enum.Enum):
    """Operational state of a value (numbering follows the anchor's protobuf enum)."""

    NONEXISTENT = 0  # deleted or never existed
    MISSING = 1  # was configured, but a refresh (Retrieve) no longer finds it
    UNIMPLEMENTED = 2  # NB value with no descriptor
    REMOVED = 3  # removed (transient: the key becomes NONEXISTENT after the transaction)
    CONFIGURED = 4  # NB value applied successfully
    OBTAINED = 5  # value not managed by NB (SB notification, or Retrieve with SB origin)
    DISCOVERED = 6  # NB-origin value found by Retrieve but not (yet) confirmed by NB
    PENDING = 7  # NB value waiting for its dependencies
    INVALID = 8  # rejected by the descriptor's validate (never retried)
    FAILED = 9  # the last operation failed
    RETRYING = 10  # the last operation failed, a retry is scheduled


class ValueOrigin(enum.Enum):
    """Where a value came from."""

    UNKNOWN = 0
    FROM_NB = 1
    FROM_SB = 2


class TxnOperation(enum.StrEnum):
    """CRUD operation recorded for a value (``str`` so it compares equal to ``"CREATE"`` etc.)."""

    UNDEFINED = "UNDEFINED"
    CREATE = "CREATE"
    UPDATE = "UPDATE"
    DELETE = "DELETE"

    def __str__(self) -> str:
        return self.value


class TxnType(enum.StrEnum):
    """Kind of a recorded transaction."""

    SB_NOTIFICATION = "SB notification"
    NB_TRANSACTION = "NB transaction"
    RETRY_FAILED_OPS = "retry failed ops"

    def __str__(self) -> str:
        return self.value


class ResyncKind(enum.StrEnum):
    """The three kinds of resync (the strings are accepted wherever a kind is expected)."""

    FULL = "full"
    UPSTREAM = "upstream"
    DOWNSTREAM = "downstream"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class RetryPolicy:
    """Retry of failed (retriable) operations by later transactions.

    ``period`` seconds before the first retry, doubled after each failed attempt when
    ``exp_backoff``; at most ``max_count`` attempts (0 = unlimited), then the value is FAILED.
    """

    period: float = 1.0
    max_count: int = 3
    exp_backoff: bool = True

    def __post_init__(self) -> None:
        if self.period < 0:
            raise ValueError(f"RetryPolicy.period must be >= 0, got {self.period!r}")
        if self.max_count < 0:
            raise ValueError(f"RetryPolicy.max_count must be >= 0, got {self.max_count!r}")

    def delay(self, attempt: int) -> float:
        """Delay before retry number ``attempt`` (1-based)."""
        if self.exp_backoff and attempt > 1:
            return self.period * (2 ** (attempt - 1))
        return self.period

    def allows(self, attempt: int) -> bool:
        """Whether retry number ``attempt`` (1-based) may still run."""
        return self.max_count == 0 or attempt <= self.max_count


@dataclass(frozen=True)
class Dependency:
    """A value that must exist before the dependent value can be created.

    Either a static ``key``, or ``any_of``: a predicate over keys, satisfied when at least one
    existing (created) key is accepted. ``key_prefixes`` narrows the keys the predicate is run on
    (only keys starting with one of them are candidates); without prefixes every key of the graph
    is a candidate, which makes the dependency cost linear in the graph size.
    """

    label: str
    key: Key | None = None
    any_of: Callable[[Key], bool] | None = None
    key_prefixes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if (self.key is None) == (self.any_of is None):
            raise ValueError(f"Dependency {self.label!r}: give exactly one of key= or any_of=")
        if isinstance(self.key_prefixes, str):
            # A bare string would be iterated character by character: accept it as one prefix.
            object.__setattr__(self, "key_prefixes", (self.key_prefixes,))
        else:
            object.__setattr__(self, "key_prefixes", tuple(self.key_prefixes))

    def matches(self, key: Key) -> bool:
        """Whether ``key`` satisfies this dependency (if it exists)."""
        if self.key is not None:
            return key == self.key
        if self.key_prefixes and not key.startswith(self.key_prefixes):
            return False
        assert self.any_of is not None
        return bool(self.any_of(key))


@dataclass
class Descriptor:
    """How to handle one type of value: which keys, the CRUD callbacks, relations.

    Only ``name``, ``key_selector`` and (for values the scheduler must change) ``create`` and
    ``delete`` are needed. Callbacks must not mutate the values they are given.
    """

    name: str
    key_selector: Callable[[Key], bool]
    key_label: Callable[[Key], str] | None = None
    validate: Callable[[Key, Value], None] | None = None
    create: Callable[[Key, Value], Metadata] | None = None
    delete: Callable[[Key, Value, Metadata], None] | None = None
    update: Callable[[Key, Value, Value, Metadata], Metadata] | None = None
    update_with_recreate: Callable[[Key, Value, Value, Metadata], bool] | None = None
    retrieve: (
        Callable[
            [list[tuple[Key, Value, Metadata]]], Sequence[tuple[Key, Value, Metadata, ValueOrigin]]
        ]
        | None
    ) = None
    is_retriable_failure: Callable[[BaseException], bool] | None = None
    derived_values: Callable[[Key, Value], Sequence[tuple[Key, Value]]] | None = None
    dependencies: Callable[[Key, Value], Sequence[Dependency]] | None = None
    value_comparator: Callable[[Key, Value, Value], bool] | None = None
    with_metadata: bool = False
    retrieve_dependencies: Sequence[str] = field(default_factory=tuple)
    # The value as the scheduler shows it (transaction records and their log, key timelines,
    # graph snapshots, dumps): e.g. key material replaced. Callbacks always get the real value.
    redact: Callable[[Key, Value], Value] | None = None
    # The NB values of this descriptor that the southbound refuses together (two claims on one
    # resource): given every NB value it has (after the transaction: key -> value), the keys
    # that must give way, each with why (naming the key it gives way to). They are INVALID
    # (``ConflictError``) and, if they exist, removed first, so the one that wins can be
    # created. Which one wins must follow from the values alone, never from their arrival
    # order (e.g. the first in key order). Runs once per transaction that touches a key of
    # this descriptor, over all its NB values: keep it cheap.
    conflicts: Callable[[Mapping[Key, Value]], Mapping[Key, str]] | None = None

    def label_of(self, key: Key) -> str:
        if self.key_label is None:
            return key
        try:
            return str(self.key_label(key))
        except Exception:  # a broken key_label must not break the transaction: use the key
            return key

    def equivalent(self, key: Key, a: Value, b: Value) -> bool:
        if a is b:
            return True
        if self.value_comparator is not None:
            return bool(self.value_comparator(key, a, b))
        return bool(a == b)

    def shown(self, key: Key, value: Value) -> Value:
        """``value`` as it may be shown (see ``redact``); a failing redaction hides it all."""
        if self.redact is None or value is None:
            return value
        try:
            return self.redact(key, value)
        except Exception:
            return REDACTED

    def needs_recreate(self, key: Key, old: Value, new: Value, metadata: Metadata) -> bool:
        if self.update is None:
            return True
        if self.update_with_recreate is None:
            return False
        return bool(self.update_with_recreate(key, old, new, metadata))

    def retriable(self, exc: BaseException) -> bool:
        if isinstance(exc, NonRetriableError):
            return False
        if self.is_retriable_failure is None:
            return True
        return bool(self.is_retriable_failure(exc))


REDACTED = "<redacted>"


def shown_value(descriptor: Descriptor | None, key: Key, value: Value) -> Value:
    """``value`` of ``key`` as its descriptor lets it be shown (unchanged without one)."""
    return value if descriptor is None else descriptor.shown(key, value)


class ValueStatus(NamedTuple):
    """Status of one value as last published by the scheduler (immutable)."""

    key: Key
    state: ValueState
    error: BaseException | None = None
    last_op: TxnOperation = TxnOperation.UNDEFINED
    details: tuple[str, ...] = ()
    origin: ValueOrigin = ValueOrigin.UNKNOWN
    derived_from: Key | None = None
    seq: int | None = None  # transaction that produced this status
    # A PENDING value's missing dependencies by key: for each, the keys any one of which would
    # satisfy it, as far as they can be named (``scheduler.readiness.WaitedKeys``).
    waits_for: tuple[tuple[Key, ...], ...] = ()

    @property
    def error_message(self) -> str:
        return "" if self.error is None else str(self.error)


NONEXISTENT_STATUS = ValueStatus(key="", state=ValueState.NONEXISTENT)


class DumpedValue(NamedTuple):
    """One value returned by ``KVScheduler.dump``."""

    key: Key
    value: Value
    metadata: Metadata
    origin: ValueOrigin


class TransactionError(Exception):
    """A transaction finished with errors (``errors``: key -> (operation, exception)),
    or could not run at all (``errors`` empty, reason in the message)."""

    # The message lands in logs and status records: it names a few errors, ``errors`` has all.
    SHOWN_ERRORS = 5
    SHOWN_ERROR_CHARS = 300

    def __init__(
        self,
        message: str,
        errors: dict[Key, tuple[TxnOperation, BaseException]] | None = None,
        seq: int | None = None,
    ) -> None:
        super().__init__(message)
        self.errors: dict[Key, tuple[TxnOperation, BaseException]] = dict(errors or {})
        self.seq = seq

    @classmethod
    def of_transaction(
        cls, seq: int, errors: dict[Key, tuple[TxnOperation, BaseException]]
    ) -> TransactionError:
        """The error of transaction ``seq`` that ran with ``errors`` (key -> (op, exception)).

        The message names the first ``SHOWN_ERRORS`` errors (each cut to
        ``SHOWN_ERROR_CHARS`` characters), then "... and N more"; ``errors`` stays complete.
        """
        shown = []
        for key, (op, exc) in itertools.islice(errors.items(), cls.SHOWN_ERRORS):
            text = str(exc)
            if len(text) > cls.SHOWN_ERROR_CHARS:
                text = text[: cls.SHOWN_ERROR_CHARS] + "..."
            shown.append(f"{key} ({op.value}): {text}")
        message = f"transaction #{seq} failed: "
        if len(errors) > 1:
            message += f"{len(errors)} errors: "
        message += ", ".join(shown)
        if len(errors) > len(shown):
            message += f", ... and {len(errors) - len(shown)} more"
        return cls(message, errors=errors, seq=seq)


class SchedulerClosedError(TransactionError):
    """The scheduler was closed before (or while) the transaction could run."""


class NonRetriableError(Exception):
    """Raise (or subclass) from a descriptor callback for failures a retry cannot fix."""


class InvalidValueError(NonRetriableError):
    """Raise from ``validate``; ``fields`` name the invalid fields (reported as status details)."""

    def __init__(self, message: str, fields: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.fields = tuple(fields)


class ConflictError(InvalidValueError):
    """A value the southbound would refuse together with another NB value (``conflicts``)."""


class UnimplementedOperationError(NonRetriableError):
    """The descriptor lacks the callback the scheduler needed (e.g. ``create``)."""


class DescriptorError(ValueError):
    """Invalid descriptor registration (duplicate name, unknown retrieve dependency, cycle)."""


StatusCallback = Callable[[ValueStatus], None]
KeySelector = Callable[[Key], bool]
Cancel = Callable[[], None]
__all__ = [
    "NONEXISTENT_STATUS",
    "REDACTED",
    "Cancel",
    "ConflictError",
    "Dependency",
    "Descriptor",
    "DescriptorError",
    "DumpedValue",
    "InvalidValueError",
    "Key",
    "KeySelector",
    "Metadata",
    "NonRetriableError",
    "ResyncKind",
    "RetryPolicy",
    "SchedulerClosedError",
    "StatusCallback",
    "TransactionError",
    "TxnOperation",
    "TxnType",
    "UnimplementedOperationError",
    "Value",
    "ValueOrigin",
    "ValueState",
    "ValueStatus",
    "shown_value",
]

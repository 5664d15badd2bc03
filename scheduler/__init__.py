"""KVScheduler: transaction-based reconciliation of key-value pairs with dependency resolution.

Generic: it knows descriptors (how to create/update/delete/retrieve one type of value), not
Linux, VPP or the KvStore. See docs/scheduler.md.
"""

from typing import TYPE_CHECKING, Any

from scheduler.api import (
    REDACTED,
    ConflictError,
    Dependency,
    Descriptor,
    DescriptorError,
    DumpedValue,
    InvalidValueError,
    NonRetriableError,
    ResyncKind,
    RetryPolicy,
    SchedulerClosedError,
    TransactionError,
    TxnOperation,
    TxnType,
    UnimplementedOperationError,
    ValueOrigin,
    ValueState,
    ValueStatus,
)
from scheduler.history import NodeRevision
from scheduler.records import RecordedOp, TxnRecord

if TYPE_CHECKING:
    from scheduler.scheduler import KVScheduler, Txn


def __getattr__(name: str) -> Any:
    # The engine loads on first use: the API types alone — what
    # models and the CLI need — import in a fraction of the time.
    if name in ("KVScheduler", "Txn"):
        from scheduler import scheduler as engine_module

        return getattr(engine_module, name)
    raise AttributeError(f"module 'scheduler' has no attribute {name!r}")

__all__ = [
    "REDACTED",
    "ConflictError",
    "Dependency",
    "Descriptor",
    "DescriptorError",
    "DumpedValue",
    "InvalidValueError",
    "KVScheduler",
    "NodeRevision",
    "NonRetriableError",
    "RecordedOp",
    "ResyncKind",
    "RetryPolicy",
    "SchedulerClosedError",
    "TransactionError",
    "Txn",
    "TxnOperation",
    "TxnRecord",
    "TxnType",
    "UnimplementedOperationError",
    "ValueOrigin",
    "ValueState",
    "ValueStatus",
]

"""KVScheduler: transaction-based reconciliation of key-value pairs with dependency resolution.

Generic: it knows descriptors (how to create/update/delete/retrieve one type of value), not
Linux, VPP or the KvStore. See docs/scheduler.md.
"""

from scheduler.api import (
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
from scheduler.scheduler import KVScheduler, Txn

__all__ = [
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

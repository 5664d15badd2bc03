"""Southbound calls decided by a plan, run after it, and replayed after a failure."""

from __future__ import annotations

from dataclasses import dataclass

from scheduler.api import (
    Descriptor,
    Key,
    Metadata,
    TxnOperation,
    UnimplementedOperationError,
    Value,
)


@dataclass(slots=True)
class Effect:
    """A southbound call decided by the plan (or a metadata-map change), run after planning.

    ``op`` UNDEFINED means "metadata only" (SB values): set ``metadata`` (or drop it).
    """

    op: TxnOperation
    key: Key
    descriptor: Descriptor
    label: str
    args: tuple[Value, ...]  # create: (value,); update: (old, new); delete: (value,)
    metadata: Metadata  # at planning time (update/delete), or the one to set (metadata only)
    keeps_metadata: bool  # descriptor.with_metadata and not a derived value
    drop: bool = False
    result: Metadata = None  # what the call returned, once made


class Raised:
    """A recorded failure of a southbound call (replayed as a raise)."""

    __slots__ = ("exc",)

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


Replay = list[tuple[TxnOperation, Key, object]]


def invoke(
    descriptor: Descriptor, op: TxnOperation, key: Key, args: tuple[Value, ...], metadata: Metadata
) -> Metadata:
    """Run one southbound call of a descriptor; returns the new metadata (None for delete)."""
    if op is TxnOperation.CREATE:
        if descriptor.create is None:
            raise UnimplementedOperationError(f"descriptor {descriptor.name!r} has no create")
        return descriptor.create(key, args[0])
    if op is TxnOperation.UPDATE:
        if descriptor.update is None:
            raise UnimplementedOperationError(f"descriptor {descriptor.name!r} has no update")
        return descriptor.update(key, args[0], args[1], metadata)
    if descriptor.delete is None:
        raise UnimplementedOperationError(f"descriptor {descriptor.name!r} has no delete")
    descriptor.delete(key, args[0], metadata)
    return None

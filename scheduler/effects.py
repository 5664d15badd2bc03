"""What a walk does to the southbound, and to the metadata maps, through one object.

The walk is the same for planning and for execution; the :class:`Effects` object it is given
makes the difference: :class:`PlanEffects` records the calls (and metadata changes) and touches
nothing, :class:`ExecuteEffects` calls the descriptors (replaying the outcomes of calls already
made) and keeps the metadata maps. Planned effects are run by :meth:`ExecuteEffects.run`, with
the same metadata bookkeeping.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Protocol

from scheduler.api import (
    Descriptor,
    Key,
    Metadata,
    TxnOperation,
    UnimplementedOperationError,
    Value,
)
from scheduler.graph import Node
from scheduler.registry import Registry

log = logging.getLogger("scheduler")


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


class Effects(Protocol):
    """What the walk asks of the southbound and of the metadata maps."""

    def call(self, op: TxnOperation, node: Node, args: tuple[Value, ...]) -> Metadata:
        """The CREATE/UPDATE/DELETE call of ``node``'s descriptor; its new metadata."""
        ...

    def metadata(self, node: Node, metadata: Metadata, *, drop: bool, by_call: bool) -> None:
        """``node``'s metadata is now ``metadata`` (or gone: ``drop``); ``by_call``: it
        follows from the :meth:`call` just made (so a plan needs no separate effect)."""
        ...


def keeps_metadata(node: Node) -> bool:
    """Whether the metadata maps keep ``node``'s metadata (base values of descriptors that
    declare metadata)."""
    descriptor = node.descriptor
    return descriptor is not None and descriptor.with_metadata and node.derived_from is None


class PlanEffects:
    """Planning: every call assumed to succeed and recorded (in order) for execution."""

    def __init__(self) -> None:
        self.planned: list[Effect] = []

    def call(self, op: TxnOperation, node: Node, args: tuple[Value, ...]) -> Metadata:
        descriptor = node.descriptor
        assert descriptor is not None
        self.planned.append(
            Effect(op, node.key, descriptor, node.label, args, node.metadata, keeps_metadata(node))
        )
        # Not known before the call is made: an update keeps the metadata it had.
        return node.metadata if op is TxnOperation.UPDATE else None

    def metadata(self, node: Node, metadata: Metadata, *, drop: bool, by_call: bool) -> None:
        if by_call:
            return  # the planned call's effect keeps it when it runs
        descriptor = node.descriptor
        assert descriptor is not None
        self.planned.append(
            Effect(
                TxnOperation.UNDEFINED,
                node.key,
                descriptor,
                node.label,
                (),
                None if drop else metadata,
                True,
                drop=drop,
            )
        )


class ExecuteEffects:
    """Execution: descriptors called, metadata maps kept. ``replay``: the outcomes of the calls
    already made (by :meth:`run`) before a failure, given back in order instead of calling
    again."""

    def __init__(self, registry: Registry, replay: Replay | None = None) -> None:
        self.registry = registry
        self.replay: Replay = replay or []
        self.replay_pos = 0

    def call(self, op: TxnOperation, node: Node, args: tuple[Value, ...]) -> Metadata:
        descriptor = node.descriptor
        assert descriptor is not None
        if self.replay_pos < len(self.replay):
            recorded_op, recorded_key, outcome = self.replay[self.replay_pos]
            self.replay_pos += 1
            if recorded_op is op and recorded_key == node.key:
                if isinstance(outcome, Raised):
                    raise outcome.exc
                return outcome
            # Descriptors answered differently this time: call for real from here on.
            log.error(
                "replay diverged at %s %s (recorded %s %s)", op, node.key, recorded_op, recorded_key
            )
            self.replay_pos = len(self.replay)
        return invoke(descriptor, op, node.key, args, node.metadata)

    def metadata(self, node: Node, metadata: Metadata, *, drop: bool, by_call: bool) -> None:
        descriptor = node.descriptor
        assert descriptor is not None
        self._keep(descriptor, node.label, metadata, drop)

    def run(self, effects: list[Effect], nodes: dict[Key, Node]) -> Replay | None:
        """Make the planned calls in order; None if all succeeded, else the outcomes so far
        (the last one the failure) for a walk that replays them."""
        live: dict[Key, Metadata] = {}  # metadata returned by the calls made so far
        for index, effect in enumerate(effects):
            op = effect.op
            key = effect.key
            if op is TxnOperation.UNDEFINED:  # metadata only (SB values)
                self._keep(effect.descriptor, effect.label, effect.metadata, effect.drop)
                continue
            metadata = live.get(key, effect.metadata)
            try:
                result = invoke(effect.descriptor, op, key, effect.args, metadata)
            except Exception as exc:
                return _replay_of(effects[:index], (op, key, Raised(exc)))
            effect.result = result
            live[key] = result
            if effect.keeps_metadata:
                drop = op is TxnOperation.DELETE
                self._keep(effect.descriptor, effect.label, result, drop)
                node = nodes.get(key)
                if node is not None:
                    node.metadata = None if drop else result
        return None

    def _keep(self, descriptor: Descriptor, label: str, metadata: Metadata, drop: bool) -> None:
        if drop:
            self.registry.drop_metadata(descriptor, label)
        else:
            self.registry.set_metadata(descriptor, label, metadata)


def _replay_of(done: list[Effect], failure: tuple[TxnOperation, Key, object]) -> Replay:
    replay: Replay = [
        (effect.op, effect.key, effect.result)
        for effect in done
        if effect.op is not TxnOperation.UNDEFINED
    ]
    replay.append(failure)
    return replay

"""Desired state of one node as learnt from its KvStore (sans-I/O: the agent loop feeds it).

The agent takes an initial dump of `config/<node>/` and then follows the publication stream.
Updates are accumulated here and taken out in batches, so bursts become one transaction; a key
changed twice before it is taken out yields only its latest value.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import msgpack

from kvmesh.agent.keys import config_prefix, model_key_of

Model = dict[str, Any]


class ValueDecodeError(ValueError):
    pass


# Deepest nesting of maps/arrays accepted in a config value. msgpack's own unpacker stops at
# 1024 levels, but a 1000-level value would still make every recursive step after it (dict
# comparison, repr, JSON for the REST API) risk a RecursionError; real models nest a few levels.
MAX_VALUE_DEPTH = 32


def decode_config_value(raw: bytes) -> Model | None:
    """msgpack map -> dict; empty bytes is a tombstone (None). Anything else is an error."""
    if raw == b"":
        return None
    try:
        # unpackb bounds every string/array/map length by len(raw) by itself.
        decoded = msgpack.unpackb(raw, raw=False, strict_map_key=True)
    except Exception as exc:  # msgpack raises several unrelated types
        raise ValueDecodeError(f"not valid msgpack: {type(exc).__name__}: {exc}") from exc
    if not isinstance(decoded, dict):
        raise ValueDecodeError(f"expected a msgpack map, got {type(decoded).__name__}")
    _check_depth(decoded)
    return decoded


def _check_depth(value: Any) -> None:
    """ValueDecodeError if containers nest deeper than MAX_VALUE_DEPTH (iterative walk)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_VALUE_DEPTH:
            raise ValueDecodeError(f"nested deeper than {MAX_VALUE_DEPTH} levels")
        children = item.values() if isinstance(item, dict) else item
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))


def encode_config_value(value: Model | None) -> bytes:
    return b"" if value is None else msgpack.packb(value, use_bin_type=True)


@dataclass
class DesiredState:
    node: str
    desired: dict[str, Model] = field(default_factory=dict)
    pending: dict[str, Model | None] = field(default_factory=dict)
    # Model keys whose value is present but cannot be applied (undecodable), with the reason;
    # and the keys whose refusal may have changed since `take_refusals()` (newly refused, no
    # longer refused, or no longer desired at all: a refusal by the scheduler is withdrawn).
    decode_errors: dict[str, str] = field(default_factory=dict)
    refusals_changed: set[str] = field(default_factory=set)
    first_pending_at: float | None = None
    counters: dict[str, int] = field(
        default_factory=lambda: {"updates": 0, "tombstones": 0, "expired": 0, "decode_errors": 0}
    )

    @property
    def prefix(self) -> str:
        return config_prefix(self.node)

    def load_dump(self, key_vals: Mapping[str, bytes | None], now: float = 0.0) -> int:
        """Reconcile with a full dump of the KvStore: every difference (new, changed or gone
        value) is staged as a pending change. Returns how many model keys changed."""
        decoded = list(self._decoded(key_vals))
        present = {k for k, v in decoded if v is not None}
        seen = {k for k, _v in decoded}
        for model_key in [k for k in self.decode_errors if k not in seen]:
            self._clear_refusal(model_key)  # gone from the store while we were not listening
        changed = sum(self._stage(k, v, now) for k, v in decoded)
        for model_key in [k for k in self.desired if k not in present]:
            changed += self._stage(model_key, None, now)
        return changed

    def update(
        self, key_vals: Mapping[str, bytes | None], expired: Iterable[str] = (), now: float = 0.0
    ) -> int:
        """Record changes from one publication; `None` payloads (TTL refreshes) are ignored.

        Returns how many model keys changed.
        """
        changed = 0
        for model_key, value in self._decoded(key_vals):
            if value is None:
                self.counters["tombstones"] += 1
            changed += self._stage(model_key, value, now)
        for key in expired:
            gone = model_key_of(key, self.prefix)
            if gone is not None:
                self.counters["expired"] += 1
                self._clear_refusal(gone)
                changed += self._stage(gone, None, now)
        return changed

    def _decoded(
        self, key_vals: Mapping[str, bytes | None]
    ) -> Iterator[tuple[str, Model | None]]:
        """(model key, value or None) for this node's keys; TTL-only updates are skipped."""
        for key, raw in key_vals.items():
            model_key = model_key_of(key, self.prefix)
            if model_key is not None and raw is not None:
                yield model_key, self._decode(model_key, raw)

    def take_pending(
        self, max_items: int | None = None, accept: Callable[[str], bool] | None = None
    ) -> dict[str, Model | None]:
        """Remove and return up to `max_items` pending changes (oldest first).

        `accept(model_key)` holds back changes that may not be applied yet (e.g. for a device
        that is not KNOWN): they stay pending, in order.
        """
        keys = [k for k in self.pending if accept is None or accept(k)]
        if max_items is not None:
            keys = keys[:max_items]
        batch = {k: self.pending.pop(k) for k in keys}
        if not self.pending:
            self.first_pending_at = None
        return batch

    def record_applied(self, values: Mapping[str, Model | None]) -> None:
        """Values applied by other means (the agent's transactional REST apply), about to be
        written to the mesh: taken as desired and not pending, so their publication arriving
        later changes nothing (no second transaction re-applying or undoing them)."""
        for model_key, value in values.items():
            if value is None:
                self.desired.pop(model_key, None)
            else:
                self.desired[model_key] = value
            self.pending.pop(model_key, None)
        if not self.pending:
            self.first_pending_at = None

    def take_scope(self, in_scope: Callable[[str], bool]) -> dict[str, Model]:
        """The desired values `in_scope`, their pending changes dropped (a resync of them
        applies the current desired state, deletions included)."""
        for key in [k for k in self.pending if in_scope(k)]:
            del self.pending[key]
        if not self.pending:
            self.first_pending_at = None
        return {k: v for k, v in self.desired.items() if in_scope(k)}

    def _stage(self, model_key: str, value: Model | None, now: float) -> int:
        if value is None:
            if model_key not in self.desired and model_key not in self.pending:
                return 0
            self.desired.pop(model_key, None)
            self.refusals_changed.add(model_key)  # a refusal of it (if any) is withdrawn
        else:
            if self.desired.get(model_key) == value and model_key not in self.pending:
                return 0
            self.desired[model_key] = value
        if not self.pending:
            self.first_pending_at = now or time.monotonic()
        self.pending[model_key] = value
        self.counters["updates"] += 1
        return 1

    def take_refusals(self) -> dict[str, str | None]:
        """Model keys whose refusal may have changed since the last call: the reason, or None
        when the key is not refused (any INVALID status the agent published for it is
        withdrawn; see StatusPublisher.refuse)."""
        changed = {k: self.decode_errors.get(k) for k in sorted(self.refusals_changed)}
        self.refusals_changed.clear()
        return changed

    def _clear_refusal(self, model_key: str) -> None:
        if self.decode_errors.pop(model_key, None) is not None:
            self.refusals_changed.add(model_key)

    def _decode(self, model_key: str, raw: bytes) -> Model | None:
        try:
            value = decode_config_value(raw)
        except ValueDecodeError as exc:
            # An undecodable value cannot be applied: treat it as not desired and report why.
            self.decode_errors[model_key] = str(exc)
            self.refusals_changed.add(model_key)
            self.counters["decode_errors"] += 1
            return None
        self._clear_refusal(model_key)
        return value


Refusals = dict[str, str | None]  # model key -> reason (None: no longer refused)


class SharedDesiredState:
    """The node's ``DesiredState`` as the agent's threads share it (the northbound follower,
    the reconciliation runs, the REST apply): every access under one lock, and the refusals
    each change brings reported through `on_refusals` while it is held (so they reach the
    status publisher in the order they happened)."""

    def __init__(self, node: str, on_refusals: Callable[[Refusals], None]) -> None:
        self._state = DesiredState(node)
        self._on_refusals = on_refusals
        self._lock = threading.Lock()

    def load_dump(self, key_vals: Mapping[str, bytes | None]) -> int:
        """``DesiredState.load_dump``; returns how many model keys changed."""
        with self._lock:
            changed = self._state.load_dump(key_vals)
            self._on_refusals(self._state.take_refusals())
            return changed

    def update(self, key_vals: Mapping[str, bytes | None], expired: Iterable[str]) -> int:
        """``DesiredState.update`` with one publication; returns how many model keys changed."""
        with self._lock:
            changed = self._state.update(key_vals, expired)
            self._on_refusals(self._state.take_refusals())
            return changed

    @property
    def first_pending_at(self) -> float | None:
        with self._lock:
            return self._state.first_pending_at

    def take_batch(self, max_items: int, window_s: float, quiet: bool,
                   accept: Callable[[str], bool]) -> dict[str, Model | None]:
        """The pending changes due for a transaction (`accept`ed ones, oldest first, up to
        `max_items`): once the stream is `quiet`, the oldest waited `window_s`, or the batch
        is full; else nothing."""
        with self._lock:
            first = self._state.first_pending_at
            if first is None:
                return {}
            window_closed = time.monotonic() - first >= window_s
            if not (quiet or window_closed or len(self._state.pending) >= max_items):
                return {}
            return self._state.take_pending(max_items, accept=accept)

    def current(self) -> dict[str, Model]:
        """A copy of the desired values."""
        with self._lock:
            return dict(self._state.desired)

    def pending(self) -> dict[str, Model | None]:
        """A copy of the changes not applied yet."""
        with self._lock:
            return dict(self._state.pending)

    def has_pending(self, selected: Callable[[str], bool]) -> bool:
        with self._lock:
            return any(selected(key) for key in self._state.pending)

    def take_scope(self, in_scope: Callable[[str], bool]) -> dict[str, Model]:
        """The desired values `in_scope`, their pending changes dropped: a resync applies the
        current desired state (deletions included) in their place."""
        with self._lock:
            return self._state.take_scope(in_scope)

    def record_applied(self, values: Mapping[str, Model | None]) -> None:
        """``DesiredState.record_applied``."""
        with self._lock:
            self._state.record_applied(values)

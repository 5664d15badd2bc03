"""Desired state of one node as learnt from its KvStore (sans-I/O: the agent loop feeds it).

The agent takes an initial dump of `config/<node>/` and then follows the publication stream.
Updates are accumulated here and taken out in batches, so bursts become one transaction; a key
changed twice before it is taken out yields only its latest value.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import msgpack

from kvmesh.agent.keys import config_prefix, model_key_of

Model = dict[str, Any]


class ValueDecodeError(ValueError):
    pass


def decode_config_value(raw: bytes) -> Model | None:
    """msgpack map -> dict; empty bytes is a tombstone (None). Anything else is an error."""
    if raw == b"":
        return None
    try:
        decoded = msgpack.unpackb(raw, raw=False, strict_map_key=True)
    except Exception as exc:  # msgpack raises several unrelated types
        raise ValueDecodeError(f"not valid msgpack: {exc}") from exc
    if not isinstance(decoded, dict):
        raise ValueDecodeError(f"expected a msgpack map, got {type(decoded).__name__}")
    return decoded


def encode_config_value(value: Model | None) -> bytes:
    return b"" if value is None else msgpack.packb(value, use_bin_type=True)


@dataclass
class DesiredState:
    node: str
    desired: dict[str, Model] = field(default_factory=dict)
    pending: dict[str, Model | None] = field(default_factory=dict)
    decode_errors: dict[str, str] = field(default_factory=dict)
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

    def _stage(self, model_key: str, value: Model | None, now: float) -> int:
        if value is None:
            if model_key not in self.desired and model_key not in self.pending:
                return 0
            self.desired.pop(model_key, None)
        else:
            if self.desired.get(model_key) == value and model_key not in self.pending:
                return 0
            self.desired[model_key] = value
        if not self.pending:
            self.first_pending_at = now or time.monotonic()
        self.pending[model_key] = value
        self.counters["updates"] += 1
        return 1

    def _decode(self, model_key: str, raw: bytes) -> Model | None:
        try:
            value = decode_config_value(raw)
        except ValueDecodeError as exc:
            # An undecodable value cannot be applied: treat it as not desired and report why.
            self.decode_errors[model_key] = str(exc)
            self.counters["decode_errors"] += 1
            return None
        self.decode_errors.pop(model_key, None)
        return value

"""Value statuses published into the mesh as `status/<node>/<model key>` (sans-I/O).

Each status is a self-originated key with a TTL that the agent keeps refreshing (TTL-only updates,
batched, every quarter of the TTL), so the statuses of an agent that is gone for good disappear
by themselves (after a day by default). The agent's own record `node/<N>/agent` is a heartbeat
key: refreshed every `heartbeat_ms`, it tells readers whether the agent is alive, so they show
a dead agent's statuses as stale rather than current (`kvmesh.agent.liveness`). When a value
goes, its status key is replaced by an empty value (a tombstone) with a short TTL: readers treat
it as absent, and it expires on every node shortly after.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import msgpack

from kvmesh.agent.keys import model_key_of, status_key, status_prefix
from kvmesh.agent.liveness import HEARTBEAT_MS
from kvstore import Value
from scheduler import ValueOrigin, ValueState, ValueStatus

#: Lifetime of a tombstone that announces a removed status.
TOMBSTONE_TTL_MS = 5_000

GONE_STATES = frozenset({ValueState.REMOVED, ValueState.NONEXISTENT})


#: A PENDING value's missing dependencies by key: a list per dependency of the keys any one of
#: which would satisfy it (``scheduler.readiness.WaitedKeys``). Added in 0.5; a record without
#: it (an older agent's, or a value that waits for nothing namable) says nothing by key.
WAITS_FOR_KEYS = "waits_for_keys"


def status_record(status: ValueStatus, now: float | None = None) -> dict[str, Any]:
    """The published form of a value status (a msgpack map)."""
    record: dict[str, Any] = {
        "state": status.state.name,
        "error": status.error_message,
        "last_op": status.last_op.name,
        "details": list(status.details),
        "origin": status.origin.name,
        "derived_from": status.derived_from,
        "seq": status.seq,
        "time": round(time.time() if now is None else now, 3),
    }
    if status.waits_for:
        record[WAITS_FOR_KEYS] = [list(keys) for keys in status.waits_for]
    return record


def waits_for_keys(record: Mapping[str, Any]) -> list[list[str]] | None:
    """What a PENDING status (or a plan's operation) says it waits for by key, or None when it
    does not say (an older agent's record, or a malformed one: then nothing is known to come)."""
    waits = record.get(WAITS_FOR_KEYS)
    if not isinstance(waits, list) or not all(
            isinstance(keys, list) and all(isinstance(key, str) for key in keys)
            for keys in waits):
        return None
    return waits


def refusal_status(model_key: str, reason: str) -> ValueStatus:
    """The INVALID status of a desired value the agent refused before the scheduler saw it
    (undecodable, or not a value the agent may apply): same shape as any other status."""
    return ValueStatus(key=model_key, state=ValueState.INVALID, error=ValueError(reason),
                       details=("refused by the agent",), origin=ValueOrigin.FROM_NB)


def decode_status(raw: bytes | None) -> dict[str, Any] | None:
    """A published status, or None for a tombstone / TTL-only update."""
    if not raw:
        return None
    decoded = msgpack.unpackb(raw, raw=False)
    return decoded if isinstance(decoded, dict) else None


@dataclass
class _Published:
    version: int
    ttl_version: int = 0
    alive: bool = True


@dataclass
class StatusPublisher:
    """Turns scheduler status changes into KvStore key-values for `status/<node>/...`."""

    node: str
    ttl_ms: int = 86_400_000
    heartbeat_ms: int = HEARTBEAT_MS
    _published: dict[str, _Published] = field(default_factory=dict)
    # Status keys of refused desired values (see `refuse`), whose INVALID status stays until the
    # desired value goes: the scheduler's REMOVED for a value the agent refused itself (it is
    # not desired) must not withdraw it, and an obtained key's refusal is not withdrawn by it.
    _refused: set[str] = field(default_factory=set)
    _staged: dict[str, Value] = field(default_factory=dict)
    _next_refresh: float = 0.0
    _heartbeat_keys: set[str] = field(default_factory=set)
    _next_heartbeat: float = 0.0

    def seed(self, existing: Mapping[str, Value]) -> None:
        """Continue from the versions already in the mesh (e.g. after an agent restart)."""
        for key, value in existing.items():
            if model_key_of(key, status_prefix(self.node)) is None:
                continue
            if value.originator_id == self.node:
                self._published[key] = _Published(value.version, value.ttl_version,
                                                  alive=bool(value.value))
            else:
                # Someone else wrote our key: outbid them on the next publication.
                self._published[key] = _Published(value.version, 0, alive=bool(value.value))

    def stale_keys(self, managed: set[str]) -> list[str]:
        """Published status keys whose model key the agent no longer manages."""
        prefix = status_prefix(self.node)
        return [k for k, p in self._published.items()
                if p.alive and (model_key_of(k, prefix) or "") not in managed]

    def on_status(self, status: ValueStatus, now: float | None = None) -> None:
        key = status_key(self.node, status.key)
        if status.origin is ValueOrigin.FROM_SB or status.state is ValueState.OBTAINED:
            # Obtained from the southbound (or derived from such): not managed here. But an
            # INVALID status of such a key is the refusal of a desired value (e.g. a config value
            # for a reserved `linux/interface/host/...` key): published until that desired value
            # goes (`refuse(model_key, None)`).
            if status.state is ValueState.INVALID:
                self._refused.add(key)
                self.publish(key, status_record(status, now))
            return
        if key in self._refused:
            return
        if status.state in GONE_STATES:
            self.remove(key)
            return
        self.publish(key, status_record(status, now))

    def refuse(self, model_key: str, reason: str | None, now: float | None = None) -> None:
        """Publish (reason) or withdraw (None) the agent's own refusal of a desired value."""
        key = status_key(self.node, model_key)
        if reason is not None:
            self._refused.add(key)
            self.publish(key, status_record(refusal_status(model_key, reason), now))
        elif key in self._refused:
            self._refused.discard(key)
            self.remove(key)  # a valid value that replaces it gets its own status when applied

    def publish(self, key: str, record: dict[str, Any], heartbeat: bool = False) -> None:
        """Publish any self-originated record (e.g. a device state) under `key`; with
        `heartbeat`, refreshed every `heartbeat_ms`, saying so in the record (readers tell from
        its remaining TTL when it was last refreshed: `kvmesh.agent.liveness`)."""
        if heartbeat:
            self._heartbeat_keys.add(key)
            record = {**record, "heartbeat_ms": self.heartbeat_ms, "ttl_ms": self.ttl_ms}
        self._stage(key, msgpack.packb(record, use_bin_type=True), self.ttl_ms)

    def remove(self, key: str) -> None:
        pub = self._published.get(key)
        if pub is None or not pub.alive:
            return
        self._stage(key, b"", TOMBSTONE_TTL_MS)

    def refresh_due_in(self, now: float) -> float:
        """Seconds until `take` refreshes the TTLs (0: due now)."""
        due = self._next_refresh
        if self._heartbeat_keys:
            due = min(due, self._next_heartbeat)
        return max(0.0, due - now)

    def take(self, now: float) -> dict[str, Value]:
        """Key-values to send now: staged changes, plus TTL refreshes when they are due."""
        out, self._staged = self._staged, {}
        if now >= self._next_refresh:
            # A refresh every ttl/4 leaves three more chances before the status would expire.
            self._next_refresh = now + self.ttl_ms / 4000.0
            self._next_heartbeat = now + self.heartbeat_ms / 1000.0
            self._refresh(self._published, out)
        elif now >= self._next_heartbeat:
            self._next_heartbeat = now + self.heartbeat_ms / 1000.0
            self._refresh(self._heartbeat_keys, out)
        return out

    def _refresh(self, keys: Iterable[str], out: dict[str, Value]) -> None:
        for key in keys:
            pub = self._published.get(key)
            if pub is not None and pub.alive and key not in out:
                pub.ttl_version += 1
                out[key] = Value(version=pub.version, originator_id=self.node, value=None,
                                 ttl_ms=self.ttl_ms, ttl_version=pub.ttl_version)

    def _stage(self, key: str, payload: bytes, ttl_ms: int) -> None:
        pub = self._published.get(key)
        version = 1 if pub is None else pub.version + 1
        self._published[key] = _Published(version, 0, alive=bool(payload))
        self._staged[key] = Value(version=version, originator_id=self.node, value=payload,
                                  ttl_ms=ttl_ms, ttl_version=0)

"""The publication stream as Server-Sent Events, without I/O (`GET /stream`, docs/agent.md).

What a client of `GET /stream?prefix=P[&snapshot=1]` receives, decided here and nowhere else:

- one event per key-value of a publication under P: event type `value` (a key-value with its
  value), `tombstone` (the value is empty: the key was deleted), `refresh` (a TTL-only update:
  no value), and `expired` (the node expired the key). The data is one line of JSON: `key`,
  `version`, `originator`, `ttl` (ms, -1 for infinite), `ttl_version`, and `value` decoded —
  JSON when the bytes are a msgpack map, else `{"b64": ...}`;
- with `snapshot=1`: every key under P first (`value` events), then one `synced` event, then
  the live events. The stream is subscribed BEFORE the dump is taken (list-then-watch), so
  nothing published in between is lost; what the dump already holds is then dropped from the
  live events by version (`SnapshotMerge`);
- `: heartbeat` comments keep idle connections (and proxies) open;
- each client has a bounded buffer in bytes (`ClientBuffer`): a client that does not read is
  sent one last `dropped` event and disconnected, never left to pin memory.

The shell (`kvmesh.agent.stream_hub`) owns the sockets; this module only turns publications
into bytes and decides what to drop.
"""

from __future__ import annotations

import base64
import json
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import msgpack

from kvstore import TTL_INFINITY, Publication, Value

HEARTBEAT = b": heartbeat\n\n"
HEARTBEAT_S = 15.0
DEFAULT_BUFFER_BYTES = 1 << 20  # what one client may have queued, unread
EVENT_TYPES = ("value", "tombstone", "refresh", "expired", "synced", "dropped")


def decode_value(raw: bytes) -> Any:
    """A msgpack map as JSON data; any other bytes as {"b64": ...}."""
    try:
        decoded = msgpack.unpackb(raw, raw=False)
    except Exception:  # msgpack raises several unrelated types for bytes it cannot read
        decoded = None
    if isinstance(decoded, dict):
        try:
            json.dumps(decoded)
            return decoded
        except (TypeError, ValueError):  # bytes inside, or keys JSON cannot hold
            pass
    return {"b64": base64.b64encode(raw).decode("ascii")}


def value_event(key: str, value: Value) -> tuple[str, dict[str, Any]]:
    """The event of one key-value: its type and data."""
    ttl = value.ttl_ms if value.ttl_ms != TTL_INFINITY else -1
    data: dict[str, Any] = {"key": key, "version": value.version,
                            "originator": value.originator_id, "ttl": ttl,
                            "ttl_version": value.ttl_version}
    if value.value is None:
        return "refresh", data
    if value.value == b"":
        return "tombstone", {**data, "value": None}
    return "value", {**data, "value": decode_value(value.value), "size": len(value.value)}


def publication_events(publication: Publication,
                       prefix: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """The events of a publication under `prefix` (key-values in key order, then expiries)."""
    key_vals: Mapping[str, Value] = publication.key_vals or {}
    for key in sorted(key_vals):
        if key.startswith(prefix):
            yield value_event(key, key_vals[key])
    for key in publication.expired_keys or ():
        if key.startswith(prefix):
            yield "expired", {"key": key}


def encode_event(event: str, data: Mapping[str, Any]) -> bytes:
    """One SSE frame: `event:` and a single `data:` line of JSON (json.dumps never emits a
    newline without indent, so the frame cannot be split or forged by a value's content)."""
    return f"event: {event}\ndata: {json.dumps(data, sort_keys=True)}\n\n".encode()


@dataclass
class SnapshotMerge:
    """List-then-watch without a gap or a duplicate: live events are held back until the dump
    is sent; then only what is newer than the dump (by version, then ttl_version) goes out.

    `live` runs on the loop that receives publications; `snapshot_into` may run in another
    thread (a big dump takes seconds to turn into events): one lock orders them."""

    synced: bool = False
    _held: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    _seen: dict[str, tuple[int, int]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def live(self, events: Iterable[tuple[str, dict[str, Any]]]) -> list[tuple[str, dict[str,
                                                                                          Any]]]:
        """Live events in: what to send now (nothing before the snapshot is out)."""
        with self._lock:
            if not self.synced:
                self._held.extend(events)
                return []
            return [event for event in events if self._is_new(*event)]

    def snapshot(self, dump: Mapping[str, Value]) -> list[tuple[str, dict[str, Any]]]:
        """The dump in: its events, `synced`, then the held live events newer than it."""
        out: list[tuple[str, dict[str, Any]]] = []
        self.snapshot_into(dump, out.extend)
        return out

    def snapshot_into(self, dump: Mapping[str, Value],
                      deliver: Callable[[list[tuple[str, dict[str, Any]]]], None]) -> None:
        """`snapshot`, handing the events to `deliver` in order: the dump's (built and
        delivered without the lock: live events are held meanwhile), then `synced` and the
        held ones, delivered under the lock so that no later live event overtakes them."""
        events = [value_event(key, dump[key]) for key in sorted(dump)]
        deliver(events)
        with self._lock:
            for _event, data in events:
                mark = (data["version"], data["ttl_version"])
                if self._seen.get(data["key"], (-1, -1)) < mark:
                    self._seen[data["key"]] = mark
            self.synced = True
            held, self._held = self._held, []
            deliver([("synced", {"keys": len(dump)}),
                     *(event for event in held if self._is_new(*event))])

    def _is_new(self, event: str, data: dict[str, Any]) -> bool:
        key = data["key"]
        if event == "expired":
            self._seen.pop(key, None)
            return True
        mark = (data["version"], data["ttl_version"])
        seen = self._seen.get(key)
        if seen is not None and mark <= seen:
            return False
        self._seen[key] = mark
        return True


@dataclass
class ClientBuffer:
    """What one client has not read yet, bounded in bytes. `offer` refuses what does not fit;
    the client is then dropped (`overflowed`), with room kept for the final `dropped` event."""

    limit: int = DEFAULT_BUFFER_BYTES
    size: int = 0
    overflowed: bool = False
    _frames: deque[bytes] = field(default_factory=deque)

    def offer(self, frame: bytes) -> bool:
        if self.overflowed:
            return False
        if self.size + len(frame) > self.limit:
            self.drop(f"the client did not read: over {self.limit} bytes unread")
            return False
        self._frames.append(frame)
        self.size += len(frame)
        return True

    def drop(self, reason: str) -> None:
        """End the stream: what is queued is replaced by the final `dropped` event."""
        self.overflowed = True
        self._frames.clear()
        self.size = 0
        self._frames.append(encode_event("dropped", {"reason": reason}))

    def take(self) -> bytes:
        """Everything queued, at once (one write)."""
        out = b"".join(self._frames)
        self._frames.clear()
        self.size = 0
        return out

    def __bool__(self) -> bool:
        return bool(self._frames)


@dataclass
class EventParser:
    """The client's side: SSE lines in, (event, data) out (comments and unknown fields
    skipped; data lines joined as the SSE format says)."""

    _event: str = "message"
    _data: list[str] = field(default_factory=list)

    def feed(self, line: str) -> tuple[str, str] | None:
        line = line.rstrip("\r\n")
        if not line:
            if not self._data:
                self._event = "message"
                return None
            out = (self._event, "\n".join(self._data))
            self._event, self._data = "message", []
            return out
        if line.startswith(":"):
            return None
        name, _sep, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        return None


def event_line(event: str, data: Mapping[str, Any]) -> str:
    """One line of text for an event (`kvmesh snoop --http`), marked as `snoop` marks its
    lines: `+` value, `x` tombstone, `~` TTL refresh, `-` expired, `=` synced."""
    key = data.get("key", "")
    ttl = data.get("ttl")
    ttl_text = "inf" if ttl == -1 else f"{ttl}ms"
    head = f"{key}  v{data.get('version')} {data.get('originator')}  ttl={ttl_text}"
    if event == "value":
        return f"+ {head}  {json.dumps(data.get('value'), sort_keys=True)}"
    if event == "tombstone":
        return f"x {head}  (deleted)"
    if event == "refresh":
        return f"~ {head} ttl_version={data.get('ttl_version')}"
    if event == "expired":
        return f"- {key}  expired"
    if event == "synced":
        return f"= synced: {data.get('keys')} key(s) in the snapshot"
    return f"! {event} {json.dumps(data, sort_keys=True)}"


def stream_headers() -> dict[str, str]:
    """The answer's head: an event stream that no cache or proxy buffers."""
    return {"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-store",
            "X-Accel-Buffering": "no"}

"""Publications to local subscribers (the XPUB socket), with a bound per subscriber.

A subscriber that does not read would otherwise make the node queue everything published for
it: ZeroMQ bounds a subscriber's queue in MESSAGES (SNDHWM), not bytes. The bound in bytes is
made of two parts:
- every publication goes out in frames of at most PUBLICATION_CHUNK_BYTES (a large delta is
  split by keys into several publications; a single key-value larger than that is one frame),
- SNDHWM = subscriber_queue_bytes // PUBLICATION_CHUNK_BYTES frames per subscriber.
So a subscriber's queue holds at most `subscriber_queue_bytes` (plus, only for key-values
bigger than a chunk, up to SNDHWM of those).

The socket runs with XPUB_NODROP: a send fails (EAGAIN) when some subscriber's queue is full
instead of dropping silently. The publication is then sent once more in lossy mode, which
delivers it to every subscriber with room and drops it for the full ones, and the drop is
counted (`kvstore.subscribers.dropped_publications`) and logged. A subscriber that missed
publications must re-read the store (KEY_DUMP), as after any reconnection.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections import Counter

import zmq

from kvstore import wire
from kvstore.gen.kvstore_thrift.ttypes import Publication

log = logging.getLogger("kvstore.node")

PUBLICATION_CHUNK_BYTES = 8 * 1024
_LOG_INTERVAL_S = 5.0


def subscriber_hwm(queue_bytes: int) -> int:
    """SNDHWM (frames) of the publication socket for a per-subscriber byte budget."""
    return max(1, queue_bytes // PUBLICATION_CHUNK_BYTES)


def publication_frames(publication: Publication, max_bytes: int) -> list[bytes]:
    """`publication` encoded in frames of at most `max_bytes`, split by keys when larger (same
    node_ids and timestamp on every part; expired keys split the same way). A part that holds
    a single key-value (or a single expired key) is not split further, whatever its size."""
    data = wire.encode(publication)
    if len(data) <= max_bytes:
        return [data]
    key_vals = publication.key_vals or {}
    expired = publication.expired_keys or []
    if len(key_vals) + len(expired) <= 1:
        return [data]
    parts = -(-len(data) // max_bytes)  # ceil: roughly max_bytes each
    frames: list[bytes] = []
    for sub in _split(publication, key_vals, expired, parts):
        frames.extend(publication_frames(sub, max_bytes))
    return frames


def _split(
    publication: Publication, key_vals: dict[str, object], expired: list[str], parts: int
) -> list[Publication]:
    def part(kv: dict[str, object], gone: list[str]) -> Publication:
        return Publication(
            key_vals=kv,
            expired_keys=gone or None,
            node_ids=publication.node_ids,
            timestamp_ms=publication.timestamp_ms,
        )

    if len(key_vals) > 1:
        size = -(-len(key_vals) // min(parts, len(key_vals)))
        items = iter(key_vals.items())
        out = [part(dict(itertools.islice(items, size)), []) for _ in range(0, len(key_vals), size)]
        out[0].expired_keys = expired or None
        return out
    size = -(-len(expired) // min(parts, len(expired)))
    out = [part({}, expired[i : i + size]) for i in range(0, len(expired), size)]
    out[0].key_vals = dict(key_vals)
    return out


class Publisher:
    """Sends frames on the XPUB socket (XPUB_NODROP set), counting and logging drops."""

    def __init__(self, sock: zmq.Socket[bytes], counters: Counter[str]) -> None:
        self._sock = sock
        self._counters = counters
        self._last_log = -_LOG_INTERVAL_S
        self._unlogged = 0

    def send(self, frame: bytes) -> None:
        sock = self._sock
        try:
            sock.send(frame, zmq.NOBLOCK)
            return
        except zmq.Again:
            pass
        # Some subscriber's queue is full: deliver to the others, drop for it.
        sock.setsockopt(zmq.XPUB_NODROP, 0)
        try:
            sock.send(frame, zmq.NOBLOCK)
        finally:
            sock.setsockopt(zmq.XPUB_NODROP, 1)
        self._counters["kvstore.subscribers.dropped_publications"] += 1
        self._log_drop()

    def _log_drop(self) -> None:
        now = time.monotonic()
        if now - self._last_log < _LOG_INTERVAL_S:
            self._unlogged += 1
            return
        more = f" ({self._unlogged} more since the last report)" if self._unlogged else ""
        log.warning(
            "a subscriber is not reading: its queue is full (subscriber_queue_bytes),"
            " publications to it are dropped%s",
            more,
        )
        self._last_log = now
        self._unlogged = 0

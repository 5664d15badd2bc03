"""Publications to local subscribers (the XPUB socket), with a bound in BYTES per subscriber.

A subscriber that does not read makes the node queue what is published for it. ZeroMQ bounds a
subscriber's queue (its pipe) in MESSAGES (SNDHWM), whatever their size: with key-values of
1 MiB, 4096 queued messages pinned 4 GiB. The bound in bytes is made of three parts:
- every publication goes out in frames of at most PUBLICATION_CHUNK_BYTES (a large delta is
  split by keys into several publications; a single key-value larger than that is one frame),
- a frame of n chunks is followed by n - 1 padding frames (`wire.PUBLICATION_PADDING`, an empty
  Publication): the frame and its padding take n places in every queue they enter, so a queue
  of SNDHWM places holds about as many bytes as SNDHWM chunks,
- SNDHWM = subscriber_queue_bytes // PUBLICATION_CHUNK_BYTES places per subscriber.
A frame enters a queue only while the queue has a free place; its padding follows it as far as
there is room. So a queue holds at most `subscriber_queue_bytes` plus one frame (the last one
admitted, whose padding did not fit). ZeroMQ's I/O thread holds one more frame (the one being
written), and the kernel's send buffer is set to PUB_SNDBUF_MAX at most (kernel memory, not the
process's).

The node subscribes every subscriber to everything (XPUB_MANUAL): padding starts with the bytes
of no particular topic, so a subscriber that asked for a narrower topic would otherwise get the
large frames without their padding. Each subscriber's own socket filters by its topics.

The socket runs with XPUB_NODROP: a send fails (EAGAIN) when some subscriber's queue is full
instead of dropping silently. The publication is then sent once more in lossy mode, which
delivers it to every subscriber with room and drops it for the full ones, and the drop is
counted (`kvstore.subscribers.dropped_publications`, `kvstore.send_failure.pub`) and logged. A
subscriber that missed publications must re-read the store (KEY_DUMP), as after any
reconnection. Padding is sent in lossy mode: a full queue does not need it.
"""

from __future__ import annotations

import itertools
import logging
from collections import Counter
from collections.abc import Callable

import zmq

from kvstore import stats, wire
from kvstore.gen.kvstore_thrift.ttypes import Publication
from kvstore.shell import ThrottledWarning

log = logging.getLogger("kvstore.node")

PUBLICATION_CHUNK_BYTES = 8 * 1024
# The kernel's send buffer of a subscriber's connection, at most (Linux doubles the value set).
PUB_SNDBUF_MAX = 1024 * 1024


def subscriber_hwm(queue_bytes: int) -> int:
    """SNDHWM (places of one chunk each) of the publication socket for a per-subscriber budget."""
    return max(1, queue_bytes // PUBLICATION_CHUNK_BYTES)


def subscriber_sndbuf(queue_bytes: int) -> int:
    """SO_SNDBUF of the publication socket: a quarter of the budget, PUB_SNDBUF_MAX at most."""
    return max(PUBLICATION_CHUNK_BYTES, min(PUB_SNDBUF_MAX, queue_bytes // 4))


def padding_frames(frame_bytes: int) -> int:
    """Padding frames sent after a frame of `frame_bytes`: one per chunk beyond the first."""
    return max(0, -(-frame_bytes // PUBLICATION_CHUNK_BYTES) - 1)


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


def _sender(frame: zmq.Frame) -> tuple[int, str | None]:
    """The connection (descriptor) a subscription came on, and its ZAP User-Id if any."""
    fd = int(frame.get(zmq.SRCFD))
    try:
        user_id = frame.get("User-Id")
    except zmq.ZMQError:  # plaintext: no ZAP
        return fd, None
    return fd, user_id if isinstance(user_id, str) else None


class Publisher:
    """The XPUB socket's shell: subscribes every subscriber to everything, sends frames with
    their padding (XPUB_NODROP set), counts and logs drops."""

    def __init__(self, sock: zmq.Socket[bytes], counters: Counter[str],
                 on_subscriber: Callable[[int, str | None], None] | None = None) -> None:
        self._sock = sock
        # Told each subscriber's connection and key (secured: its ZAP User-Id), so that a key
        # revoked later has its subscription shut (kvstore.node_conns).
        self._on_subscriber = on_subscriber
        self._counters = counters
        self._warning = ThrottledWarning(log)
        # Topics subscribed minus unsubscribed (ZeroMQ reports each one in XPUB_MANUAL mode, and
        # unsubscribes a subscriber's topics when it leaves): > 0 while anyone listens.
        self.subscriptions = 0

    def drain_subscriptions(self) -> None:
        """Read the subscription messages; each subscriber is subscribed to everything."""
        sock = self._sock
        while True:
            try:
                frame = sock.recv(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            message = frame.bytes
            if message[:1] == b"\x01":
                if self._on_subscriber is not None:
                    self._on_subscriber(*_sender(frame))
                self.subscriptions += 1
                # Applies to the subscriber whose message was just read (XPUB_MANUAL).
                sock.setsockopt(zmq.SUBSCRIBE, b"")
            elif message[:1] == b"\x00":
                self.subscriptions = max(0, self.subscriptions - 1)

    def send(self, frame: bytes) -> None:
        sock = self._sock
        try:
            sock.send(frame, zmq.NOBLOCK)
        except zmq.Again:
            # Some subscriber's queue is full: deliver to the others, drop for it.
            self._send_lossy(frame, 1)
            self._queue_full()
        padding = padding_frames(len(frame))
        for sent in range(padding):
            try:
                sock.send(wire.PUBLICATION_PADDING, zmq.NOBLOCK)
            except zmq.Again:
                # A queue filled up with this frame's padding: the next publications are
                # dropped for it (ZeroMQ then skips it, without an error, until it reads).
                self._send_lossy(wire.PUBLICATION_PADDING, padding - sent)
                self._queue_full()
                return

    def _send_lossy(self, frame: bytes, times: int) -> None:
        sock = self._sock
        sock.setsockopt(zmq.XPUB_NODROP, 0)
        try:
            for _ in range(times):
                sock.send(frame, zmq.NOBLOCK)
        finally:
            sock.setsockopt(zmq.XPUB_NODROP, 1)

    def _queue_full(self) -> None:
        """Count and log a full queue: ZeroMQ stops offering publications to that subscriber
        (they are dropped for it without an error) until it has read part of its queue, so this
        counts the times a queue filled up, not each publication dropped."""
        counters = self._counters
        counters[stats.SUBSCRIBERS_DROPPED_PUBLICATIONS] += 1
        counters[stats.SEND_FAILURES] += 1
        counters[stats.SEND_FAILURE_PUB] += 1
        self._warning.warn(
            "a subscriber is not reading: its queue is full (subscriber_queue_bytes),"
            " publications to it are dropped"
        )

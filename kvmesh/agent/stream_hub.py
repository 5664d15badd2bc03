"""`GET /stream`: the node's publication stream fanned out to HTTP clients (Server-Sent Events).

One ZeroMQ subscription per agent, not one per client: the hub subscribes to the local node's
publications when the first client comes (and keeps the subscription while the agent runs), and
hands each publication to every client whose prefix it touches. What goes on the wire, the
snapshot/live merge and the per-client bound are decided in `kvmesh.agent.sse`; this module
owns the sockets and the tasks (all on the REST server's asyncio loop).

Bounds: at most `max_streams` clients at once (one more is answered 503, counted
`streams_refused`); each client's unread events at most `buffer_bytes` (a client that does not
read gets a final `dropped` event and is disconnected, counted `streams_dropped`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

from kvmesh.agent.http_wire import HttpError, render_stream_head
from kvmesh.agent.sse import (
    DEFAULT_BUFFER_BYTES,
    HEARTBEAT,
    HEARTBEAT_S,
    ClientBuffer,
    SnapshotMerge,
    encode_event,
    publication_events,
    stream_headers,
)
from kvstore import AsyncKvStoreClient, AsyncSubscription, KvStoreError, Publication

log = logging.getLogger("kvmesh.agent.http")

DEFAULT_MAX_STREAMS = 32
SUBSCRIBE_WAIT_S = 2.0  # longest a first client waits for the hub's subscription to be live
DROP_GRACE_S = 1.0  # how long a dropped client's last event may take to leave


Sink = Callable[[list[tuple[str, dict[str, Any]]]], None]


@dataclass(eq=False)
class _Client:
    prefix: str
    merge: SnapshotMerge | None
    buffer: ClientBuffer
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    sink: Sink | None = None  # an in-process follower (`StreamHub.follow`): events, not bytes

    def deliver(self, publication: Publication) -> None:
        events = list(publication_events(publication, self.prefix))
        if self.merge is not None:
            events = self.merge.live(events)
        if self.sink is not None:
            if events:
                self.sink(events)
            return
        for event in events:
            if not self.buffer.offer(encode_event(*event)):
                break
        if self.buffer:
            self.wake.set()


class StreamHub:
    """Serves `/stream` clients from one subscription to the node at `kv_url`."""

    def __init__(self, kv_url: str, max_streams: int = DEFAULT_MAX_STREAMS,
                 buffer_bytes: int = DEFAULT_BUFFER_BYTES,
                 count: Callable[[str], None] = lambda what: None,
                 heartbeat_s: float = HEARTBEAT_S) -> None:
        self.kv_url = kv_url
        self.max_streams = max_streams
        self.buffer_bytes = buffer_bytes
        self.heartbeat_s = heartbeat_s
        self._count = count
        self._clients: set[_Client] = set()
        self._kv: AsyncKvStoreClient | None = None
        self._sub: AsyncSubscription | None = None
        self._follow: asyncio.Task[None] | None = None
        self._starting: asyncio.Lock | None = None

    @property
    def open_streams(self) -> int:
        return sum(client.sink is None for client in self._clients)

    async def serve(self, prefix: str, snapshot: bool, reader: asyncio.StreamReader,
                    writer: asyncio.StreamWriter) -> None:
        """One client, until it goes away, is dropped, or the server closes."""
        if self.open_streams >= self.max_streams:
            self._count("streams_refused")
            raise HttpError(HTTPStatus.SERVICE_UNAVAILABLE,
                            f"too many streams open (at most {self.max_streams}: "
                            f"--http-max-streams)")
        kv = await self._subscribed()
        client = _Client(prefix, SnapshotMerge() if snapshot else None,
                         ClientBuffer(self.buffer_bytes))
        self._clients.add(client)  # before the dump: nothing published meanwhile is lost
        self._count("streams_opened")
        gone = asyncio.ensure_future(_until_closed(reader))
        try:
            writer.write(render_stream_head(stream_headers()))
            if client.merge is not None:
                for event in client.merge.snapshot(await kv.dump(prefix)):
                    client.buffer.offer(encode_event(*event))
            await self._pump(client, writer, gone)
        finally:
            self._clients.discard(client)
            gone.cancel()

    async def follow(self, prefix: str, sink: Sink) -> None:
        """An in-process follower of the publications under `prefix` (the console's status
        index): the snapshot (from a worker thread), `synced`, then the changes (on this
        loop), in order, as events to `sink` (thread-safe). Not counted as a stream; a lost
        subscription ends with a `dropped` event."""
        kv = await self._subscribed()
        merge = SnapshotMerge()
        client = _Client(prefix, merge, ClientBuffer(self.buffer_bytes), sink=sink)
        self._clients.add(client)
        try:
            dump = await kv.dump(prefix)
            # Off the loop: turning 100 000 key-values into events takes seconds, and the
            # loop serves every other request and stream meanwhile.
            await asyncio.get_running_loop().run_in_executor(
                None, merge.snapshot_into, dump, sink)
        except Exception:
            self._clients.discard(client)
            sink([("dropped", {"reason": "the snapshot failed"})])
            raise

    async def _pump(self, client: _Client, writer: asyncio.StreamWriter,
                    gone: asyncio.Future[None]) -> None:
        last_sent = time.monotonic()
        while not gone.done():
            if not client.buffer:
                client.wake.clear()
                wait = max(0.0, last_sent + self.heartbeat_s - time.monotonic())
                await _first_of(gone, wake=client.wake, timeout=wait)
                if gone.done():
                    return
                if not client.buffer:
                    client.buffer.offer(HEARTBEAT)
            overflowed = client.buffer.overflowed
            writer.write(client.buffer.take())
            last_sent = time.monotonic()
            if overflowed:
                self._count("streams_dropped")
                log.warning("REST /stream client %s dropped: it did not read (over %d bytes)",
                            writer.get_extra_info("peername"), self.buffer_bytes)
                with contextlib.suppress(TimeoutError, OSError):
                    async with asyncio.timeout(DROP_GRACE_S):
                        await writer.drain()
                writer.transport.abort()
                return
            drain = asyncio.ensure_future(writer.drain())
            while not drain.done():
                # A client that does not read blocks the drain: meanwhile its buffer fills, and
                # once it overflows the client is dropped instead of waited for.
                client.wake.clear()
                await _first_of(drain, gone, wake=client.wake)
                if gone.done() or client.buffer.overflowed:
                    break
            if drain.done():
                drain.result()  # a broken connection raises here
            else:
                drain.cancel()

    async def _subscribed(self) -> AsyncKvStoreClient:
        """The hub's client, its subscription live (the first client waits for it)."""
        if self._starting is None:
            self._starting = asyncio.Lock()
        async with self._starting:
            if self._kv is None or self._follow is None or self._follow.done():
                await self._start()
            assert self._kv is not None
            return self._kv

    async def _start(self) -> None:
        await self._close_subscription()
        kv = AsyncKvStoreClient(self.kv_url)
        try:
            before = (await kv.counters()).get("kvstore.subscriptions", 0)
            sub = await kv.subscribe()
            # ZeroMQ's slow joiner: publications sent before the node has our subscription are
            # lost. The node counts its subscriptions: once it counts one more, ours is there.
            deadline = time.monotonic() + SUBSCRIBE_WAIT_S
            while time.monotonic() < deadline:
                if (await kv.counters()).get("kvstore.subscriptions", 0) > before:
                    break
                await asyncio.sleep(0.01)
        except KvStoreError as exc:
            await kv.close()
            raise HttpError(HTTPStatus.SERVICE_UNAVAILABLE,
                            f"the node's KvStore is not reachable: {exc}") from None
        self._kv, self._sub = kv, sub
        self._follow = asyncio.ensure_future(self._fan_out(sub))

    async def _fan_out(self, sub: AsyncSubscription) -> None:
        try:
            while True:
                publication = await sub.recv()
                for client in list(self._clients):
                    client.deliver(publication)
        except Exception:
            # The clients would wait for publications that never come: end their streams
            # (they reconnect; the next one starts a new subscription).
            log.exception("following the node's publications failed")
            for client in list(self._clients):
                reason = "the agent lost the node's publication stream: reconnect"
                if client.sink is not None:
                    self._clients.discard(client)
                    client.sink([("dropped", {"reason": reason})])
                client.buffer.drop(reason)
                client.wake.set()

    async def _close_subscription(self) -> None:
        if self._follow is not None:
            self._follow.cancel()
        if self._sub is not None:
            self._sub.close()
        if self._kv is not None:
            await self._kv.close()
        self._kv = self._sub = self._follow = None

    async def close(self) -> None:
        await self._close_subscription()


async def _first_of(*futures: asyncio.Future[Any], wake: asyncio.Event,
                    timeout: float | None = None) -> None:
    """Until one of `futures` is done, `wake` is set, or `timeout` passes."""
    woken = asyncio.ensure_future(wake.wait())
    try:
        waiting: list[asyncio.Future[Any]] = [*futures, woken]
        await asyncio.wait(waiting, timeout=timeout,
                           return_when=asyncio.FIRST_COMPLETED)
    finally:
        woken.cancel()


async def _until_closed(reader: asyncio.StreamReader) -> None:
    """Returns when the client closes its side (an SSE client sends nothing after its
    request: anything it does send is read and dropped)."""
    with contextlib.suppress(OSError):
        while await reader.read(4096):
            pass

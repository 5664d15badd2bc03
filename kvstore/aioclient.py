"""asyncio KvStore client, and `KeyManager`: keys a client keeps alive and defends.

`AsyncKvStoreClient` multiplexes any number of concurrent requests over one DEALER (matched by a
correlation-id frame); each request has a timeout. `subscribe()` follows the publication stream.

`KeyManager` implements the Open/R KvStoreClient semantics on top of it:
- `persist_key`: the key is authoritative here. It is advertised, its TTL (if finite) is refreshed
  every ~ttl/4 by bumping ttl_version, and when the stream shows someone else's value winning
  (higher version, or same version with a higher originator or different bytes) it is re-advertised
  with a higher version (with exponential backoff if the fight goes on). A persisted key that
  expires or disappears is re-advertised.
- `set_key`: one-shot set (version 0 means current + 1); a finite TTL is refreshed until someone
  overrides the key.
- `unset_key`: stop managing a key (it stays in the store, expiring if its TTL is finite).
- `clear_key`: stop managing and overwrite with a tombstone value (default b"") at version + 1.
- `subscribe_key`: callback(key, value) on every value change of a key, callback(key, None) when
  it expires.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import AsyncIterator, Callable, Collection, Coroutine, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, cast

import zmq
import zmq.asyncio

from kvstore import requests, wire
from kvstore.client import (
    DEFAULT_TIMEOUT_S,
    FROM_ENV,
    CurveSpec,
    KvStoreAuthError,
    KvStoreError,
    KvStoreTimeout,
    check_response,
    connect_socket,
    filter_publication,
    handshake_monitor,
    resolve_curve,
)
from kvstore.curve import (
    HANDSHAKE_EVENTS,
    ClientCurve,
    handshake_failure,
)
from kvstore.gen.kvstore_thrift.constants import TTL_INFINITY
from kvstore.gen.kvstore_thrift.ttypes import (
    NodeInfo,
    PeerSpec,
    Publication,
    Request,
    Response,
    Value,
)

log = logging.getLogger("kvstore.aioclient")

KeyCallback = Callable[[str, Value | None], None]


class AsyncKvStoreClient:
    def __init__(
        self,
        url: str,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        context: zmq.asyncio.Context | None = None,
        curve: CurveSpec = FROM_ENV,
    ) -> None:
        self.url = url
        self.timeout_s = timeout_s
        self._context = context or zmq.asyncio.Context.instance()
        self.curve = resolve_curve(curve)
        self._sock: zmq.asyncio.Socket | None = None
        self._reader: asyncio.Task[None] | None = None
        self._monitor_task: asyncio.Task[None] | None = None
        self._monitor: zmq.asyncio.Socket | None = None
        self._waiting: dict[bytes, asyncio.Future[Response]] = {}
        # The node refused this socket's handshake: the socket is dead (libzmq does not
        # reconnect it), so the next request raises this and starts over on a new socket.
        self._refusal: KvStoreAuthError | None = None
        self._ids = itertools.count(1)
        self._node_info: NodeInfo | None = None

    def _socket(self) -> zmq.asyncio.Socket:
        if self._sock is None:
            monitors: list[zmq.asyncio.Socket] = []
            sock = _connect(self._context, zmq.DEALER, self.url, self.curve,
                            lambda s: monitors.append(handshake_monitor(s)))
            self._sock, self._monitor = sock, monitors[0]
            loop = asyncio.get_running_loop()
            self._reader = loop.create_task(self._read_replies(sock))
            self._monitor_task = loop.create_task(self._watch_handshake(sock, monitors[0]))
        return self._sock

    async def _watch_handshake(
        self, sock: zmq.asyncio.Socket, monitor: zmq.asyncio.Socket
    ) -> None:
        """Fail every waiting request at once when the node refuses our handshake (the monitor
        is made before the socket connects, so it sees the first handshake too)."""
        try:
            while True:
                frames = await monitor.recv_multipart()
                event = int.from_bytes(frames[0][:2], "little")
                if event & HANDSHAKE_EVENTS:
                    error = KvStoreAuthError(handshake_failure(self.url, self.curve, event))
                    self._refusal = error
                    for future in self._waiting.values():
                        if not future.done():
                            future.set_exception(error)
                    self._waiting.clear()
        finally:
            with contextlib.suppress(zmq.ZMQError):
                sock.disable_monitor()
            monitor.close(linger=0)

    async def _read_replies(self, sock: zmq.asyncio.Socket) -> None:
        while True:
            frames = await sock.recv_multipart()
            if len(frames) != 3:
                continue
            future = self._waiting.pop(frames[0], None)
            if future is None or future.done():
                continue  # late reply to a request that timed out
            try:
                future.set_result(wire.decode_response(frames[2]))
            except wire.DecodeError as exc:
                future.set_exception(KvStoreError(f"undecodable reply from {self.url}: {exc}"))

    def _reset(self) -> None:
        """Drop the socket (and with it any request queued for an unreachable node)."""
        for task in (self._reader, self._monitor_task):
            if task is not None:
                task.cancel()
        self._reader = self._monitor_task = None
        self._refusal = None
        if self._sock is not None:
            # The monitor now, not when its cancelled task next runs: a client closed and made
            # again in one step of the loop would otherwise hold two.
            with contextlib.suppress(zmq.ZMQError):
                self._sock.disable_monitor()
            if self._monitor is not None:
                self._monitor.close(linger=0)
            self._sock.close(linger=0)
            self._sock = self._monitor = None
        waiting, self._waiting = self._waiting, {}
        for future in waiting.values():
            if not future.done():
                future.set_exception(KvStoreError(f"connection to {self.url} reset"))

    async def close(self) -> None:
        self._reset()

    async def __aenter__(self) -> AsyncKvStoreClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def request(self, request: Request, timeout_s: float | None = None) -> Response:
        if self._refusal is not None:
            refusal = self._refusal
            self._reset()
            raise refusal
        sock = self._socket()
        corr = next(self._ids).to_bytes(8, "big")
        future: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
        self._waiting[corr] = future
        limit = self.timeout_s if timeout_s is None else timeout_s

        async def exchange() -> Response:
            # The send may wait for a connection that never comes (the node refused the
            # handshake: a DEALER then has nowhere to queue), while the monitor fails the
            # reply's future with the refusal: whichever ends first ends the wait.
            sending = asyncio.ensure_future(sock.send_multipart([corr, b"", wire.encode(request)]))
            try:
                await asyncio.wait((sending, future), return_when=asyncio.FIRST_COMPLETED)
                if not future.done():
                    sending.result()  # the send's own error, if it failed
                return await future
            finally:
                sending.cancel()

        try:
            response = await asyncio.wait_for(exchange(), limit)
        except TimeoutError:
            self._waiting.pop(corr, None)
            self._reset()
            raise KvStoreTimeout(
                f"no reply from {self.url} within {limit:g}s (is the node running?)"
            ) from None
        return check_response(response)

    async def node_info(self, refresh: bool = False) -> NodeInfo:
        if self._node_info is None or refresh:
            response = await self.request(requests.node_info())
            if response.node_info is None:
                raise KvStoreError(f"{self.url} did not return its node info")
            self._node_info = response.node_info
        return self._node_info

    async def get(self, keys: Iterable[str]) -> dict[str, Value]:
        return requests.key_vals_of(await self.request(requests.key_get(keys)))

    async def set(self, key_vals: Mapping[str, Value]) -> dict[str, str]:
        response = await self.request(requests.key_set(key_vals, solicit_response=True))
        return dict(response.no_merge_reasons or {})

    async def dump(
        self, prefix: str = "", originator_ids: Collection[str] = ()
    ) -> dict[str, Value]:
        return requests.key_vals_of(await self.request(requests.key_dump(prefix, originator_ids)))

    async def hash_dump(
        self, prefix: str = "", originator_ids: Collection[str] = ()
    ) -> dict[str, Value]:
        return requests.key_vals_of(
            await self.request(requests.key_dump(prefix, originator_ids, hashes_only=True)))

    async def peers(self) -> dict[str, PeerSpec]:
        return dict((await self.request(requests.peer_dump())).peers or {})

    async def add_peers(self, peers: Mapping[str, PeerSpec]) -> None:
        await self.request(requests.peer_add(peers))

    async def del_peers(self, names: Iterable[str]) -> None:
        await self.request(requests.peer_del(names))

    async def counters(self) -> dict[str, int]:
        return dict((await self.request(requests.counters())).counters or {})

    async def subscribe(self, prefix: str = "", pub_url: str | None = None) -> AsyncSubscription:
        url = pub_url or (await self.node_info()).pub_url
        return AsyncSubscription(url, prefix=prefix, context=self._context, curve=self.curve)


class AsyncSubscription:
    """Async iterator over a node's publications (filtered by key prefix)."""

    def __init__(
        self,
        pub_url: str,
        prefix: str = "",
        context: zmq.asyncio.Context | None = None,
        curve: CurveSpec = FROM_ENV,
    ) -> None:
        self.pub_url = pub_url
        self.prefix = prefix
        self.malformed = 0
        self._sock = _connect(
            context or zmq.asyncio.Context.instance(), zmq.SUB, pub_url, resolve_curve(curve)
        )
        self._sock.setsockopt(zmq.SUBSCRIBE, b"")

    async def recv(self) -> Publication:
        while True:
            data = await self._sock.recv()
            if data == wire.PUBLICATION_PADDING:  # carries nothing (kvstore/publisher.py)
                continue
            try:
                publication = wire.decode_publication(data)
            except wire.DecodeError:
                self.malformed += 1
                continue
            filtered = filter_publication(publication, self.prefix)
            if filtered is not None:
                return filtered

    def __aiter__(self) -> AsyncIterator[Publication]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[Publication]:
        while True:
            yield await self.recv()

    def close(self) -> None:
        self._sock.close(linger=0)


def _connect(
    context: zmq.asyncio.Context,
    kind: int,
    url: str,
    curve: ClientCurve | None,
    before_connect: Callable[[zmq.asyncio.Socket], None] | None = None,
) -> zmq.asyncio.Socket:
    """`kvstore.client.connect_socket` on an asyncio context (it returns asyncio sockets)."""
    return cast(zmq.asyncio.Socket,
                connect_socket(context, kind, url, curve, before_connect))  # type: ignore[arg-type]


# ---------------------------------------------------------------------- managed keys


@dataclass
class _Managed:
    value: Value  # what we advertise (value bytes always present)
    persist: bool  # defend against overrides (persist_key) or not (set_key)
    refresh: asyncio.TimerHandle | None = None
    readvertise: asyncio.TimerHandle | None = None
    backoff_s: float = 0.0


class KeyManager:
    """Keys this client originates: persisted, refreshed, defended. See the module docstring."""

    MIN_BACKOFF_S = 0.064
    MAX_BACKOFF_S = 8.192

    def __init__(
        self,
        client: AsyncKvStoreClient,
        originator_id: str | None = None,
        *,
        check_interval_s: float = 60.0,
    ) -> None:
        self.client = client
        self.originator_id = originator_id or ""
        self.check_interval_s = check_interval_s
        self._managed: dict[str, _Managed] = {}
        self._callbacks: dict[str, list[KeyCallback]] = {}
        self._stream: AsyncSubscription | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self.counters: dict[str, int] = {
            "advertised": 0,
            "refreshes": 0,
            "overrides_defended": 0,
            "errors": 0,
        }

    async def start(self) -> None:
        """Learn the node's name (default originator) and follow its publication stream."""
        info = await self.client.node_info()
        if not self.originator_id:
            self.originator_id = info.name
        self._stream = await self.client.subscribe(pub_url=info.pub_url)
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self._follow(self._stream)))
        if self.check_interval_s > 0:
            self._tasks.append(loop.create_task(self._check_periodically()))

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
        for key in list(self._managed):
            self.unset_key(key)
        if self._stream is not None:
            self._stream.close()
            self._stream = None

    async def __aenter__(self) -> KeyManager:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- public API -----------------------------------------------------------------------------

    async def persist_key(self, key: str, value: bytes, ttl_ms: int = TTL_INFINITY) -> Value:
        managed = self._managed.get(key)
        current = managed.value if managed else (await self.client.get([key])).get(key)
        if current is None:
            new = Value(1, self.originator_id, value, ttl_ms, 0)
        elif current.originator_id != self.originator_id or current.value != value:
            new = Value(current.version + 1, self.originator_id, value, ttl_ms, 0)
        else:
            # Already ours with these bytes: keep the version, take the (possibly new) TTL and
            # bump ttl_version so the TTL change propagates.
            new = Value(current.version, self.originator_id, value, ttl_ms, current.ttl_version + 1)
        self._manage(key, new, persist=True)
        await self._advertise(key)
        return new

    async def set_key(
        self, key: str, value: bytes, version: int = 0, ttl_ms: int = TTL_INFINITY
    ) -> Value:
        if version == 0:
            current = (await self.client.get([key])).get(key)
            version = 1 if current is None else current.version + 1
        new = Value(version, self.originator_id, value, ttl_ms, 0)
        self._manage(key, new, persist=False)
        await self._advertise(key)
        return new

    def unset_key(self, key: str) -> None:
        managed = self._managed.pop(key, None)
        if managed is not None:
            for handle in (managed.refresh, managed.readvertise):
                if handle is not None:
                    handle.cancel()

    async def clear_key(
        self, key: str, value: bytes = b"", ttl_ms: int = TTL_INFINITY
    ) -> Value | None:
        self.unset_key(key)
        current = (await self.client.get([key])).get(key)
        if current is None:
            return None
        tombstone = Value(current.version + 1, self.originator_id, value, ttl_ms, 0)
        await self._send({key: tombstone})
        return tombstone

    async def subscribe_key(
        self, key: str, callback: KeyCallback, fetch_init_value: bool = False
    ) -> Value | None:
        self._callbacks.setdefault(key, []).append(callback)
        if fetch_init_value:
            return (await self.client.get([key])).get(key)
        return None

    def unsubscribe_key(self, key: str) -> None:
        self._callbacks.pop(key, None)

    def managed_value(self, key: str) -> Value | None:
        managed = self._managed.get(key)
        return managed.value if managed else None

    # -- internals ------------------------------------------------------------------------------

    def _manage(self, key: str, value: Value, *, persist: bool) -> None:
        managed = self._managed.get(key)
        if managed is None:
            self._managed[key] = _Managed(value=value, persist=persist)
        else:
            managed.value = value
            managed.persist = persist
        self._schedule_refresh(key)

    async def _send(self, key_vals: dict[str, Value]) -> None:
        try:
            await self.client.set(key_vals)
        except KvStoreError as exc:
            # The node may be restarting: refreshes, the periodic check and the stream retry.
            self.counters["errors"] += 1
            log.warning("advertising %s failed: %s", sorted(key_vals), exc)

    async def _advertise(self, key: str) -> None:
        managed = self._managed.get(key)
        if managed is None:
            return
        self.counters["advertised"] += 1
        await self._send({key: _copy(managed.value)})

    def _schedule_refresh(self, key: str) -> None:
        managed = self._managed[key]
        if managed.refresh is not None:
            managed.refresh.cancel()
            managed.refresh = None
        ttl = managed.value.ttl_ms
        if ttl == TTL_INFINITY:
            return
        # ~ttl/4: three refreshes can be lost before the key expires.
        delay = max(0.001, ttl / 4000)
        loop = asyncio.get_running_loop()
        managed.refresh = loop.call_later(delay, lambda: self._spawn(self._refresh(key)))

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.append(task)
        task.add_done_callback(self._forget_task)

    def _forget_task(self, task: asyncio.Task[None]) -> None:
        with contextlib.suppress(ValueError):
            self._tasks.remove(task)

    async def _refresh(self, key: str) -> None:
        managed = self._managed.get(key)
        if managed is None:
            return
        value = managed.value
        value.ttl_version += 1
        update = Value(value.version, value.originator_id, None, value.ttl_ms, value.ttl_version)
        self.counters["refreshes"] += 1
        await self._send({key: update})
        if key in self._managed:
            self._schedule_refresh(key)

    async def _follow(self, stream: AsyncSubscription) -> None:
        async for publication in stream:
            for key, received in (publication.key_vals or {}).items():
                self._on_update(key, received)
            for key in publication.expired_keys or ():
                self._on_expired(key)

    def _on_update(self, key: str, received: Value) -> None:
        managed = self._managed.get(key)
        if managed is not None:
            self._defend(key, managed, received)
        if received.value is not None:
            for callback in self._callbacks.get(key, ()):
                _call(callback, key, received)

    def _defend(self, key: str, managed: _Managed, received: Value) -> None:
        mine = managed.value
        if received.version < mine.version:
            return
        if received.value is None:
            # A TTL refresh of our own value that got ahead of us: adopt its ttl_version.
            if (
                received.version == mine.version
                and received.originator_id == mine.originator_id
                and received.ttl_version > mine.ttl_version
            ):
                mine.ttl_version = received.ttl_version
            return
        same = (
            received.version == mine.version
            and received.originator_id == mine.originator_id
            and received.value == mine.value
        )
        if same:
            if received.ttl_version > mine.ttl_version:
                mine.ttl_version = received.ttl_version
            return
        if not managed.persist:
            # set_key: someone else's value won; stop refreshing ours.
            self.unset_key(key)
            return
        # persist_key: someone overrode us (or an old incarnation of ours came back).
        mine.version = received.version + 1
        mine.originator_id = self.originator_id
        mine.ttl_version = 0
        self.counters["overrides_defended"] += 1
        self._readvertise_later(key, managed)

    def _readvertise_later(self, key: str, managed: _Managed) -> None:
        if managed.readvertise is not None:
            return  # one is already scheduled, with the latest version
        delay = managed.backoff_s
        managed.backoff_s = min(
            self.MAX_BACKOFF_S, max(self.MIN_BACKOFF_S, managed.backoff_s * 2)
        )

        def fire() -> None:
            managed.readvertise = None
            self._spawn(self._advertise(key))

        managed.readvertise = asyncio.get_running_loop().call_later(delay, fire)

    def _on_expired(self, key: str) -> None:
        for callback in self._callbacks.get(key, ()):
            _call(callback, key, None)
        managed = self._managed.get(key)
        if managed is not None and managed.persist:
            self._spawn(self._advertise(key))

    async def _check_periodically(self) -> None:
        """Re-advertise persisted keys the store lost (e.g. the node restarted empty)."""
        while True:
            await asyncio.sleep(self.check_interval_s)
            persisted = {k: m for k, m in self._managed.items() if m.persist}
            if not persisted:
                continue
            try:
                stored = await self.client.get(persisted)
            except KvStoreError as exc:
                self.counters["errors"] += 1
                log.warning("persisted-key check failed: %s", exc)
                continue
            for key, managed in persisted.items():
                current = stored.get(key)
                if current is None:
                    await self._advertise(key)
                else:
                    self._defend(key, managed, current)
            # A quiet round: the next fight starts from a short backoff again.
            for managed in persisted.values():
                if managed.readvertise is None:
                    managed.backoff_s = 0.0


def _copy(value: Value) -> Value:
    return Value(value.version, value.originator_id, value.value, value.ttl_ms, value.ttl_version)


def _call(callback: KeyCallback, key: str, value: Value | None) -> None:
    try:
        callback(key, value)
    except Exception:  # a subscriber's bug must not stop the stream
        log.exception("key callback for %s failed", key)

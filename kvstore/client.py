"""Synchronous KvStore client: one DEALER to a node's command socket, one SUB per subscription.

Every call has a deadline (`timeout_s`); nothing blocks forever. Requests carry a correlation id
frame so a late reply to an earlier, timed-out request is recognised and discarded instead of being
taken for the answer to the current one. After a timeout the socket is rebuilt with linger 0, so a
request queued for an unreachable node is not delivered later.

For keys that must stay alive (TTL refresh, override defence) use the asyncio client
(`kvstore.aioclient`), which has a running loop to keep them.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from types import TracebackType
from typing import Any, Literal, TypeVar

import zmq

from kvstore import requests, wire
from kvstore.curve import (
    HANDSHAKE_EVENTS,
    ClientCurve,
    CurveError,
    apply_client,
    client_curve,
    handshake_failure,
    read_handshake_failures,
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
from kvstore.value import I64_MAX

# A request's deadline unless the caller gives one (the CLI takes it from KVMESH_TIMEOUT).
DEFAULT_TIMEOUT_S = 5.0


class KvStoreError(Exception):
    """Base class of every client error; the message is one readable line."""


class KvStoreTimeout(KvStoreError):
    pass


class KvStoreAuthError(KvStoreError):
    """No usable key, or the node refused ours at the CurveZMQ handshake."""


# `curve=FROM_ENV`: the keys named by KVMESH_KEY_FILE / KVMESH_SERVER_KEY (plaintext if neither).
FROM_ENV: Literal["env"] = "env"
CurveSpec = ClientCurve | None | Literal["env"]


def resolve_curve(curve: CurveSpec) -> ClientCurve | None:
    if curve != FROM_ENV:
        return curve
    try:
        return client_curve()
    except CurveError as exc:
        raise KvStoreAuthError(str(exc)) from exc
class KvStoreVersionExhausted(KvStoreError):
    """The key is at the highest version (2**63 - 1): no later version exists. Such a key is
    still replaced by a record of the same version from a higher originator id (or with greater
    value bytes from the same one), and its TTL can still be refreshed; but it cannot be
    overwritten or deleted by a version bump (a wrap to a negative version would be refused)."""


def next_version(key: str, current: Value | None) -> int:
    """The version superseding `current` (1 for a new key); KvStoreVersionExhausted at the top."""
    if current is None:
        return 1
    if current.version >= I64_MAX:
        raise KvStoreVersionExhausted(
            f"{key}: at the highest version ({I64_MAX}); no later version can replace it"
            " (only a higher originator id at that version can)"
        )
    return int(current.version) + 1


class KvStoreRequestError(KvStoreError):
    """The node answered with Response.error."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


def check_response(response: Response) -> Response:
    if response.error is not None:
        raise KvStoreRequestError(response.error.code or "", response.error.message or "")
    return response


Context = zmq.Context[zmq.Socket[bytes]]


def connect_socket(
    context: Context,
    kind: int,
    url: str,
    curve: ClientCurve | None = None,
    before_connect: Callable[[zmq.Socket[bytes]], None] | None = None,
) -> zmq.Socket[bytes]:
    """A connected socket; `before_connect` runs first (a monitor set up there sees every event
    of the connection, the first handshake included)."""
    sock = context.socket(kind)
    sock.setsockopt(zmq.LINGER, 0)
    if curve is not None:
        apply_client(sock, curve.key_pair, curve.server_key)
    if before_connect is not None:
        before_connect(sock)
    try:
        sock.connect(url)
    except zmq.ZMQError as exc:
        sock.close()
        raise KvStoreError(f"bad URL {url!r}: {exc}") from exc
    return sock


def make_value(
    value: bytes | None,
    *,
    version: int,
    originator_id: str,
    ttl_ms: int = TTL_INFINITY,
    ttl_version: int = 0,
) -> Value:
    return Value(
        version=version,
        originator_id=originator_id,
        value=value,
        ttl_ms=ttl_ms,
        ttl_version=ttl_version,
    )


class KvStoreClient:
    """Request/reply access to one node. Not thread-safe: one client per thread."""

    def __init__(
        self,
        url: str,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        context: Context | None = None,
        curve: CurveSpec = FROM_ENV,
    ) -> None:
        self.url = url
        self.timeout_s = timeout_s
        self._context = context or zmq.Context.instance()
        self.curve = resolve_curve(curve)
        self._ids = itertools.count(1)
        self._sock: zmq.Socket[bytes] | None = None
        self._watch: HandshakeWatch | None = None
        self._node_info: NodeInfo | None = None

    # -- plumbing -------------------------------------------------------------------------------

    def _socket(self) -> zmq.Socket[bytes]:
        if self._sock is None:
            self._sock = connect_socket(self._context, zmq.DEALER, self.url, self.curve,
                                        self._start_watch)
        return self._sock

    def _start_watch(self, sock: zmq.Socket[bytes]) -> None:
        self._watch = HandshakeWatch(sock, self.url, self.curve)

    def close(self) -> None:
        if self._watch is not None:
            self._watch.close()
            self._watch = None
        if self._sock is not None:
            self._sock.close(linger=0)
            self._sock = None

    def __enter__(self) -> KvStoreClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def request(self, request: Request, timeout_s: float | None = None) -> Response:
        """Send one request and wait for its reply (Response.error raises KvStoreRequestError)."""
        return check_response(self.request_raw(wire.encode(request), timeout_s))

    def request_raw(self, payload: bytes, timeout_s: float | None = None) -> Response:
        """Send an already encoded request; return the decoded Response (errors not raised)."""
        sock = self._socket()
        watch = self._watch
        assert watch is not None
        corr = next(self._ids).to_bytes(8, "big")
        limit_s = self.timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + limit_s
        self._send([corr, b"", payload], limit_s)
        while True:
            remaining_ms = int((deadline - time.monotonic()) * 1000)
            with self._closed_if_refused():
                answered = remaining_ms > 0 and watch.poll(remaining_ms)
            if not answered:
                self.close()
                raise KvStoreTimeout(
                    f"no reply from {self.url} within {limit_s:g}s (is the node running?"
                    + (" if it is secured, is KVMESH_SERVER_KEY its public key?)"
                       if self.curve else ")")
                )
            frames = sock.recv_multipart()
            if len(frames) == 3 and frames[0] == corr:
                try:
                    return wire.decode_response(frames[2])
                except wire.DecodeError as exc:
                    raise KvStoreError(f"undecodable reply from {self.url}: {exc}") from exc
            # A late reply to an earlier request that timed out: not ours, skip it.

    def send_oneway(self, key_vals: Mapping[str, Value]) -> None:
        """KEY_SET without a reply (as peers flood). Delivery is not confirmed."""
        request = requests.key_set(key_vals, solicit_response=False)
        self._send([b"", wire.encode(request)], self.timeout_s)

    def _send(self, frames: list[bytes], limit_s: float) -> None:
        """Queue `frames`, waiting at most `limit_s`. A DEALER queues while it has a connection
        to the node, even one still in its handshake, but a refused handshake takes the
        connection away and a blocking send then waited for ever (a CLI with an unauthorized
        key hung so): the refusal is raised as soon as it is known, else KvStoreTimeout."""
        sock = self._socket()
        watch = self._watch
        assert watch is not None
        with self._closed_if_refused():
            writable = watch.wait_writable(max(1, int(limit_s * 1000)))
        if writable:
            try:
                sock.send_multipart(frames, zmq.NOBLOCK)
                return
            except zmq.Again:
                pass  # the connection went between the poll and the send
        self.close()
        raise KvStoreTimeout(f"could not send to {self.url} within {limit_s:g}s (no "
                             "connection: is the node running?)")

    @contextlib.contextmanager
    def _closed_if_refused(self) -> Iterator[None]:
        """A refused socket is dead (libzmq does not reconnect it): closed, so that the next
        request starts on a new one."""
        try:
            yield
        except KvStoreAuthError:
            self.close()
            raise

    def check_handshake(self) -> None:
        """Raise KvStoreAuthError if the node has refused this client's handshake so far."""
        if self._watch is not None:
            self._watch.check()

    # -- commands -------------------------------------------------------------------------------

    def node_info(self, refresh: bool = False) -> NodeInfo:
        if self._node_info is None or refresh:
            response = self.request(requests.node_info())
            if response.node_info is None:
                raise KvStoreError(f"{self.url} did not return its node info")
            self._node_info = response.node_info
        return self._node_info

    def get(self, keys: Iterable[str]) -> dict[str, Value]:
        return requests.key_vals_of(self.request(requests.key_get(keys)))

    def set(self, key_vals: Mapping[str, Value]) -> dict[str, str]:
        """Solicited KEY_SET; returns the keys that were not applied, with the reason."""
        response = self.request(requests.key_set(key_vals, solicit_response=True))
        return dict(response.no_merge_reasons or {})

    def set_key(
        self,
        key: str,
        value: bytes,
        *,
        version: int = 0,
        ttl_ms: int = TTL_INFINITY,
        originator_id: str | None = None,
    ) -> tuple[Value, str | None]:
        """Set one key. version 0 means current + 1 (1 for a new key); the originator defaults to
        the node's name. Returns the value sent and the no-merge reason (None when applied)."""
        if version == 0:
            version = next_version(key, self.get([key]).get(key))
        originator = originator_id if originator_id is not None else self.node_info().name
        sent = make_value(value, version=version, originator_id=originator, ttl_ms=ttl_ms)
        reasons = self.set({key: sent})
        return sent, reasons.get(key)

    def dump(self, prefix: str = "", originator_ids: Collection[str] = ()) -> dict[str, Value]:
        return requests.key_vals_of(self.request(requests.key_dump(prefix, originator_ids)))

    def hash_dump(self, prefix: str = "", originator_ids: Collection[str] = ()) -> dict[str, Value]:
        return requests.key_vals_of(
            self.request(requests.key_dump(prefix, originator_ids, hashes_only=True)))

    def peers(self) -> dict[str, PeerSpec]:
        return dict(self.request(requests.peer_dump()).peers or {})

    def add_peers(self, peers: Mapping[str, PeerSpec]) -> None:
        self.request(requests.peer_add(peers))

    def add_peer(self, name: str, cmd_url: str, pub_url: str = "") -> None:
        self.add_peers({name: PeerSpec(cmd_url=cmd_url, pub_url=pub_url)})

    def del_peers(self, names: Iterable[str]) -> None:
        self.request(requests.peer_del(names))

    def counters(self) -> dict[str, int]:
        return dict(self.request(requests.counters()).counters or {})

    def digests(self, node_ids: Iterable[int]) -> dict[int, int]:
        response = self.request(requests.digest_get(node_ids))
        return dict(response.digest.digests or {}) if response.digest else {}

    def subscribe(self, prefix: str = "", pub_url: str | None = None) -> Subscription:
        """Follow the node's publication stream (discovering its PUB URL via NODE_INFO)."""
        return Subscription(
            pub_url or self.node_info().pub_url, prefix=prefix, context=self._context,
            curve=self.curve,
        )



def filter_publication(publication: Publication, prefix: str) -> Publication | None:
    """Keep only keys under `prefix`; None when nothing is left."""
    key_vals = publication.key_vals or {}
    expired = publication.expired_keys or []
    if prefix:
        key_vals = {k: v for k, v in key_vals.items() if k.startswith(prefix)}
        expired = [k for k in expired if k.startswith(prefix)]
    if not key_vals and not expired:
        return None
    return Publication(
        key_vals=key_vals,
        expired_keys=expired,
        node_ids=publication.node_ids or [],
        tobe_updated_keys=[],
        timestamp_ms=publication.timestamp_ms,
    )


class Subscription:
    """A SUB socket on a node's PUB URL, yielding Publications (filtered by key prefix).

    ZeroMQ subscriptions take a moment to reach the publisher: publications sent right after
    connecting can be missed (use `wait_connected` or take a dump after subscribing)."""

    def __init__(
        self,
        pub_url: str,
        prefix: str = "",
        context: Context | None = None,
        curve: CurveSpec = FROM_ENV,
    ) -> None:
        self.pub_url = pub_url
        self.prefix = prefix
        self.malformed = 0
        self.skipped = 0
        self._prefix_bytes = prefix.encode()
        resolved = resolve_curve(curve)
        watches: list[HandshakeWatch] = []
        self._sock = connect_socket(
            context or zmq.Context.instance(), zmq.SUB, pub_url, resolved,
            lambda sock: watches.append(HandshakeWatch(sock, pub_url, resolved)),
        )
        self._watch = watches[0]
        self._sock.setsockopt(zmq.SUBSCRIBE, b"")

    def recv(self, timeout_s: float | None = None) -> Publication | None:
        """The next matching publication, or None when `timeout_s` elapses (None: wait forever)."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            wait_ms = None
            if deadline is not None:
                # Round up: a truncated timeout returns just before the deadline, and a caller
                # waiting for a window to pass would then wait a whole second window.
                wait_ms = max(0, math.ceil((deadline - time.monotonic()) * 1000))
            if not self._watch.poll(wait_ms):
                return None
            data = self._sock.recv()
            padding = data == wire.PUBLICATION_PADDING  # carries nothing (kvstore/publisher.py)
            if padding or (self._prefix_bytes and self._prefix_bytes not in data):
                # Keys travel as plain UTF-8 in the encoding: a message without the prefix's
                # bytes holds no matching key, so skip it without decoding (a subscriber that
                # wants one prefix otherwise spends most of its CPU decoding other keys).
                if not padding:
                    self.skipped += 1
                if deadline is not None and time.monotonic() >= deadline:
                    return None
                continue
            try:
                publication = wire.decode_publication(data)
            except wire.DecodeError:
                self.malformed += 1
                continue
            filtered = filter_publication(publication, self.prefix)
            if filtered is not None:
                return filtered
            if deadline is not None and time.monotonic() >= deadline:
                return None

    def __iter__(self) -> Iterator[Publication]:
        while True:
            publication = self.recv()
            if publication is not None:
                yield publication

    def close(self) -> None:
        self._watch.close()
        self._sock.close(linger=0)

    def __enter__(self) -> Subscription:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


_monitor_serial = itertools.count(1)
MonitoredSocket = TypeVar("MonitoredSocket", bound="zmq.Socket[Any]")


def handshake_monitor(sock: MonitoredSocket) -> MonitoredSocket:
    """`sock`'s monitor of handshake failures, on an inproc endpoint named for it alone. pyzmq
    names the endpoint after the socket's file descriptor, which the next socket gets as soon as
    this one is closed, while libzmq unbinds the endpoint only later (in its reaper thread): a
    client made again at once failed with EADDRINUSE."""
    address = f"inproc://kvstore-handshake-monitor-{next(_monitor_serial)}"
    return sock.get_monitor_socket(HANDSHAKE_EVENTS, addr=address)


class HandshakeWatch:
    """A socket monitor that turns a refused CurveZMQ handshake into KvStoreAuthError at once,
    instead of the caller waiting out its timeout (the node sends nothing to a refused client)."""

    def __init__(self, sock: zmq.Socket[bytes], url: str, curve: ClientCurve | None) -> None:
        self.url = url
        self.curve = curve
        self._sock = sock
        self._monitor: zmq.Socket[bytes] = handshake_monitor(sock)
        self._poller = zmq.Poller()
        self._poller.register(sock, zmq.POLLIN)
        self._poller.register(self._monitor, zmq.POLLIN)
        self._send_poller = zmq.Poller()
        self._send_poller.register(sock, zmq.POLLOUT)
        self._send_poller.register(self._monitor, zmq.POLLIN)
        # A refusal is final for this socket (libzmq does not reconnect it): kept, and raised
        # again by every later check.
        self._refused: int | None = None

    def check(self) -> None:
        event = read_handshake_failures(self._monitor)
        if event is not None:
            self._refused = event
        if self._refused is not None:
            raise KvStoreAuthError(handshake_failure(self.url, self.curve, self._refused))

    def wait_writable(self, timeout_ms: int) -> bool:
        """True when the socket can queue a message within `timeout_ms`; raises
        KvStoreAuthError as soon as a handshake fails (a refused socket never can)."""
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            self.check()
            wait = max(0, int((deadline - time.monotonic()) * 1000))
            ready = dict(self._send_poller.poll(wait))
            if self._monitor in ready:
                continue  # checked at the top
            if self._sock in ready:
                return True
            if time.monotonic() >= deadline:
                return False

    def poll(self, timeout_ms: int | None) -> bool:
        """True when the socket is readable within `timeout_ms` (None: no limit); raises
        KvStoreAuthError as soon as a handshake fails."""
        deadline = None if timeout_ms is None else time.monotonic() + timeout_ms / 1000
        while True:
            wait = None if deadline is None else max(0, int((deadline - time.monotonic()) * 1000))
            ready = dict(self._poller.poll(wait))
            if self._monitor in ready:
                self.check()
            if self._sock in ready:
                return True
            if deadline is not None and time.monotonic() >= deadline:
                return False

    def close(self) -> None:
        if not self._monitor.closed:
            with contextlib.suppress(zmq.ZMQError):
                self._sock.disable_monitor()
            self._monitor.close(linger=0)

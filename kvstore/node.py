"""The KvStore node: the asyncio + ZeroMQ shell around the sans-I/O `KvStoreDb`.

Sockets:
- command socket (ROUTER, bound at cmd_url): clients and peers send `Request`s; see `kvstore.wire`
  for the framing. Peers flood with one-way KEY_SETs carrying the flood path (`node_ids`).
- publication socket (XPUB, bound at pub_url): every applied delta and every batch of expired keys,
  one `Publication` per frame. XPUB (rather than PUB) tells the node whether anyone subscribes, so
  no time is spent encoding publications nobody reads.
- one DEALER per peer, connected to the peer's command socket: floods, full-sync requests and their
  replies (matched by a correlation-id frame).

Event loop discipline: each socket's file descriptor is watched with `loop.add_reader`, and on
every wakeup the socket is drained with non-blocking receives (bounded per pass, for fairness).
Deltas produced in one pass are coalesced per flood path and flooded once per peer at the end of
the pass, so a burst of small publications becomes a few large ones.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import random
import signal
import sys
import time
import traceback
from collections import Counter
from collections.abc import Callable, Mapping

import zmq

from kvstore import wire
from kvstore.config import NodeConfig
from kvstore.db import KvStoreDb
from kvstore.gen.kvstore_thrift.constants import TTL_INFINITY
from kvstore.gen.kvstore_thrift.ttypes import (
    Command,
    DigestReply,
    KeySetParams,
    NodeInfo,
    PeerSpec,
    PeerState,
    Publication,
    Request,
    Response,
    Value,
)
from kvstore.node_peers import (
    IDLE,
    INITIALIZED,
    SYNCING,
    Backoff,
    PeerLink,
    SyncCap,
    jittered,
)
from kvstore.node_sync import SyncProtocolError, SyncSession

log = logging.getLogger("kvstore.node")

# Messages handled per socket wakeup before yielding to timers and other sockets.
DRAIN_LIMIT = 512
MAX_ENVELOPE_FRAMES = 16
TICK_S = 0.05
# Keys per finalize / rate-limit KEY_SET message.
KEYS_PER_MESSAGE = 20_000

Path = tuple[str, ...]


class BadArgument(Exception):
    """A request that decodes but cannot be served as asked (-> BAD_ARGUMENT)."""


def monotonic_ms() -> int:
    return int(time.monotonic() * 1000)


def wall_ms() -> int:
    return int(time.time() * 1000)


class KvStoreNode:
    """One node. Create, `await start()`, then `await wait_stopped()`; `stop()` ends it."""

    def __init__(
        self,
        config: NodeConfig,
        *,
        context: zmq.Context[zmq.Socket[bytes]] | None = None,
        rng: random.Random | None = None,
    ) -> None:
        if not config.name:
            raise ValueError("a node needs a name")
        self.config = config
        self.name = config.name
        self.db = KvStoreDb(
            config.name,
            ttl_decrement_ms=config.ttl_decrement_ms,
            ttl_threshold_ms=config.ttl_threshold_ms,
        )
        self.counters: Counter[str] = Counter()
        self.cmd_url = config.cmd_url
        self.pub_url = config.pub_url
        self._context = context or zmq.Context.instance()
        self._rng = rng or random.Random()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._cmd: zmq.Socket[bytes] | None = None
        self._pub: zmq.Socket[bytes] | None = None
        self._subscriptions = 0
        self._peers: dict[str, PeerLink] = {}
        self._requests: dict[bytes, str] = {}  # correlation id -> peer name
        self._corr_ids = itertools.count(1)
        self._sync_cap = SyncCap()
        self._floods: dict[Path, dict[str, Value]] = {}
        self._rate_tokens = float(config.flood_msg_burst)
        self._rate_last_ms = monotonic_ms()
        self._rate_buffer: set[str] = set()
        self._expiry_handle: asyncio.TimerHandle | None = None
        self._expiry_at: int | None = None
        self._tick_handle: asyncio.TimerHandle | None = None
        self._next_anti_entropy_ms: int | None = None
        self._started_ms = monotonic_ms()
        self._initial_sync_done = False
        self._stopped = asyncio.Event()
        self._handlers: dict[int, Callable[[Request, list[bytes]], bytes | None]] = {
            Command.KEY_SET: self._cmd_key_set,
            Command.KEY_GET: self._cmd_key_get,
            Command.KEY_DUMP: self._cmd_key_dump,
            Command.HASH_DUMP: self._cmd_hash_dump,
            Command.PEER_ADD: self._cmd_peer_add,
            Command.PEER_DEL: self._cmd_peer_del,
            Command.PEER_DUMP: self._cmd_peer_dump,
            Command.COUNTERS_GET: self._cmd_counters_get,
            Command.DIGEST_GET: self._cmd_digest_get,
            Command.NODE_INFO: self._cmd_node_info,
        }
        self._command_names = {
            value: f"kvstore.cmd_{name.lower()}"
            for name, value in Command._NAMES_TO_VALUES.items()
        }

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Bind the sockets (raises zmq.ZMQError if an address is taken), start timers, peers."""
        self._loop = asyncio.get_running_loop()
        cfg = self.config
        cmd = self._context.socket(zmq.ROUTER)
        pub = self._context.socket(zmq.XPUB)
        try:
            for sock in (cmd, pub):
                sock.setsockopt(zmq.LINGER, 0)
                sock.setsockopt(zmq.SNDHWM, cfg.zmq_hwm)
                sock.setsockopt(zmq.RCVHWM, cfg.zmq_hwm)
            # Hard guard against huge frames: a bit above the cap, so messages between the cap and
            # the guard still get a TOO_LARGE reply; beyond it ZeroMQ drops the connection.
            cmd.setsockopt(zmq.MAXMSGSIZE, 2 * cfg.max_message_bytes)
            cmd.setsockopt(zmq.ROUTER_MANDATORY, 1)
            cmd.setsockopt(zmq.ROUTER_HANDOVER, 1)
            cmd.bind(cfg.cmd_url)
            pub.bind(cfg.pub_url)
        except zmq.ZMQError:
            cmd.close(linger=0)
            pub.close(linger=0)
            raise
        self.cmd_url = cmd.getsockopt_string(zmq.LAST_ENDPOINT)
        self.pub_url = pub.getsockopt_string(zmq.LAST_ENDPOINT)
        self._cmd, self._pub = cmd, pub
        self._loop.add_reader(cmd.fileno(), self._on_cmd_readable)
        self._loop.add_reader(pub.fileno(), self._on_pub_readable)
        if cfg.sync_interval_s > 0:
            self._next_anti_entropy_ms = monotonic_ms() + int(
                jittered(cfg.sync_interval_s, self._rng) * 1000
            )
        for name, address in cfg.peers.items():
            self._add_peer(name, address.cmd_url, address.pub_url)
        self._update_initial_sync()
        self._tick_handle = self._loop.call_later(TICK_S, self._tick)
        # Messages may have queued between bind and add_reader: drain once now.
        self._loop.call_soon(self._on_cmd_readable)
        log.info("node %s serving cmd=%s pub=%s", self.name, self.cmd_url, self.pub_url)

    def stop(self) -> None:
        self._stopped.set()

    async def wait_stopped(self) -> None:
        await self._stopped.wait()

    def close(self) -> None:
        """Release every socket and timer (idempotent)."""
        loop = self._loop
        for handle in (self._tick_handle, self._expiry_handle):
            if handle is not None:
                handle.cancel()
        self._tick_handle = self._expiry_handle = None
        for name in list(self._peers):
            self._remove_peer(name)
        for sock in (self._cmd, self._pub):
            if sock is not None and not sock.closed:
                if loop is not None:
                    loop.remove_reader(sock.fileno())
                sock.close(linger=0)
        self._cmd = self._pub = None

    # ------------------------------------------------------------------ command socket

    def _on_cmd_readable(self) -> None:
        sock = self._cmd
        if sock is None:
            return
        handled = 0
        try:
            while handled < DRAIN_LIMIT:
                try:
                    frames = sock.recv_multipart(zmq.NOBLOCK)
                except zmq.Again:
                    break
                handled += 1
                self._handle_command(frames)
        finally:
            self._flush_floods()
        if handled >= DRAIN_LIMIT and self._loop is not None:
            self._loop.call_soon(self._on_cmd_readable)

    def _handle_command(self, frames: list[bytes]) -> None:
        if len(frames) < 3 or frames[-2] != b"" or len(frames) > MAX_ENVELOPE_FRAMES + 2:
            self._reply_error(
                [frames[0], b""],
                wire.MALFORMED,
                f"expected [envelope..., empty delimiter, request], got {len(frames) - 1} frame(s)",
            )
            return
        envelope = frames[:-1]
        payload = frames[-1]
        if len(payload) > self.config.max_message_bytes:
            self._reply_error(
                envelope,
                wire.TOO_LARGE,
                f"request of {len(payload)} bytes exceeds max_message_bytes"
                f" ({self.config.max_message_bytes})",
            )
            return
        try:
            request = wire.decode_request(payload, self.config.max_message_bytes)
        except wire.DecodeError as exc:
            self._reply_error(envelope, wire.MALFORMED, str(exc))
            return
        handler = self._handlers.get(request.cmd)
        if handler is None:
            self._reply_error(envelope, wire.UNKNOWN_COMMAND, f"unknown command {request.cmd!r}")
            return
        self.counters[self._command_names[request.cmd]] += 1
        try:
            reply = handler(request, envelope)
        except BadArgument as exc:
            self._reply_error(envelope, wire.BAD_ARGUMENT, str(exc))
            return
        except Exception as exc:  # a bug must not take the node down
            log.error("internal error on %s: %s", request.cmd, traceback.format_exc())
            self._reply_error(envelope, wire.INTERNAL, f"{type(exc).__name__}: {exc}")
            return
        if reply is not None:
            self._send_reply(envelope, reply)

    def _reply_error(self, envelope: list[bytes], code: str, message: str) -> None:
        self.counters["kvstore.malformed_requests"] += 1
        self.counters[f"kvstore.errors.{code}"] += 1
        log.debug("request error %s: %s", code, message)
        self._send_reply(envelope, wire.error_response(code, message))

    def _send_reply(self, envelope: list[bytes], payload: bytes) -> None:
        assert self._cmd is not None
        try:
            self._cmd.send_multipart([*envelope, payload], zmq.NOBLOCK)
        except zmq.ZMQError:  # requester gone (ROUTER_MANDATORY) or its queue is full
            self.counters["kvstore.send_failures"] += 1
            self.counters["kvstore.send_failure.reply"] += 1

    # ------------------------------------------------------------------ commands

    def _cmd_key_set(self, request: Request, envelope: list[bytes]) -> bytes | None:
        params = request.key_set
        if params is None or params.key_vals is None:
            raise BadArgument("KEY_SET needs key_set.key_vals")
        node_ids = params.node_ids or []
        solicited = params.solicit_response is not False
        key_vals = params.key_vals
        if node_ids:
            self.counters["kvstore.received_publications"] += 1
            self.counters["kvstore.received_key_vals"] += len(key_vals)
            if self.name in node_ids:
                self.counters["kvstore.looped_publications"] += 1
                return wire.OK_RESPONSE if solicited else None
        elif params.sender_id is None:
            # Straight from a client: never trust a client-supplied hash (a wrong one would
            # poison full-sync comparisons on every node); the core recomputes missing hashes.
            for value in key_vals.values():
                if type(value) is Value:
                    value.hash = None
        result = self.db.merge(key_vals, monotonic_ms())
        if result.delta:
            self.counters["kvstore.updated_key_vals"] += len(result.delta)
            path = tuple(node_ids)
            pending = self._floods.get(path)
            if pending is None:
                self._floods[path] = result.delta
            else:
                pending.update(result.delta)
        elif node_ids:
            self.counters["kvstore.received_redundant_publications"] += 1
        if not solicited:
            return None
        return wire.encode(Response(no_merge_reasons=result.no_merge))

    def _cmd_key_get(self, request: Request, envelope: list[bytes]) -> bytes:
        if request.key_get is None or request.key_get.keys is None:
            raise BadArgument("KEY_GET needs key_get.keys")
        key_vals = self.db.get(request.key_get.keys, monotonic_ms())
        return wire.encode(Response(publication=Publication(key_vals=key_vals)))

    def _dump_filters(self, request: Request) -> tuple[str, list[str], list[int] | None]:
        params = request.key_dump
        if params is None:
            return "", [], None
        return params.prefix or "", sorted(params.originator_ids or ()), params.buckets

    def _cmd_key_dump(self, request: Request, envelope: list[bytes]) -> bytes:
        prefix, originators, buckets = self._dump_filters(request)
        now = monotonic_ms()
        params = request.key_dump
        try:
            if params is not None and params.key_val_hashes is not None:
                # Responder side of a 3-way full sync.
                self.counters["kvstore.full_sync.served"] += 1
                send, want = self.db.dump_difference(
                    params.key_val_hashes, now, prefix, originators, buckets
                )
                publication = Publication(key_vals=send, tobe_updated_keys=want)
            else:
                publication = Publication(
                    key_vals=self.db.dump(now, prefix, originators, buckets)
                )
        except ValueError as exc:
            raise BadArgument(str(exc)) from exc
        return wire.encode(Response(publication=publication))

    def _cmd_hash_dump(self, request: Request, envelope: list[bytes]) -> bytes:
        prefix, originators, buckets = self._dump_filters(request)
        try:
            key_vals = self.db.hash_dump(monotonic_ms(), prefix, originators, buckets)
        except ValueError as exc:
            raise BadArgument(str(exc)) from exc
        return wire.encode(Response(publication=Publication(key_vals=key_vals)))

    def _cmd_digest_get(self, request: Request, envelope: list[bytes]) -> bytes:
        if request.digest is None or request.digest.node_ids is None:
            raise BadArgument("DIGEST_GET needs digest.node_ids")
        try:
            digests = self.db.digest_children(request.digest.node_ids)
        except ValueError as exc:
            raise BadArgument(str(exc)) from exc
        return wire.encode(Response(digest=DigestReply(digests=digests)))

    def _cmd_peer_add(self, request: Request, envelope: list[bytes]) -> bytes:
        if request.peer_add is None or request.peer_add.peers is None:
            raise BadArgument("PEER_ADD needs peer_add.peers")
        peers: Mapping[str, PeerSpec] = request.peer_add.peers
        for name, spec in peers.items():
            if not name or name == self.name:
                raise BadArgument(f"invalid peer name {name!r}")
            if type(spec) is not PeerSpec or not isinstance(spec.cmd_url, str):
                raise BadArgument(f"peer {name!r} needs a cmd_url")
            if not spec.cmd_url.startswith(("tcp://", "ipc://", "inproc://")):
                raise BadArgument(f"peer {name!r}: bad cmd_url {spec.cmd_url!r}")
        for name, spec in peers.items():
            existing = self._peers.get(name)
            if existing is not None and existing.cmd_url == spec.cmd_url:
                existing.pub_url = spec.pub_url or existing.pub_url
                continue
            try:
                self._add_peer(name, spec.cmd_url, spec.pub_url or "")
            except zmq.ZMQError as exc:
                raise BadArgument(
                    f"peer {name!r}: cannot connect to {spec.cmd_url!r}: {exc}"
                ) from exc
        self._update_initial_sync()
        return wire.OK_RESPONSE

    def _cmd_peer_del(self, request: Request, envelope: list[bytes]) -> bytes:
        if request.peer_del is None or request.peer_del.peer_names is None:
            raise BadArgument("PEER_DEL needs peer_del.peer_names")
        for name in request.peer_del.peer_names:
            self._remove_peer(name)
        self._update_initial_sync()
        return wire.OK_RESPONSE

    def _cmd_peer_dump(self, request: Request, envelope: list[bytes]) -> bytes:
        return wire.encode(Response(peers={n: p.spec() for n, p in self._peers.items()}))

    def _cmd_counters_get(self, request: Request, envelope: list[bytes]) -> bytes:
        return wire.encode(Response(counters=self.counter_snapshot()))

    def _cmd_node_info(self, request: Request, envelope: list[bytes]) -> bytes:
        return wire.encode(Response(node_info=self.node_info()))

    def node_info(self) -> NodeInfo:
        return NodeInfo(
            name=self.name,
            cmd_url=self.cmd_url,
            pub_url=self.pub_url,
            initial_sync_done=self._initial_sync_done,
            num_keys=len(self.db),
            uptime_ms=monotonic_ms() - self._started_ms,
        )

    def counter_snapshot(self) -> dict[str, int]:
        out: dict[str, int] = dict(self.counters)
        out.update(self.db.counters)
        out.update(self.db.gauges())
        out["kvstore.num_peers"] = len(self._peers)
        for state, state_name in PeerState._VALUES_TO_NAMES.items():
            out[f"kvstore.num_peers.{state_name}"] = sum(
                1 for p in self._peers.values() if p.state == state
            )
        out["kvstore.pending_full_sync"] = sum(
            1 for p in self._peers.values() if p.state != INITIALIZED
        )
        out["kvstore.initial_sync_done"] = int(self._initial_sync_done)
        out["kvstore.subscriptions"] = self._subscriptions
        out["kvstore.rate_limit_buffered_keys"] = len(self._rate_buffer)
        out["kvstore.uptime_ms"] = monotonic_ms() - self._started_ms
        return out

    # ------------------------------------------------------------------ publications (XPUB)

    def _on_pub_readable(self) -> None:
        sock = self._pub
        if sock is None:
            return
        while True:
            try:
                message = sock.recv(zmq.NOBLOCK)
            except zmq.Again:
                return
            # XPUB passes the first subscription to a topic and the last unsubscription.
            if message[:1] == b"\x01":
                self._subscriptions += 1
            elif message[:1] == b"\x00":
                self._subscriptions = max(0, self._subscriptions - 1)

    def _publish(self, publication: Publication) -> None:
        if self._pub is None:
            return
        self._on_pub_readable()  # a subscription may have arrived without waking us yet
        if self._subscriptions <= 0:
            return
        try:
            self._pub.send(wire.encode(publication), zmq.NOBLOCK)
            self.counters["kvstore.published_publications"] += 1
        except zmq.ZMQError:
            self.counters["kvstore.send_failures"] += 1
            self.counters["kvstore.send_failure.pub"] += 1

    # ------------------------------------------------------------------ flooding

    def _flush_floods(self) -> None:
        if not self._floods:
            return
        floods = self._floods
        self._floods = {}
        now = monotonic_ms()
        for path, delta in floods.items():
            node_ids = [*path, self.name]
            self._publish(Publication(key_vals=delta, node_ids=node_ids, timestamp_ms=wall_ms()))
            self._flood(path, delta, node_ids, now)
        self._arm_expiry()

    def _flood(
        self, path: Path, delta: Mapping[str, Value], node_ids: list[str], now: int
    ) -> None:
        targets: list[PeerLink] = []
        for name, peer in self._peers.items():
            if name in path:
                continue  # never back to where it came from (nor to anyone already on the path)
            if peer.state == INITIALIZED:
                targets.append(peer)
            else:
                peer.pending_keys.update(delta)
        if not targets:
            return
        if self.config.flood_msg_per_sec > 0 and not self._take_token(now):
            self._rate_buffer.update(delta)
            self.counters["kvstore.rate_limit_suppress"] += 1
            return
        key_vals = self.db.prepare_flood(delta, now)
        if key_vals:
            self._send_key_set(targets, key_vals, node_ids)

    def _send_key_set(
        self,
        targets: list[PeerLink],
        key_vals: dict[str, Value],
        node_ids: list[str],
        sender_id: str | None = None,
    ) -> None:
        payload = wire.encode(
            Request(
                cmd=Command.KEY_SET,
                key_set=KeySetParams(
                    key_vals=key_vals,
                    solicit_response=False,
                    node_ids=node_ids,
                    sender_id=sender_id,
                    timestamp_ms=wall_ms(),
                ),
            )
        )
        for peer in targets:
            if self._send_to_peer(peer, [b"", payload]):
                self.counters["kvstore.sent_publications"] += 1
                self.counters["kvstore.sent_key_vals"] += len(key_vals)

    def _send_to_peer(self, peer: PeerLink, frames: list[bytes]) -> bool:
        sock = peer.sock
        if sock is None:
            return False
        try:
            last = len(frames) - 1
            for i, frame in enumerate(frames):
                sock.send(frame, zmq.NOBLOCK | (zmq.SNDMORE if i < last else 0))
        except zmq.ZMQError as exc:
            self.counters["kvstore.send_failures"] += 1
            self.counters[f"kvstore.send_failure.{peer.name}"] += 1
            # Keys were lost on the way to this peer: resync it (after backoff).
            self._sync_failed(peer, f"send failed: {exc}")
            return False
        if peer.session is not None and self._loop is not None:
            # A send can consume the socket's read edge (ZeroMQ descriptors are edge-triggered):
            # look for sync replies now rather than at the next tick.
            self._loop.call_soon(self._on_peer_readable, peer.name)
        return True

    def _take_token(self, now: int) -> bool:
        cfg = self.config
        elapsed = max(0, now - self._rate_last_ms)
        self._rate_last_ms = now
        self._rate_tokens = min(
            float(cfg.flood_msg_burst), self._rate_tokens + elapsed * cfg.flood_msg_per_sec / 1000
        )
        if self._rate_tokens >= 1.0:
            self._rate_tokens -= 1.0
            return True
        return False

    def _flush_rate_buffer(self, now: int) -> None:
        """Flood the keys held back by the rate limit, re-read from the store (so a key changed
        meanwhile goes out in its latest state and a key gone meanwhile is skipped)."""
        if not self._rate_buffer or not self._take_token(now):
            return
        keys = self._rate_buffer
        self._rate_buffer = set()
        self.counters["kvstore.rate_limit_keys"] += len(keys)
        targets = [p for p in self._peers.values() if p.state == INITIALIZED]
        # The buffered keys came by many paths; merged, they carry only this node as path (one
        # redundant hop back to an original sender is the price, as in Open/R).
        for chunk in self._wire_values(keys, now):
            self._send_key_set(targets, chunk, [self.name])

    def _wire_values(self, keys: set[str], now: int) -> list[dict[str, Value]]:
        """Current values of `keys` as they should go on the wire to a peer, in chunks."""
        decrement = self.config.ttl_decrement_ms
        threshold = self.config.ttl_threshold_ms
        chunks: list[dict[str, Value]] = []
        current: dict[str, Value] = {}
        for key, value in self.db.get(keys, now).items():
            if value.ttl_ms != TTL_INFINITY:
                if value.ttl_ms <= decrement or value.ttl_ms < threshold:
                    continue
                value.ttl_ms -= decrement
            current[key] = value
            if len(current) >= KEYS_PER_MESSAGE:
                chunks.append(current)
                current = {}
        if current:
            chunks.append(current)
        return chunks

    # ------------------------------------------------------------------ TTL expiry

    def _arm_expiry(self) -> None:
        loop = self._loop
        if loop is None:
            return
        due = self.db.next_expiry_ms()
        if due is None:
            return
        if self._expiry_at is not None and self._expiry_at <= due:
            return
        if self._expiry_handle is not None:
            self._expiry_handle.cancel()
        self._expiry_at = due
        delay = max(0.0, due / 1000 - time.monotonic())
        self._expiry_handle = loop.call_later(delay, self._on_expiry)

    def _on_expiry(self) -> None:
        self._expiry_handle = None
        self._expiry_at = None
        expired = self.db.expire(monotonic_ms())
        if expired:
            # Expired keys go to local subscribers only: every node expires them by itself.
            self.counters["kvstore.expired_key_vals"] += len(expired)
            self._publish(
                Publication(key_vals={}, expired_keys=expired, node_ids=[self.name])
            )
        self._arm_expiry()

    # ------------------------------------------------------------------ peers

    def _add_peer(self, name: str, cmd_url: str, pub_url: str) -> None:
        if name in self._peers:
            self._remove_peer(name)
        cfg = self.config
        peer = PeerLink(
            name=name,
            cmd_url=cmd_url,
            pub_url=pub_url,
            backoff=Backoff(cfg.sync_initial_backoff_ms, cfg.sync_max_backoff_ms),
            state_since_ms=wall_ms(),
        )
        self._open_peer_socket(peer)
        self._peers[name] = peer
        self.counters["kvstore.peer_adds"] += 1
        log.info("peer %s added (%s)", name, cmd_url)
        self._start_due_syncs()

    def _open_peer_socket(self, peer: PeerLink) -> None:
        sock = self._context.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.SNDHWM, self.config.zmq_hwm)
        sock.setsockopt(zmq.RCVHWM, self.config.zmq_hwm)
        try:
            sock.connect(peer.cmd_url)
        except zmq.ZMQError:
            sock.close(linger=0)
            raise
        peer.sock = sock
        assert self._loop is not None
        name = peer.name
        self._loop.add_reader(sock.fileno(), lambda: self._on_peer_readable(name))

    def _close_peer_socket(self, peer: PeerLink) -> None:
        sock = peer.sock
        peer.sock = None
        if sock is not None and not sock.closed:
            if self._loop is not None:
                self._loop.remove_reader(sock.fileno())
            sock.close(linger=0)

    def _remove_peer(self, name: str) -> None:
        peer = self._peers.pop(name, None)
        if peer is None:
            return
        self._drop_session(peer)
        self._close_peer_socket(peer)
        self.counters["kvstore.peer_dels"] += 1
        log.info("peer %s removed", name)

    def _drop_session(self, peer: PeerLink) -> None:
        if peer.session is not None:
            for corr in peer.session.in_flight:
                self._requests.pop(corr, None)
            peer.session = None

    def _update_initial_sync(self) -> None:
        if not self._initial_sync_done and all(p.settled for p in self._peers.values()):
            self._initial_sync_done = True
            log.info("initial sync done (%d peer(s))", len(self._peers))

    def _tick(self) -> None:
        assert self._loop is not None
        now = monotonic_ms()
        try:
            self._check_timeouts(now)
            self._start_due_syncs(now)
            self._maybe_anti_entropy(now)
            if self._rate_buffer:
                self._flush_rate_buffer(now)
            # Safety net for edge-triggered ZeroMQ descriptors: drain anything left behind.
            self._on_cmd_readable()
            self._on_pub_readable()
            for name in list(self._peers):
                self._on_peer_readable(name)
        finally:
            self._tick_handle = self._loop.call_later(TICK_S, self._tick)

    def _check_timeouts(self, now: int) -> None:
        timeout = self.config.sync_timeout_ms
        for peer in list(self._peers.values()):
            if peer.session is not None and now - peer.last_activity_ms > timeout:
                self.counters["kvstore.full_sync.timeouts"] += 1
                self._sync_failed(peer, f"no reply within {timeout} ms")

    def _syncs_running(self) -> int:
        return sum(1 for p in self._peers.values() if p.session is not None)

    def _start_due_syncs(self, now: int | None = None) -> None:
        now = monotonic_ms() if now is None else now
        running = self._syncs_running()
        for peer in list(self._peers.values()):
            if peer.state != IDLE or peer.session is not None or now < peer.next_attempt_ms:
                continue
            if running >= self._sync_cap.limit:
                self.counters["kvstore.full_sync.deferred_by_cap"] += 1
                return
            self._start_sync(peer, "initial" if not peer.initialized_once else "resync", now)
            running += 1

    def _maybe_anti_entropy(self, now: int) -> None:
        due = self._next_anti_entropy_ms
        if due is None or now < due:
            return
        self._next_anti_entropy_ms = now + int(
            jittered(self.config.sync_interval_s, self._rng) * 1000
        )
        candidates = [
            p for p in self._peers.values() if p.state == INITIALIZED and p.session is None
        ]
        if candidates and self._syncs_running() < self._sync_cap.limit:
            peer = self._rng.choice(sorted(candidates, key=lambda p: p.name))
            self.counters["kvstore.anti_entropy_syncs"] += 1
            self._start_sync(peer, "anti_entropy", now)

    def request_sync(self, peer_name: str) -> bool:
        """Start an anti-entropy sync with one peer now (used by tests and benchmarks)."""
        peer = self._peers.get(peer_name)
        if peer is None or peer.session is not None:
            return False
        self._start_sync(peer, "anti_entropy", monotonic_ms())
        return True

    def _start_sync(self, peer: PeerLink, reason: str, now: int) -> None:
        if peer.state != INITIALIZED:
            peer.set_state(SYNCING, wall_ms())
        peer.session = SyncSession(
            peer.name,
            self.name,
            self.db,
            started_ms=now,
            buckets_per_request=self.config.sync_buckets_per_request,
            reason=reason,
        )
        peer.last_activity_ms = now
        self.counters["kvstore.full_sync.started"] += 1
        log.debug("sync with %s started (%s)", peer.name, reason)
        self._advance_sync(peer, now)

    def _advance_sync(self, peer: PeerLink, now: int) -> None:
        session = peer.session
        assert session is not None
        for phase, request in session.next_requests(now):
            corr = next(self._corr_ids).to_bytes(8, "big")
            if not self._send_to_peer(peer, [corr, b"", wire.encode(request)]):
                return  # _sync_failed already ran
            session.sent(corr, phase)
            self._requests[corr] = peer.name
            peer.last_activity_ms = now
        if session.finished:
            self._finalize_sync(peer, now)

    def _on_peer_readable(self, name: str) -> None:
        peer = self._peers.get(name)
        if peer is None or peer.sock is None:
            return
        sock = peer.sock
        handled = 0
        try:
            while handled < DRAIN_LIMIT and peer.sock is sock:
                try:
                    frames = sock.recv_multipart(zmq.NOBLOCK)
                except zmq.Again:
                    break
                handled += 1
                self._handle_peer_reply(peer, frames)
        finally:
            self._flush_floods()
        if handled >= DRAIN_LIMIT and self._loop is not None:
            self._loop.call_soon(self._on_peer_readable, name)

    def _handle_peer_reply(self, peer: PeerLink, frames: list[bytes]) -> None:
        if len(frames) != 3 or frames[1] != b"":
            self.counters["kvstore.full_sync.bad_replies"] += 1
            return
        corr = frames[0]
        owner = self._requests.pop(corr, None)
        session = peer.session
        if owner != peer.name or session is None or corr not in session.in_flight:
            self.counters["kvstore.full_sync.stale_replies"] += 1
            return
        now = monotonic_ms()
        peer.last_activity_ms = now
        try:
            response = wire.decode_response(frames[2])
            if response.error is not None:
                raise SyncProtocolError(
                    f"peer {peer.name} refused: {response.error.code} {response.error.message}"
                )
            if session.in_flight[corr] == SyncSession.DIGEST:
                session.on_digest_reply(corr, response)
            else:
                publication = session.on_dump_reply(corr, response)
                if publication.key_vals:
                    self._merge_from_sync(peer, publication.key_vals, now)
        except (wire.DecodeError, SyncProtocolError) as exc:
            self._sync_failed(peer, str(exc))
            return
        self._advance_sync(peer, now)

    def _merge_from_sync(self, peer: PeerLink, key_vals: dict[str, Value], now: int) -> None:
        result = self.db.merge(key_vals, now)
        self.counters["kvstore.full_sync.received_key_vals"] += len(key_vals)
        if result.delta:
            self.counters["kvstore.updated_key_vals"] += len(result.delta)
            path = (peer.name,)
            pending = self._floods.setdefault(path, {})
            pending.update(result.delta)

    def _finalize_sync(self, peer: PeerLink, now: int) -> None:
        session = peer.session
        assert session is not None
        keys = session.tobe_updated | peer.pending_keys
        peer.pending_keys = set()
        targets = [peer]
        for chunk in self._wire_values(keys, now):
            self._send_key_set(targets, chunk, [self.name], sender_id=self.name)
            self.counters["kvstore.full_sync.sent_key_vals"] += len(chunk)
        if peer.session is not session:
            return  # a send failed: the peer went back to IDLE
        peer.session = None
        duration = now - session.started_ms
        was_initialized = peer.state == INITIALIZED
        peer.set_state(INITIALIZED, wall_ms())
        peer.backoff.reset()
        self._sync_cap.succeeded()
        counters = self.counters
        counters["kvstore.full_sync.success"] += 1
        counters["kvstore.full_sync.duration_ms_sum"] += duration
        counters["kvstore.full_sync.duration_ms_last"] = duration
        counters["kvstore.full_sync.differing_buckets"] += session.differing_buckets
        if session.reason == "anti_entropy" and session.keys_received + len(keys) > 0:
            counters["kvstore.anti_entropy_repairs"] += 1
        log.info(
            "sync with %s done (%s) in %d ms: %d bucket(s) differed, %d key(s) in, %d out",
            peer.name,
            session.reason,
            duration,
            session.differing_buckets,
            session.keys_received,
            len(keys),
        )
        if not was_initialized:
            self._update_initial_sync()
        self._start_due_syncs(now)

    def _sync_failed(self, peer: PeerLink, why: str) -> None:
        now = monotonic_ms()
        had_session = peer.session is not None
        self._drop_session(peer)
        wait = peer.backoff.failed()
        peer.next_attempt_ms = now + wait
        peer.failed_once = True
        peer.set_state(IDLE, wall_ms())
        self.counters["kvstore.full_sync.failures" if had_session else "kvstore.peer_failures"] += 1
        log.warning("peer %s: %s; retry in %d ms", peer.name, why, wait)
        # A fresh socket drops whatever was queued for an unreachable peer; the next sync
        # repairs it anyway.
        if peer.sock is not None:
            self._close_peer_socket(peer)
            try:
                self._open_peer_socket(peer)
            except zmq.ZMQError as exc:
                log.error("peer %s: cannot reconnect: %s", peer.name, exc)
        self._update_initial_sync()


# ---------------------------------------------------------------------- process entry point


def run_node(config: NodeConfig) -> int:
    """Run a node until SIGTERM/SIGINT; returns the process exit code."""
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format=f"%(asctime)s {config.name} %(levelname)s %(message)s",
    )
    try:
        return asyncio.run(_serve(config))
    except zmq.ZMQError as exc:
        print(f"error: node {config.name}: cannot bind: {exc}", file=sys.stderr)
        return 1


async def _serve(config: NodeConfig) -> int:
    node = KvStoreNode(config)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, node.stop)
    try:
        await node.start()
        print(
            f"node {node.name} ready cmd={node.cmd_url} pub={node.pub_url}",
            flush=True,
        )
        await node.wait_stopped()
    finally:
        node.close()
    log.info("node %s stopped", node.name)
    return 0


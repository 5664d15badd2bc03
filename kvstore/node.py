"""The KvStore node: the asyncio + ZeroMQ shell around the sans-I/O `KvStoreDb`.

Sockets:
- command socket (ROUTER, bound at cmd_url): clients and peers send `Request`s; see `kvstore.wire`
  for the framing. Peers flood with one-way KEY_SETs carrying the flood path (`node_ids`).
- publication socket (XPUB, bound at pub_url): every applied delta and every batch of expired keys,
  one `Publication` per frame. XPUB (rather than PUB) tells the node whether anyone subscribes, so
  no time is spent encoding publications nobody reads, and lets it subscribe every subscriber to
  everything (the byte bound per subscriber, `kvstore.publisher`).
- one DEALER per peer, connected to the peer's command socket: floods, full-sync requests and their
  replies (matched by a correlation-id frame).

Event loop discipline: each socket's file descriptor is watched with `loop.add_reader`, and on
every wakeup the socket is drained with non-blocking receives (bounded per pass, for fairness).
Deltas produced in one pass are coalesced per flood path and flooded once per peer at the end of
the pass, so a burst of small publications becomes a few large ones.

Protocol decisions are not made here: what a received KEY_SET means (loop, time in transit) and
what to flood to whom is `kvstore.flood.FloodProtocol`'s, the CRDT merge `kvstore.db`'s; this
module reads the sockets, passes the clocks in and sends what comes out.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import random
import signal
import sys
import time
import traceback
from collections import deque
from collections.abc import Callable, Mapping, Sequence

import zmq

from kvstore import stats, wire
from kvstore.authz import INSECURE_IDENTITY, Identity, authorize
from kvstore.config import MAX_LEAF_PEERS, ConfigError, NodeConfig
from kvstore.curve import CurveError, NodeSecurity
from kvstore.db import KvStoreDb
from kvstore.filters import KeyFilter, filter_from_wire
from kvstore.flood import FloodProtocol, IngestBatch, Intake, Path
from kvstore.forward import Received
from kvstore.gen.kvstore_thrift.ttypes import (
    Command,
    KeyFilters,
    NodeInfo,
    PeerSpec,
    Publication,
    Request,
    Response,
    Value,
)
from kvstore.malloc import return_large_buffers
from kvstore.membership import drop_readmissions
from kvstore.node_conns import (
    FD_RESERVE,
    HEARTBEAT_IVL_MS,
    HEARTBEAT_TIMEOUT_MS,
    ConnectionLimiter,
    connection_caps,
    fd_limit,
    open_fds,
    prepare_process_limits,
)
from kvstore.node_members import Membership, touches_members
from kvstore.node_peers import Peering
from kvstore.node_sync import answered_share, digest_reply, requester_refusal
from kvstore.protocol import INCOMPATIBLE_PROTOCOL, THIS_NODE
from kvstore.publisher import (
    PUBLICATION_CHUNK_BYTES,
    Publisher,
    publication_frames,
    subscriber_hwm,
    subscriber_sndbuf,
)
from kvstore.shell import DRAIN_LIMIT, monotonic_ms, wall_at, wall_ms
from kvstore.storage import CorruptStateError, DurableStore, StorageError
from kvstore.store_state import StoreState, initial_state
from kvstore.value import I64_MAX, I64_MIN, NoMergeReason, WireKeyVals, is_wire_text

log = logging.getLogger("kvstore.node")

MAX_ENVELOPE_FRAMES = 16
TICK_S = 0.05
# Key-values merged (and flooded) together at most, so publications stay a reasonable size and
# the next node can start working while this one reads on.
INGEST_BATCH = 4096

# Error code of a request refused by `kvstore.authz` (the reason is in the message and counted as
# kvstore.auth.refused.<reason>).
UNAUTHORIZED = "UNAUTHORIZED"
# How often a secured node looks for changes in its authorized-keys directory.
KEY_RELOAD_INTERVAL_S = 1.0


class BadArgument(Exception):
    """A request that decodes but cannot be served as asked (-> BAD_ARGUMENT)."""




class KvStoreNode:
    """One node. Create, `await start()`, then `await wait_stopped()`; `stop()` ends it."""

    def __init__(
        self,
        config: NodeConfig,
        *,
        context: zmq.Context[zmq.Socket[bytes]] | None = None,
        rng: random.Random | None = None,
        security: NodeSecurity | None = None,
    ) -> None:
        if not config.name:
            raise ValueError("a node needs a name")
        self.config = config
        self.name = config.name
        self.leaf_filter = config.leaf_filter  # a leaf: what it keeps (None: everything)
        self.db = self._new_db()
        self.storage: DurableStore | None = None  # opened by start() when config.durable
        self.store_state = StoreState.EMPTY
        # Solicited KEY_SET replies waiting for their key-values to be on disk:
        # (storage ticket, envelope, reply), in ticket order.
        self._acks_waiting: deque[tuple[int, list[bytes], bytes]] = deque()
        self.counters = stats.StatCounter()
        self.cmd_url = config.cmd_url
        self.pub_url = config.pub_url
        self._context = context or zmq.Context.instance()
        self._rng = rng or random.Random()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._cmd: zmq.Socket[bytes] | None = None
        self._pub: zmq.Socket[bytes] | None = None
        self.peering: Peering | None = None  # created in start(): it needs the loop
        self.flooding: FloodProtocol | None = None  # the peering's (start())
        self._floods: dict[Path, dict[str, Value]] = {}
        # Per flood path, the peers' publications whose merge produced (part of) that delta.
        self._flood_received: dict[Path, list[Received]] = {}
        self._ingest = IngestBatch()  # one-way sets not merged yet (see _ingest_oneway)
        self._dropped_on_load: list[str] = []  # a leaf's stored keys outside its filters
        self._expiry_handle: asyncio.TimerHandle | None = None
        self._expiry_at: int | None = None
        self._tick_handle: asyncio.TimerHandle | None = None
        self._readmissions: list[str] = []  # of the request being handled
        self._started_ms = monotonic_ms()
        self._stopped = asyncio.Event()
        # None: plaintext (insecure mode, every connection is INSECURE_IDENTITY).
        self.security = security
        self._keys_checked_at = time.monotonic()
        # member/ records -> key table and peerings (kvstore/node_members.py); refreshed after a
        # pass that merged a change to one.
        self.membership = Membership(config, self.db, self.counters, security)
        self._members_changed = False
        self._limiters: list[ConnectionLimiter] = []  # created in start(), on the bound sockets
        self._cmd_limiter: ConnectionLimiter | None = None  # the command socket's (reaps)
        self._pub_limiter: ConnectionLimiter | None = None  # the publication socket's
        self._publisher: Publisher | None = None
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
            value: stats.CMD(name.lower())
            for name, value in Command._NAMES_TO_VALUES.items()
        }

    def _new_db(self) -> KvStoreDb:
        return KvStoreDb(
            self.config.name,
            ttl_decrement_ms=self.config.ttl_decrement_ms,
            ttl_threshold_ms=self.config.ttl_threshold_ms,
        )

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Load the durable store (StorageError if it cannot be used), then bind the sockets
        (zmq.ZMQError if an address is taken), start timers and peers."""
        self._loop = asyncio.get_running_loop()
        cfg = self.config
        self._open_storage()
        if self.security is not None:
            self.security.start(self._context)
        cmd = self._context.socket(zmq.ROUTER)
        pub = self._context.socket(zmq.XPUB)
        try:
            for sock in (cmd, pub):
                sock.setsockopt(zmq.LINGER, 0)
                sock.setsockopt(zmq.SNDHWM, cfg.zmq_hwm)
                sock.setsockopt(zmq.RCVHWM, cfg.zmq_hwm)
                # A peer that stops answering ZeroMQ's PINGs (gone without a FIN, or a
                # subscriber that does not read, so never sees the PING) is disconnected: its
                # descriptor and queue are freed.
                sock.setsockopt(zmq.HEARTBEAT_IVL, HEARTBEAT_IVL_MS)
                sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, HEARTBEAT_TIMEOUT_MS)
                if self.security is not None:
                    self.security.make_server(sock)
            # Hard guard against huge frames: a bit above the cap, so messages between the cap and
            # the guard still get a TOO_LARGE reply; beyond it ZeroMQ drops the connection.
            cmd.setsockopt(zmq.MAXMSGSIZE, 2 * cfg.max_message_bytes)
            # Each subscriber's queue is bounded in bytes (kvstore/publisher.py).
            pub.setsockopt(zmq.SNDHWM, subscriber_hwm(cfg.subscriber_queue_bytes))
            pub.setsockopt(zmq.SNDBUF, subscriber_sndbuf(cfg.subscriber_queue_bytes))
            pub.setsockopt(zmq.XPUB_NODROP, 1)
            pub.setsockopt(zmq.XPUB_MANUAL, 1)
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
        self._publisher = Publisher(pub, self.counters, self._on_subscriber)
        self._loop.add_reader(cmd.fileno(), self._on_cmd_readable)
        self._loop.add_reader(pub.fileno(), self._on_pub_readable)
        counters = self.counters
        handshakes = self._handshake_failed if self.security is not None else None
        max_clients, max_subscribers = connection_caps(cfg, fd_limit())
        self._cmd_limiter = ConnectionLimiter(
            cmd, max_clients, counters, stats.CLIENTS, "max_clients", handshakes,
            reap_idlest=True, before_reap=self._on_cmd_readable,
        )
        self._pub_limiter = ConnectionLimiter(pub, max_subscribers, counters, stats.SUBSCRIBERS,
                                              "max_subscribers", handshakes)
        self._limiters = [self._cmd_limiter, self._pub_limiter]
        for limiter in self._limiters:
            self._loop.add_reader(limiter.fileno(), limiter.on_readable)
        self.peering = Peering(
            self.name, cfg, self.db, self.counters, self, self._context, self._loop, self._rng,
            security=self.security,
        )
        self.flooding = self.peering.flooding
        self.membership.db = self.db  # loading the store may have replaced it
        self.membership.start(self.peering, self._limiters, cfg.peers)
        self.peering.update_initial_sync()
        self._tick_handle = self._loop.call_later(TICK_S, self._tick)
        # Messages may have queued between bind and add_reader: drain once now.
        self._loop.call_soon(self._on_cmd_readable)
        log.info("node %s serving cmd=%s pub=%s", self.name, self.cmd_url, self.pub_url)

    def _open_storage(self) -> None:
        """Load the data directory into the store, before anything can be asked or peered."""
        cfg = self.config
        if not cfg.durable:
            why = "durability = off" if cfg.data_dir else "--ephemeral / no data_dir"
            log.warning("node %s keeps its store in memory only (%s): nothing it holds "
                        "survives a restart", self.name, why)
            return
        storage = DurableStore(cfg.data_dir, self.name, "sync" if cfg.durability == "sync"
                               else "batch", discard_corrupt=cfg.discard_corrupt_state)
        storage.open()
        started = time.monotonic()
        try:
            loaded = self._load_rows(storage)
        except CorruptStateError as exc:
            if not cfg.discard_corrupt_state:
                storage.close()
                raise
            storage.discard(str(exc))
            self.db = self._new_db()
            loaded = 0
        self.counters[stats.STORAGE_LOADED_KEYS] = loaded
        self.counters[stats.STORAGE_LOAD_MS] = int((time.monotonic() - started) * 1000)
        self.db.enable_journal()
        loop = self._loop
        assert loop is not None

        def durable(ticket: int, error: str | None) -> None:  # on the writer thread
            with contextlib.suppress(RuntimeError):  # the loop is gone: nobody is waiting
                loop.call_soon_threadsafe(self._on_durable, ticket, error)

        storage.on_durable = durable
        storage.start()
        self.storage = storage
        if self._dropped_on_load:
            storage.submit(dict.fromkeys(self._dropped_on_load))
            self._dropped_on_load = []
        self.store_state = initial_state(loaded)
        log.info("node %s: %d key(s) loaded from %s in %d ms: store %s", self.name, loaded,
                 storage.path, self.counters[stats.STORAGE_LOAD_MS], self.store_state.value)

    def _load_rows(self, storage: DurableStore) -> int:
        records = [record for chunk in storage.rows() for record in chunk]
        own = self.leaf_filter
        if own is not None:
            # A leaf whose filters changed since it wrote these: it keeps only its share now.
            kept = [(key, value) for key, value in records if own.matches(key, value)]
            self._dropped_on_load = [key for key, value in records if not own.matches(key, value)]
            if self._dropped_on_load:
                self.counters[stats.LEAF_DROPPED_ON_LOAD] += len(self._dropped_on_load)
                log.warning("leaf %s: %d stored key(s) outside its filters dropped (e.g. %s)",
                            self.name, len(self._dropped_on_load), self._dropped_on_load[0])
            records = kept
        # Typed by the STRICT table and decoded by sqlite3 (invalid UTF-8 raises).
        refused = self.db.load_durable(records)
        if refused:
            self.counters[stats.STORAGE_LOAD_REFUSED] += len(refused)
            log.warning("%d stored row(s) refused on load, e.g. %s", len(refused),
                        next(iter(refused.items())))
        return len(self.db)

    def _persist(self) -> int:
        """Hand the store's durable changes to the writer; the ticket to wait for (0: none)."""
        storage = self.storage
        if storage is None:
            return 0
        changes = self.db.take_journal()
        # Every socket pass ends here: with nothing new, no lock is taken.
        return storage.submit(changes) if changes else storage.submitted

    def _on_durable(self, ticket: int, error: str | None) -> None:
        """On the loop: the writer committed (or failed to commit) everything up to `ticket`."""
        waiting = self._acks_waiting
        while waiting and waiting[0][0] <= ticket:
            _ticket, envelope, reply = waiting.popleft()
            if error is not None:
                reply = self._storage_error(error)
            self._send_reply(envelope, reply)

    def _storage_error(self, error: str) -> bytes:
        self.counters[stats.ERRORS(wire.STORAGE_ERROR)] += 1
        return wire.error_response(
            wire.STORAGE_ERROR,
            f"{error}: not acknowledged (the node keeps serving reads and flooding; write again "
            "once its disk is writable)",
        )

    def on_peer_synced(self, peer: str) -> None:
        """A full sync with `peer` completed: the store holds everything that peer had."""
        if self.store_state is not StoreState.SYNCED:
            log.info("node %s: store SYNCED (full sync with %s completed; was %s)", self.name,
                     peer, self.store_state.value)
            self.store_state = StoreState.SYNCED

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
        for limiter in self._limiters:
            if loop is not None:
                loop.remove_reader(limiter.fileno())
            limiter.close()
        self._limiters = []
        self._cmd_limiter = self._pub_limiter = None
        if self.peering is not None:
            self.peering.close()
        for sock in (self._cmd, self._pub):
            if sock is not None and not sock.closed:
                if loop is not None:
                    loop.remove_reader(sock.fileno())
                sock.close(linger=0)
        self._cmd = self._pub = None
        if self.storage is not None:
            self._persist()
            self.storage.close()  # writes what is pending, releases the data directory
            self.storage = None
        if self.security is not None:
            self.security.stop()

    # ------------------------------------------------------------------ security

    def _handshake_failed(self, event: int) -> None:
        """Count (and log) a connection refused at the handshake: plaintext or a wrong server
        key. Keys the ZAP handler refuses (EVENT_HANDSHAKE_FAILED_AUTH) are counted there, with
        their fingerprint. Called by the connection limiters, whose monitors see the events."""
        if event != zmq.EVENT_HANDSHAKE_FAILED_AUTH and self.security is not None:
            self.security.refused(
                "handshake", "unknown",
                "connection refused: CurveZMQ handshake failed (a plaintext client, or"
                " one with a wrong server key)",
            )

    def _on_subscriber(self, fd: int, user_id: str | None) -> None:
        """A subscription came on connection `fd` with key `user_id` (see `Membership`)."""
        if self._pub_limiter is not None:
            self._pub_limiter.note_key(fd, user_id)

    def _identity(self, user_id: str | None) -> Identity | None:
        if self.security is None:
            return INSECURE_IDENTITY
        return self.security.identity(user_id)

    def _check_keys(self) -> None:
        """Reload the authorized keys when the directory changed (rotation without restart)."""
        now = time.monotonic()
        if self.security is None or now - self._keys_checked_at < KEY_RELOAD_INTERVAL_S:
            return
        self._keys_checked_at = now
        if self.security.reload_if_changed():
            self.membership.keys_changed()
            if self.peering is not None:
                self.peering.refresh_keys()

    # ------------------------------------------------------------------ command socket

    def _on_cmd_readable(self) -> None:
        sock = self._cmd
        if sock is None:
            return
        handled = 0
        secured = self.security is not None
        limiter = self._cmd_limiter
        try:
            while handled < DRAIN_LIMIT:
                received = _recv_frames_from(sock, secured)
                if received is None:
                    break
                frames, user_id, fd = received
                if limiter is not None:
                    limiter.touch(fd)  # the connection is not idle: reaped last
                    limiter.note_key(fd, user_id)
                identity = self._identity(user_id) if secured else INSECURE_IDENTITY
                handled += 1
                self._handle_command(frames, identity)
        finally:
            self._merge_ingest()
            self.flush_floods()
        if handled >= DRAIN_LIMIT and self._loop is not None:
            self._loop.call_soon(self._on_cmd_readable)

    def _handle_command(
        self, frames: list[bytes], identity: Identity | None = INSECURE_IDENTITY
    ) -> None:
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
        if identity is not INSECURE_IDENTITY and not self._authorized(identity, request, envelope):
            return
        forwardable = not self._dropped_own_record(identity, request)
        if request.cmd == Command.KEY_SET and self._ingest_oneway(request, payload, forwardable):
            self.counters[stats.CMD("key_set")] += 1
            return
        # Anything else sees the one-way sets received before it (read-your-writes).
        self._merge_ingest()
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

    def _authorized(
        self, identity: Identity | None, request: Request, envelope: list[bytes]
    ) -> bool:
        """Apply `kvstore.authz`: refuse (counted, answered unless one-way) or serve; an untrusted
        sender's flood-path fields are dropped here, so its hashes are recomputed."""
        decision = authorize(identity, request, self.membership.view.removed_names())
        params = request.key_set
        if decision.refused is not None:
            assert self.security is not None
            self.security.refused(
                decision.refused,
                identity.fingerprint if identity is not None else "revoked",
                f"request refused: {decision.message}",
            )
            if request.cmd != Command.KEY_SET or params is None or (
                params.solicit_response is not False
            ):
                self._send_reply(
                    envelope, wire.error_response(UNAUTHORIZED, f"{decision.refused}: "
                                                  f"{decision.message}")
                )
            return False
        if params is not None and not decision.trust_flood_path and (
            params.node_ids or params.sender_id is not None
        ):
            self.counters[stats.AUTH_IGNORED_FLOOD_PATH] += 1
            params.node_ids = []
            params.sender_id = None
        for sync in (request.key_dump, request.digest):
            # A sync request's sender_id teaches this node a peer's leaf filters (what it
            # floods there): only that peer itself may claim it.
            if sync is not None and sync.sender_id is not None and not (
                decision.trust_flood_path
                and identity is not None
                and (identity.insecure or identity.node == sync.sender_id)
            ):
                self.counters[stats.AUTH_IGNORED_FLOOD_PATH] += 1
                sync.sender_id = None
        return True

    def _dropped_own_record(self, identity: Identity | None, request: Request) -> bool:
        """Drop from a KEY_SET the `member/` records that would re-admit a member this node holds
        as removed (`membership.drop_readmissions`); True if any (the set is then no longer the
        bytes received: never forwarded as they are)."""
        self._readmissions = []
        params = request.key_set
        if identity is None or params is None or params.key_vals is None:
            return False
        now = monotonic_ms()

        def held(key: str) -> bytes | None:
            value = self.db.get([key], now).get(key)
            return value.value if value is not None else None

        dropped = drop_readmissions(held, params.key_vals)
        self.counters[stats.MEMBER_READMISSION_DROPPED] += len(dropped)
        self._readmissions = dropped  # the solicited reply names them (_cmd_key_set)
        return bool(dropped)

    def _reply_error(self, envelope: list[bytes], code: str, message: str) -> None:
        self.counters[stats.MALFORMED_REQUESTS] += 1
        self.counters[stats.ERRORS(code)] += 1
        log.debug("request error %s: %s", code, message)
        self._send_reply(envelope, wire.error_response(code, message))

    def _send_reply(self, envelope: list[bytes], payload: bytes) -> None:
        if self._cmd is None:
            # Closed: a durable acknowledgement can land after the sockets are gone (the writer
            # committed during shutdown). The requester never hears; count it, do not crash.
            self.counters[stats.SEND_FAILURES] += 1
            self.counters[stats.SEND_FAILURE_REPLY] += 1
            return
        try:
            self._cmd.send_multipart([*envelope, payload], zmq.NOBLOCK)
        except zmq.ZMQError:  # requester gone (ROUTER_MANDATORY) or its queue is full
            self.counters[stats.SEND_FAILURES] += 1
            self.counters[stats.SEND_FAILURE_REPLY] += 1

    # ------------------------------------------------------------------ KEY_SET

    def _receive(self, request: Request) -> Intake:
        params = request.key_set
        assert params is not None and self.flooding is not None
        return self.flooding.receive(params, wall_ms())

    def _ingest_oneway(self, request: Request, payload: bytes, forwardable: bool = True) -> bool:
        """Take a one-way KEY_SET (a flood) into the current batch (`IngestBatch`); False if it
        is not one. A peer's set is kept with its payload until flooded (it may be forwarded as
        received: `kvstore.forward`), unless not `forwardable` (changed since received)."""
        params = request.key_set
        if params is None or params.solicit_response is not False or params.key_vals is None:
            return False
        intake = self._receive(request)
        if intake.looped:
            return True
        batch = self._ingest
        if not batch.fits(intake):
            self._merge_ingest()
        batch.add(intake, Received(payload, request) if intake.path and forwardable else None)
        if len(batch) >= INGEST_BATCH:
            self._merge_ingest()
            if self._flood_size() >= INGEST_BATCH:
                self.flush_floods()
        return True

    def _merge_ingest(self) -> None:
        path, key_vals, messages = self._ingest.take()
        if key_vals:
            self._merge(path, key_vals, messages, [message.key_vals for message in messages])

    def _merge(
        self,
        path: Path,
        key_vals: WireKeyVals,
        messages: list[Received],
        peer_sets: Sequence[Mapping[str, Value]],
    ) -> dict[str, str]:
        """Merge what came by `path` and queue the delta's flood (`messages`: peer publications
        that may be forwarded as received; `peer_sets`: the peer sets merged, for the
        redundancy count); returns the refusals (no_merge)."""
        result = self.db.merge_decoded(key_vals, monotonic_ms())
        assert self.flooding is not None
        diverged = self.flooding.merged(path, result, peer_sets)
        if result.delta:
            self.queue_flood(path, result.delta, messages)
        if diverged is not None and self.peering is not None:
            self.peering.resync_diverged(diverged)
        return result.no_merge

    def _cmd_key_set(self, request: Request, envelope: list[bytes]) -> bytes | None:
        """A solicited KEY_SET (one-way sets go through `_ingest_oneway`): merged at once and
        answered with the refusals, once durable where durability is "sync"."""
        params = request.key_set
        if params is None or params.key_vals is None:
            raise BadArgument("KEY_SET needs key_set.key_vals")
        storage = self.storage
        if storage is not None and not storage.healthy:
            # Known not to reach the disk: refuse before changing anything.
            assert storage.last_error is not None
            self.counters[stats.STORAGE_REFUSED_SETS] += 1
            return self._storage_error(storage.last_error)
        intake = self._receive(request)
        if intake.looped:
            return wire.OK_RESPONSE
        no_merge = self._merge(
            intake.path, intake.key_vals, [], [intake.key_vals] if intake.path else []
        )
        for key in intake.expired:  # the requester learns its set arrived too late
            no_merge[key] = NoMergeReason.EXPIRED_IN_TRANSIT
        for key in intake.refused:  # a leaf: not its share (counted, not an error)
            no_merge[key] = NoMergeReason.NO_MATCHED_KEY
        for key in self._readmissions:  # dropped before the merge: removal is final
            no_merge[key] = NoMergeReason.MEMBER_REMOVED
        self._readmissions = []
        reply = wire.encode(Response(no_merge_reasons=no_merge))
        if storage is not None and storage.durability == "sync":
            # Acknowledgement means durable. With no change of its own, the reply still waits
            # for the writes before it (the value it agrees with may not be on disk yet).
            ticket = self._persist()
            if ticket > storage.durable:
                self._acks_waiting.append((ticket, envelope, reply))
                return None
        return reply

    def _flood_size(self) -> int:
        return sum(len(delta) for delta in self._floods.values())

    # ------------------------------------------------------------------ commands

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

    def _requested_filter(
        self, filters: KeyFilters | None, sender: str | None
    ) -> KeyFilter | None:
        """The filters of a leaf's sync request (BadArgument if malformed), learned for its
        floods when the sender is a peer (`node_sync.answered_share` says what is answered)."""
        try:
            key_filter = filter_from_wire(filters)
        except ValueError as exc:
            raise BadArgument(str(exc)) from exc
        if sender and self.peering is not None:
            self.peering.learn_filter(sender, key_filter)
            # The peer syncs with us, so it accepts our key now: if our own sync with it is
            # stuck (it refused us before: a member it had not heard of), dial it again.
            self.peering.redial_unsynced(0, only=sender)
        return key_filter

    def _cmd_key_dump(self, request: Request, envelope: list[bytes]) -> bytes:
        prefix, originators, buckets = self._dump_filters(request)
        now = monotonic_ms()
        params = request.key_dump
        try:
            if params is not None and params.key_val_hashes is not None:
                # Responder side of a 3-way full sync.
                self.counters[stats.FULL_SYNC_SERVED] += 1
                key_filter = answered_share(
                    self.leaf_filter, self._requested_filter(params.filters, params.sender_id)
                )
                send, want = self.db.dump_difference(
                    params.key_val_hashes, now, prefix, originators, buckets, key_filter
                )
                publication = Publication(
                    key_vals=send, tobe_updated_keys=want, timestamp_ms=wall_at(now)
                )
            else:
                publication = Publication(
                    key_vals=self.db.dump(now, prefix, originators, buckets),
                    timestamp_ms=wall_at(now),
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

    def _cmd_digest_get(self, request: Request, envelope: list[bytes]) -> bytes | None:
        if request.digest is None or request.digest.node_ids is None:
            raise BadArgument("DIGEST_GET needs digest.node_ids")
        params = request.digest
        refused = requester_refusal(params)
        if refused is not None:  # no half-working peering: the requester's sync fails, saying why
            self.counters[stats.PEER_PROTOCOL_REFUSED] += 1
            log.error("DIGEST_GET refused: %s", refused)
            self._reply_error(envelope, INCOMPATIBLE_PROTOCOL, refused)
            return None
        requested = self._requested_filter(params.filters, params.sender_id)
        try:
            reply = digest_reply(self.db, self.leaf_filter, requested, params.node_ids)
        except ValueError as exc:
            raise BadArgument(str(exc)) from exc
        return wire.encode(Response(digest=reply))

    def _cmd_peer_add(self, request: Request, envelope: list[bytes]) -> bytes:
        if request.peer_add is None or request.peer_add.peers is None:
            raise BadArgument("PEER_ADD needs peer_add.peers")
        peers: Mapping[str, PeerSpec] = request.peer_add.peers
        for name, spec in peers.items():
            if not name or name == self.name or not is_wire_text(name):
                raise BadArgument(f"invalid peer name {name!r}")
            if type(spec) is not PeerSpec or not isinstance(spec.cmd_url, str):
                raise BadArgument(f"peer {name!r} needs a cmd_url")
            if not spec.cmd_url.startswith(("tcp://", "ipc://", "inproc://")):
                raise BadArgument(f"peer {name!r}: bad cmd_url {spec.cmd_url!r}")
        assert self.peering is not None
        self._check_leaf_peers(peers)
        self._reserve_peers(peers)
        self._add_peers_or_none(peers)
        return wire.OK_RESPONSE

    def _check_leaf_peers(self, peers: Mapping[str, PeerSpec]) -> None:
        """A leaf takes at most MAX_LEAF_PEERS peers, its core uplinks: it stores only its
        share and never forwards between them (docs/kvstore.md, "Leaf nodes")."""
        assert self.peering is not None
        if not self.config.leaf:
            return
        names = set(self.peering.links) | set(peers)
        if len(names) > MAX_LEAF_PEERS:
            self.counters[stats.PEER_ADD_REFUSED] += 1
            self.counters[stats.LEAF_TRANSIT_REFUSED] += 1
            raise BadArgument(
                f"leaf node {self.name} takes at most {MAX_LEAF_PEERS} peers, would have"
                f" {len(names)} ({', '.join(sorted(names))}): a leaf stores only its share and"
                " must never be a transit node; nothing was added"
            )

    def _reserve_peers(self, peers: Mapping[str, PeerSpec]) -> None:
        """BadArgument unless every new peer of a PEER_ADD fits: max_peers, and descriptors
        (two per peer) with FD_RESERVE left over. Checked before any is added."""
        assert self.peering is not None
        links = self.peering.links
        new = sum(1 for name in peers if name not in links)
        cap = self.config.max_peers
        if len(links) + new > cap:
            self.counters[stats.PEER_ADD_REFUSED] += 1
            raise BadArgument(
                f"PEER_ADD of {new} new peer(s) refused: {len(links)} configured, max_peers is"
                f" {cap}; nothing was added"
            )
        free = fd_limit() - open_fds()
        if 2 * new > free - FD_RESERVE:
            self.counters[stats.PEER_ADD_REFUSED] += 1
            raise BadArgument(
                f"PEER_ADD of {new} new peer(s) refused: {free} file descriptors free, each peer"
                f" needs 2 and {FD_RESERVE} stay reserved; nothing was added"
            )

    def _add_peers_or_none(self, peers: Mapping[str, PeerSpec]) -> None:
        """Add every peer, or (on a failure) restore the peers as they were and raise."""
        peering = self.peering
        assert peering is not None
        before = {name: (link.cmd_url, link.pub_url) for name, link in peering.links.items()}
        done: list[str] = []
        for name, spec in peers.items():
            try:
                peering.add(name, spec.cmd_url, spec.pub_url or "")
            except (CurveError, zmq.ZMQError) as exc:
                # The failed one too: replacing a peer removes the old link first.
                for added in [*done, name]:
                    peering.remove(added)
                    if added in before:
                        peering.add(added, *before[added])
                why = str(exc) if isinstance(exc, CurveError) else (
                    f"peer {name!r}: cannot connect to {spec.cmd_url!r}: {exc}")
                raise BadArgument(f"{why}; nothing was added") from exc
            done.append(name)

    def reconfigure(self, config: NodeConfig) -> None:
        """Take a re-read configuration (SIGHUP): its peers and the settings kvstore/config.py
        declares live. The caller keeps every restart-only setting at its running value.
        The configured peers are diffed against the previous configuration's (peers added with
        PEER_ADD stay); a new peer refused (max_peers, descriptors, a leaf's one peer, no key)
        is a ConfigError, with the peers and settings left as they were."""
        assert self.peering is not None
        old = self.config
        dropped = [name for name in old.peers if name not in config.peers]
        # A peer the file no longer names but a member record does stays, now the records'
        # (removed when they stop naming it): removing it here only for the membership to add it
        # back would restart the peering (a full sync) for nothing.
        kept = self.membership.named_peers() & set(dropped)
        removed = {name: old.peers[name] for name in dropped if name not in kept}
        added = {name: PeerSpec(cmd_url=address.cmd_url, pub_url=address.pub_url)
                 for name, address in config.peers.items() if old.peers.get(name) != address}
        for name in removed:
            self.peering.remove(name)
        try:
            self._check_leaf_peers(added)
            self._reserve_peers(added)
            self._add_peers_or_none(added)
        except BadArgument as exc:
            for name, address in removed.items():
                self.peering.add(name, address.cmd_url, address.pub_url)
            raise ConfigError(str(exc)) from exc
        self.config = config
        self.db.ttl_decrement_ms = config.ttl_decrement_ms
        self.db.ttl_threshold_ms = config.ttl_threshold_ms
        self.peering.retune(config)
        # A peer dropped from the file that a member record names is a member peering still.
        self.membership.config = config
        self.membership.adopt(kept)
        self.membership.reconcile()

    def _cmd_peer_del(self, request: Request, envelope: list[bytes]) -> bytes:
        if request.peer_del is None or request.peer_del.peer_names is None:
            raise BadArgument("PEER_DEL needs peer_del.peer_names")
        assert self.peering is not None
        for name in request.peer_del.peer_names:
            self.peering.remove(name)
        return wire.OK_RESPONSE

    def _cmd_peer_dump(self, request: Request, envelope: list[bytes]) -> bytes:
        assert self.peering is not None
        return wire.encode(Response(peers=self.peering.specs()))

    def _cmd_counters_get(self, request: Request, envelope: list[bytes]) -> bytes:
        return wire.encode(Response(counters=self.counter_snapshot()))

    def _cmd_node_info(self, request: Request, envelope: list[bytes]) -> bytes:
        return wire.encode(Response(node_info=self.node_info()))

    def node_info(self) -> NodeInfo:
        return NodeInfo(
            name=self.name,
            cmd_url=self.cmd_url,
            pub_url=self.pub_url,
            initial_sync_done=self.peering is not None and self.peering.initial_sync_done,
            num_keys=len(self.db),
            uptime_ms=monotonic_ms() - self._started_ms,
            digest=self.db.root_digest(),
            store_state=self.store_state.value,
            leaf_filters=None if self.leaf_filter is None else self.leaf_filter.to_wire(),
            version=THIS_NODE.version,
            protocol=THIS_NODE.protocol,
            min_protocol=THIS_NODE.min_protocol,
        )

    def counter_snapshot(self) -> dict[str, int]:
        out: dict[str, int] = dict(self.counters)
        out.update(self.db.counters)
        out.update(self.db.gauges())
        if self.peering is not None:
            out.update(self.peering.gauges())
        if self.storage is not None:
            out.update(self.storage.gauges())
        out[stats.STORAGE_DURABLE] = int(self.storage is not None)
        out[stats.STORE_STATE] = self.store_state.code
        for state in StoreState:
            out[stats.STORE_STATE_IS(state.value)] = int(state is self.store_state)
        out[stats.STORAGE_ACKS_WAITING] = len(self._acks_waiting)
        if self.security is not None:
            out.update(self.security.counters())
        out.update(self.membership.gauges())
        for limiter in self._limiters:
            out.update(limiter.gauges())
        out[stats.SUBSCRIPTIONS] = self._publisher.subscriptions if self._publisher else 0
        out[stats.UPTIME_MS] = monotonic_ms() - self._started_ms
        out[stats.UNDECLARED_COUNTERS] = len(stats.undeclared(out))
        for name, value in out.items():
            if not I64_MIN <= value <= I64_MAX:
                # A bug (counters go on the wire as i64): COUNTERS_GET must keep answering, so
                # clamp, and say so loudly (the fuzz harness fails on this counter).
                self.counters[stats.COUNTERS_OUT_OF_RANGE] += 1
                log.error("counter %s = %d is outside i64: reported clamped", name, value)
                out[name] = max(I64_MIN, min(I64_MAX, value))
        return out

    # ------------------------------------------------------------------ publications (XPUB)

    def _on_pub_readable(self) -> None:
        if self._pub is not None and self._publisher is not None:
            self._publisher.drain_subscriptions()

    def _publish(self, publication: Publication) -> None:
        if self._pub is None or self._publisher is None:
            return
        self._on_pub_readable()  # a subscription may have arrived without waking us yet
        if self._publisher.subscriptions <= 0:
            return
        try:
            for frame in publication_frames(publication, PUBLICATION_CHUNK_BYTES):
                self._publisher.send(frame)
                self.counters[stats.PUBLISHED_PUBLICATIONS] += 1
        except zmq.ZMQError:
            self.counters[stats.SEND_FAILURES] += 1
            self.counters[stats.SEND_FAILURE_PUB] += 1

    # ------------------------------------------------------------------ flooding

    def queue_flood(
        self, path: Path, delta: dict[str, Value], received: Sequence[Received] = ()
    ) -> None:
        """Collect a merged delta; everything collected in one socket pass goes out together.
        `received`: the peer publications it was merged from, if any (see `kvstore.forward`)."""
        if touches_members(delta):
            self._members_changed = True
        pending = self._floods.get(path)
        if pending is None:
            self._floods[path] = delta
        else:
            pending.update(delta)
        if received:
            self._flood_received.setdefault(path, []).extend(received)

    def flush_floods(self) -> None:
        self._persist()  # every merge path ends a pass here
        if self._members_changed:
            self._members_changed = False
            self.membership.refresh()
        if not self._floods:
            return
        floods = self._floods
        received = self._flood_received
        self._floods = {}
        self._flood_received = {}
        now = monotonic_ms()
        for path, delta in floods.items():
            self._publish(
                Publication(key_vals=delta, node_ids=[*path, self.name], timestamp_ms=wall_ms())
            )
            if self.peering is not None:
                self.peering.flood(path, delta, now, received.get(path, ()))
        self._arm_expiry()

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
            self.counters[stats.EXPIRED_KEY_VALS] += len(expired)
            self._publish(
                Publication(key_vals={}, expired_keys=expired, node_ids=[self.name])
            )
        self._arm_expiry()

    # ------------------------------------------------------------------ timers

    def _tick(self) -> None:
        assert self._loop is not None
        try:
            self._check_keys()
            self.membership.tick(monotonic_ms())
            if self.peering is not None:
                self.peering.tick(monotonic_ms())
            # Safety net for edge-triggered ZeroMQ descriptors: drain anything left behind.
            self._on_cmd_readable()
            self._on_pub_readable()
            for limiter in self._limiters:
                limiter.on_readable()
        finally:
            self._tick_handle = self._loop.call_later(TICK_S, self._tick)

    def request_sync(self, peer_name: str) -> bool:
        """Start an anti-entropy sync with one initialized peer now."""
        return self.peering is not None and self.peering.request_sync(peer_name)


# ---------------------------------------------------------------------- process entry point


# Cyclic-GC thresholds for a node process: the store holds millions of GC-tracked Value objects
# that never form reference cycles, and with the default thresholds (700, 10, 10) collections
# triggered by decoding publications cost ~20 % of the flood throughput and add latency spikes
# that grow with the store. Cycles (asyncio internals) are still collected, just less often.
GC_THRESHOLDS = (50_000, 20, 100)


def _recv_frames_from(
    sock: zmq.Socket[bytes], secured: bool
) -> tuple[list[bytes], str | None, int] | None:
    """`wire.recv_frames`, plus who sent the message: the ZAP User-Id (the sender's z85 public
    key; None unless `secured`) and the descriptor of its connection (for the idle reaper)."""
    try:
        frame = sock.recv(zmq.NOBLOCK, copy=False)
    except zmq.Again:
        return None
    fd = int(frame.get(zmq.SRCFD))
    frames = [frame.bytes]
    while frame.more:
        frame = sock.recv(zmq.NOBLOCK, copy=False)
        frames.append(frame.bytes)
    if not secured:
        return frames, None, fd
    try:
        user_id = frame.get("User-Id")
    except zmq.ZMQError:  # no such property: not authenticated by ZAP
        return frames, None, fd
    return frames, user_id if isinstance(user_id, str) else None, fd


def run_node(
    config: NodeConfig,
    security: NodeSecurity | None = None,
    on_ready: Callable[[KvStoreNode], None] | None = None,
    on_hangup: Callable[[KvStoreNode], None] | None = None,
    log_level: str = "info",
) -> int:
    """Run a node until SIGTERM/SIGINT; returns the process exit code. `on_ready` is called
    once the sockets are bound (`node.cmd_url` is then the bound address: a `*` port resolved);
    `on_hangup` on each SIGHUP, in the event loop (without it, SIGHUP is logged and ignored: it
    must not end a node)."""
    gc.set_threshold(*GC_THRESHOLDS)
    logging.basicConfig(
        level=log_level.upper(),
        stream=sys.stderr,
        format=f"%(asctime)s {config.name} %(levelname)s %(message)s",
    )
    prepare_process_limits(config)
    return_large_buffers()
    try:
        return asyncio.run(_serve(config, security, on_ready, on_hangup))
    except zmq.ZMQError as exc:
        print(f"error: node {config.name}: cannot bind: {exc}", file=sys.stderr)
        return 1
    except StorageError as exc:
        hint = ""
        if isinstance(exc, CorruptStateError):
            hint = " (--discard-corrupt-state starts it empty, moving the database aside)"
        print(f"error: node {config.name}: {exc}{hint}", file=sys.stderr)
        return 1


def _hangup(node: KvStoreNode, on_hangup: Callable[[KvStoreNode], None] | None) -> None:
    if node.peering is None:
        log.warning("SIGHUP before the node started: ignored")
    elif on_hangup is None:
        log.warning("SIGHUP: no configuration file to re-read (ignored)")
    else:
        on_hangup(node)


async def _serve(
    config: NodeConfig,
    security: NodeSecurity | None = None,
    on_ready: Callable[[KvStoreNode], None] | None = None,
    on_hangup: Callable[[KvStoreNode], None] | None = None,
) -> int:
    node = KvStoreNode(config, security=security)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, node.stop)
    loop.add_signal_handler(signal.SIGHUP, _hangup, node, on_hangup)
    try:
        try:
            await node.start()
        except CurveError as exc:
            print(f"error: node {config.name}: {exc}", file=sys.stderr)
            return 2
        gc.freeze()  # what exists after start-up lives as long as the process: never scan it
        print(
            f"node {node.name} ready cmd={node.cmd_url} pub={node.pub_url}",
            flush=True,
        )
        if on_ready is not None:
            on_ready(node)
        await node.wait_stopped()
    finally:
        node.close()
    log.info("node %s stopped", node.name)
    return 0


"""The node's peers: one DEALER per peer, full-sync sessions, flooding, anti-entropy.

Decisions come from the sans-I/O core (`kvstore.peers.PeerTable`: states, backoff, parallel-sync
cap, keys pending during a sync; `AntiEntropyTimer`; `kvstore.flood.FloodProtocol`: what to flood
to whom, as what bytes); this module moves the messages. Per peer:

- flooding: the one-way KEY_SETs `FloodProtocol` decides on, sent to the peers it names;
- full sync (on PEER_ADD, after a failure, and periodically with one random peer): a
  `SyncSession` (digest walk, then 3-way exchange on the differing buckets); replies are matched by
  a correlation-id frame, so a reply to an abandoned sync is recognised and dropped;
- failure (no reply within sync_timeout_ms since the last reply, a send failure, a refused or
  malformed reply): the peer goes back to IDLE with exponential backoff, and its socket is rebuilt
  so nothing queued for an unreachable peer is delivered late;
- liveness (`peer_timeout_ms`): a NODE_INFO probe when nothing was heard from the peer for a
  third of it; a peer silent for all of it is marked down (IDLE, a counter, a log line) and only
  probed, each probe on a fresh socket so unanswered ones never pile up, until it answers and
  is synced at once (`PeerTable.keepalives_due` / `mark_silent` / `heard_from` decide).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import random
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import zmq

from kvstore import stats, wire
from kvstore.config import NodeConfig
from kvstore.curve import CurveError, NodeSecurity
from kvstore.db import KvStoreDb
from kvstore.filters import KeyFilter
from kvstore.flood import FloodProtocol, Path, Send
from kvstore.forward import Received
from kvstore.gen.kvstore_thrift.ttypes import Command, PeerSpec, PeerState, Request, Value
from kvstore.membership import drop_readmissions
from kvstore.node_sync import ProtocolRefused, SyncProtocolError, SyncSession
from kvstore.peers import INITIALIZED, SYNCING, AntiEntropyTimer, PeerTable
from kvstore.protocol import INCOMPATIBLE_PROTOCOL
from kvstore.ratelimit import FloodLimiter
from kvstore.shell import DRAIN_LIMIT, monotonic_ms, wall_at, wall_ms
from kvstore.value import WireKeyVals

log = logging.getLogger("kvstore.node")

class FloodSink(Protocol):
    """What the peering needs from its node: a place to put deltas merged from sync replies."""

    def queue_flood(self, path: Path, delta: dict[str, Value]) -> None: ...

    def flush_floods(self) -> None: ...

    def on_peer_synced(self, peer: str) -> None: ...


# A peer's socket is renewed by `redial_unsynced` at most this often.
REDIAL_INTERVAL_MS = 1000


@dataclass(eq=False)
class PeerLink:
    name: str
    cmd_url: str
    pub_url: str
    sock: zmq.Socket[bytes] | None = None
    session: SyncSession | None = None
    sync_id: int | None = None  # PeerTable's id of the initial sync; None for anti-entropy
    last_activity_ms: int = 0
    server_key: bytes | None = None  # the peer's public key the socket was made with (secured)
    probes: set[bytes] = field(default_factory=set)  # keep-alive probes awaiting a reply
    answered: bool = False  # the current socket received a reply (its handshake went through)
    redialed_ms: int | None = None  # when `redial_unsynced` last renewed the socket


class Peering:
    def __init__(
        self,
        name: str,
        config: NodeConfig,
        db: KvStoreDb,
        counters: Counter[str],
        sink: FloodSink,
        context: zmq.Context[zmq.Socket[bytes]],
        loop: asyncio.AbstractEventLoop,
        rng: random.Random,
        security: NodeSecurity | None = None,
    ) -> None:
        self.name = name
        self.security = security
        self.config = config
        self.db = db
        self.counters = counters
        self._sink = sink
        self._context = context
        self._loop = loop
        self._rng = rng
        now = monotonic_ms()
        self.table = PeerTable(
            initial_backoff_ms=config.sync_initial_backoff_ms,
            max_backoff_ms=config.sync_max_backoff_ms,
            rng=rng,
            backoff_jitter=0.1,
            dead_after_ms=config.peer_timeout_ms,
        )
        self.links: dict[str, PeerLink] = {}
        self._requests: dict[bytes, str] = {}  # correlation id -> peer name
        self._probe_request = wire.encode(Request(cmd=Command.NODE_INFO))
        self._corr_ids = itertools.count(1)
        self.anti_entropy: AntiEntropyTimer | None = None
        if config.sync_interval_s > 0:
            interval_ms = max(1, int(config.sync_interval_s * 1000))
            self.anti_entropy = AntiEntropyTimer(
                interval_ms, rng, start_ms=now + int(interval_ms * rng.uniform(0.8, 1.2))
            )
        self.limiter: FloodLimiter | None = None
        if config.flood_msg_per_sec > 0:
            self.limiter = FloodLimiter(db, config.flood_msg_per_sec, config.flood_msg_burst, now)
        self.own_filter = config.leaf_filter  # this node is a leaf: what it keeps
        self.flooding = FloodProtocol(
            name, db, self.table, counters, max_clock_skew_ms=config.max_clock_skew_ms,
            limiter=self.limiter, own_filter=self.own_filter,
        )
        self._initial_sync_done = False

    def retune(self, config: NodeConfig) -> None:
        """Take a re-read configuration's live tunables (the peers are the node's to add and
        remove): read from `self.config` when used, or copied into the flood protocol."""
        self.config = config
        self.flooding.max_clock_skew_ms = config.max_clock_skew_ms
        self.table.set_dead_after(config.peer_timeout_ms)

    # ------------------------------------------------------------------ membership

    def add(self, name: str, cmd_url: str, pub_url: str) -> None:
        """Add a peer, or replace one whose URL changed (a same-URL re-add is a no-op)."""
        existing = self.links.get(name)
        if existing is not None:
            if existing.cmd_url == cmd_url:
                existing.pub_url = pub_url or existing.pub_url
                return
            self.remove(name)
        link = PeerLink(name=name, cmd_url=cmd_url, pub_url=pub_url)
        self._open_socket(link)
        self.links[name] = link
        self.table.add(name, monotonic_ms(), spec=cmd_url)
        self.counters[stats.PEER_ADDS] += 1
        log.info("peer %s added (%s)", name, cmd_url)
        self.start_due_syncs()

    def remove(self, name: str) -> None:
        link = self.links.pop(name, None)
        if link is None:
            return
        self._drop_session(link)
        self._close_socket(link)
        self.table.remove(name)
        self.counters[stats.PEER_DELS] += 1
        log.info("peer %s removed", name)
        self.update_initial_sync()

    def redial_unsynced(self, quiet_ms: int, only: str | None = None) -> list[str]:
        """Dial again, now, every peer (or just `only`) not synced yet whose socket never got a
        reply and sent nothing for `quiet_ms` (or that waits out a backoff), at most once per
        REDIAL_INTERVAL_MS each: a fresh socket and an initial sync. For a change that may make a
        peer that refused this node's key accept it (a refused CurveZMQ handshake leaves the
        socket's queued request undelivered until the sync timeout)."""
        now = monotonic_ms()
        names = [name for name, link in self.links.items()
                 if (only is None or name == only) and self.table[name].state != INITIALIZED
                 and not link.answered
                 and (link.redialed_ms is None or now - link.redialed_ms >= REDIAL_INTERVAL_MS)
                 and (link.session is None or now - link.last_activity_ms >= quiet_ms)]
        for name in names:
            link = self.links[name]
            if self.table[name].down:
                # A peer marked down is probed now, on a fresh socket, rather than made anew:
                # its answer is how it comes back (counted kvstore.peer_returned, then synced).
                self._probe_now(link, now)
                link.redialed_ms = now
                continue
            self.remove(name)
            try:
                self.add(name, link.cmd_url, link.pub_url)
            except (zmq.ZMQError, CurveError) as exc:
                log.error("peer %s: cannot reconnect: %s", name, exc)
                continue
            self.links[name].redialed_ms = now
        return names

    def close(self) -> None:
        for name in list(self.links):
            link = self.links.pop(name)
            self._drop_session(link)
            self._close_socket(link)

    def specs(self) -> dict[str, PeerSpec]:
        now_mono, now_wall = monotonic_ms(), wall_ms()
        out: dict[str, PeerSpec] = {}
        for name, link in self.links.items():
            peer = self.table[name]
            out[name] = PeerSpec(
                cmd_url=link.cmd_url,
                pub_url=link.pub_url,
                state=peer.state,
                state_since_ms=now_wall - (now_mono - peer.state_since_ms),
                flaps=peer.flaps,
                filters=None if peer.key_filter is None else peer.key_filter.to_wire(),
                protocol=None if peer.speaks is None else peer.speaks.protocol,
                version=None if peer.speaks is None else peer.speaks.version,
                refused=peer.refused,
            )
        return out

    @property
    def initial_sync_done(self) -> bool:
        return self._initial_sync_done

    def update_initial_sync(self) -> None:
        # Latched: a peer added (or failing) later does not make the node "not ready" again.
        if not self._initial_sync_done and self.table.initial_sync_done():
            self._initial_sync_done = True
            synced = sum(1 for p in self.table.peers() if p.state == INITIALIZED)
            # "Done" means no peer is still being waited for; a peer that failed is not synced.
            log.info("initial sync round over: %d of %d peer(s) synced", synced, len(self.links))

    def gauges(self) -> dict[str, int]:
        peers = self.table.peers()
        out: dict[str, int] = {
            stats.NUM_PEERS: len(peers),
            stats.PENDING_FULL_SYNC: sum(1 for p in peers if p.state != INITIALIZED),
            stats.INITIAL_SYNC_DONE: int(self._initial_sync_done),
            stats.FULL_SYNC_PARALLEL_CAP: self.table.parallel_syncs,
            stats.FULL_SYNC_RUNNING: sum(1 for s in self.links.values() if s.session),
            stats.NUM_PEERS_DOWN: self.table.down_count(),

            stats.NUM_PEERS_REFUSED: sum(1 for p in peers if p.refused is not None),
        }
        for state, state_name in PeerState._VALUES_TO_NAMES.items():
            out[stats.NUM_PEERS_IN(state_name)] = sum(1 for p in peers if p.state == state)
        if self.limiter is not None:
            out[stats.RATE_LIMIT_SUPPRESS] = self.limiter.suppressed
            out[stats.RATE_LIMIT_KEYS] = self.limiter.buffered_keys
            out[stats.RATE_LIMIT_BUFFERED_KEYS] = len(self.limiter.buffer)
        return out

    # ------------------------------------------------------------------ sockets

    def _open_socket(self, link: PeerLink) -> None:
        sock = self._context.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.SNDHWM, self.config.zmq_hwm)
        sock.setsockopt(zmq.RCVHWM, self.config.zmq_hwm)
        try:
            if self.security is not None:
                self.security.make_peer_client(sock, link.name)
                link.server_key = self.security.peer_key(link.name)
            sock.connect(link.cmd_url)
        except (zmq.ZMQError, CurveError):
            sock.close(linger=0)
            raise
        link.sock = sock
        link.answered = False
        name = link.name
        self._loop.add_reader(sock.fileno(), lambda: self.on_readable(name))

    def _close_socket(self, link: PeerLink) -> None:
        sock = link.sock
        link.sock = None
        link.probes.clear()  # their replies, if any, would come on the closed socket
        if sock is not None and not sock.closed:
            self._loop.remove_reader(sock.fileno())
            sock.close(linger=0)

    def _send(self, link: PeerLink, frames: list[bytes]) -> bool:
        sock = link.sock
        if sock is None:
            return False
        try:
            last = len(frames) - 1
            for i, frame in enumerate(frames):
                sock.send(frame, zmq.NOBLOCK | (zmq.SNDMORE if i < last else 0))
        except zmq.ZMQError as exc:
            self.counters[stats.SEND_FAILURES] += 1
            self.counters[stats.SEND_FAILURE_TO(link.name)] += 1
            # Something was lost on the way to this peer: resync it (after backoff).
            self._failed(link, f"send failed: {exc}")
            return False
        if link.session is not None:
            # A send can consume the socket's read edge (ZeroMQ descriptors are edge-triggered):
            # look for sync replies now rather than at the next tick.
            self._loop.call_soon(self.on_readable, link.name)
        return True

    def refresh_keys(self) -> None:
        """After the authorized keys changed: reconnect to every peer whose key changed (and
        resync it, as after any failure)."""
        if self.security is None:
            return
        for link in list(self.links.values()):
            if self.security.peer_key(link.name) == link.server_key:
                continue
            self.counters[stats.AUTH_PEER_KEY_CHANGES] += 1
            if link.sock is None:  # its key was missing: try again with the new one
                try:
                    self._open_socket(link)
                except (zmq.ZMQError, CurveError) as exc:
                    log.error("peer %s: cannot reconnect: %s", link.name, exc)
                    continue
            self._failed(link, "its key changed in the authorized-keys directory")

    def learn_filter(self, name: str, key_filter: KeyFilter | None) -> None:
        """A peer's sync message said what it keeps: its leaf filters (from now on it gets only
        its share), or none (it is not, or no longer, a leaf: it gets everything again)."""
        if name not in self.table:
            return
        peer = self.table[name]
        if peer.key_filter == key_filter:
            return
        peer.key_filter = key_filter
        if key_filter is None:
            log.info("peer %s is not a leaf (any more): it gets every key", name)
            return
        self.counters[stats.LEAF_PEER_FILTERS_LEARNED] += 1
        log.info("peer %s is a leaf: it gets only %s", name, key_filter.describe())

    def drain_all(self) -> None:
        for name in list(self.links):
            self.on_readable(name)

    # ------------------------------------------------------------------ flooding

    def flood(
        self,
        path: Path,
        delta: Mapping[str, Value],
        now: int,
        received: Sequence[Received] = (),
    ) -> None:
        """Send a merged delta on, as `FloodProtocol.flood` decides (`received`: the peer
        publications it was merged from)."""
        self._send_all(self.flooding.flood(path, delta, received, now, wall_at(now)))

    def _send_all(self, sends: list[Send]) -> None:
        counters = self.counters
        for send in sends:
            frames = [b"", send.payload]
            for name in send.targets:
                link = self.links.get(name)
                if link is not None and self._send(link, frames):
                    counters[stats.SENT_PUBLICATIONS] += 1
                    counters[stats.SENT_KEY_VALS] += send.key_count

    # ------------------------------------------------------------------ timers

    def tick(self, now: int) -> None:
        self._check_timeouts(now)
        self._check_liveness(now)
        self.start_due_syncs(now)
        self._maybe_anti_entropy(now)
        self._send_all(self.flooding.poll(now, wall_at(now)))
        self.drain_all()

    def _check_timeouts(self, now: int) -> None:
        timeout = self.config.sync_timeout_ms
        for link in list(self.links.values()):
            if link.session is not None and now - link.last_activity_ms > timeout:
                self.counters[stats.FULL_SYNC_TIMEOUTS] += 1
                self._failed(link, f"no reply within {timeout} ms")

    def _check_liveness(self, now: int) -> None:
        for peer in self.table.mark_silent(now):
            link = self.links[peer.name]
            self._drop_session(link)
            link.sync_id = None
            self.counters[stats.PEER_SILENT] += 1
            log.warning("peer %s: nothing heard from it for %d ms (keep-alive unanswered): "
                        "marked down; probing it every %d ms", peer.name,
                        now - peer.last_heard_ms, self.table.keepalive_ms)
            self._reset_socket(link)
            self.update_initial_sync()
        for peer in self.table.keepalives_due(now):
            link = self.links[peer.name]
            if peer.down:  # the last probe went unanswered: drop it with its socket
                self._probe_now(link, now)
                continue
            corr = next(self._corr_ids).to_bytes(8, "big")
            if self._send(link, [corr, b"", self._probe_request]):
                link.probes.add(corr)
                self.counters[stats.KEEPALIVE_SENT] += 1

    def _probe_now(self, link: PeerLink, now: int) -> None:
        self._reset_socket(link)
        self.table[link.name].last_probe_ms = now
        corr = next(self._corr_ids).to_bytes(8, "big")
        if self._send(link, [corr, b"", self._probe_request]):
            link.probes.add(corr)
            self.counters[stats.KEEPALIVE_SENT] += 1

    def _heard(self, link: PeerLink, now: int) -> None:
        if self.table.heard_from(link.name, now):
            self.counters[stats.PEER_RETURNED] += 1
            log.info("peer %s answers again: resyncing it", link.name)
            self.start_due_syncs(now)

    def resync_diverged(self, name: str) -> None:
        """The peer's flood showed our stores diverged: sync with it now (no backoff penalty),
        unless a sync with it is already running (it repairs the same)."""
        link = self.links.get(name)
        if link is None or link.session is not None:
            return
        if self.table.inconsistency(name, monotonic_ms()):
            self.counters[stats.FULL_SYNC_DIVERGENCE_RESYNCS] += 1
            log.info("peer %s: a flood showed our stores diverged; resyncing", name)
            self.start_due_syncs()

    def start_due_syncs(self, now: int | None = None) -> None:
        now = monotonic_ms() if now is None else now
        for peer in self.table.start_syncs(now):
            link = self.links[peer.name]
            if link.session is not None:  # an anti-entropy sync was running: replace it
                self._drop_session(link)
            link.sync_id = peer.sync_id
            reason = "initial" if peer.flaps == 0 and peer.errors == 0 else "resync"
            self._start_session(link, reason, now)

    def _maybe_anti_entropy(self, now: int) -> None:
        if self.anti_entropy is None:
            return
        candidates = [
            name
            for name, link in self.links.items()
            if link.session is None and self.table[name].state == INITIALIZED
        ]
        if self.table.in_flight() >= self.table.parallel_syncs:
            return
        chosen = self.anti_entropy.poll(now, candidates)
        if chosen is not None:
            self.counters[stats.ANTI_ENTROPY_SYNCS] += 1
            self.request_sync(chosen, now)

    def request_sync(self, name: str, now: int | None = None) -> bool:
        """Start an anti-entropy sync with an initialized peer now."""
        link = self.links.get(name)
        if link is None or link.session is not None or self.table[name].state != INITIALIZED:
            return False
        link.sync_id = None
        self._start_session(link, "anti_entropy", monotonic_ms() if now is None else now)
        return True

    # ------------------------------------------------------------------ sync sessions

    def _start_session(self, link: PeerLink, reason: str, now: int) -> None:
        link.session = SyncSession(
            link.name,
            self.name,
            self.db,
            started_ms=now,
            buckets_per_request=self.config.sync_buckets_per_request,
            reason=reason,
            own_filter=self.own_filter,
            peer_filter=self.table[link.name].key_filter,
        )
        link.last_activity_ms = now
        self.counters[stats.FULL_SYNC_STARTED] += 1
        log.debug("sync with %s started (%s)", link.name, reason)
        self._advance(link, now)

    def _advance(self, link: PeerLink, now: int) -> None:
        session = link.session
        assert session is not None
        for phase, request in session.next_requests(now):
            corr = next(self._corr_ids).to_bytes(8, "big")
            if not self._send(link, [corr, b"", wire.encode(request)]):
                return  # _failed already ran
            session.sent(corr, phase)
            self._requests[corr] = link.name
            link.last_activity_ms = now
        if session.finished:
            self._finalize(link, now)

    def _drop_session(self, link: PeerLink) -> None:
        if link.session is not None:
            for corr in link.session.in_flight:
                self._requests.pop(corr, None)
            link.session = None

    def on_readable(self, name: str) -> None:
        link = self.links.get(name)
        if link is None or link.sock is None:
            return
        sock = link.sock
        handled = 0
        try:
            while handled < DRAIN_LIMIT and link.sock is sock:
                frames = wire.recv_frames(sock)
                if frames is None:
                    break
                handled += 1
                link.answered = True
                self._handle_reply(link, frames)
        finally:
            self._sink.flush_floods()
        if handled >= DRAIN_LIMIT:
            self._loop.call_soon(self.on_readable, name)

    def _handle_reply(self, link: PeerLink, frames: list[bytes]) -> None:
        if len(frames) != 3 or frames[1] != b"":
            self.counters[stats.FULL_SYNC_BAD_REPLIES] += 1
            return
        corr = frames[0]
        if corr in link.probes:  # any answer to a probe shows the peer alive
            link.probes.discard(corr)
            self.counters[stats.KEEPALIVE_REPLIES] += 1
            self._heard(link, monotonic_ms())
            return
        owner = self._requests.pop(corr, None)
        session = link.session
        if owner != link.name or session is None or corr not in session.in_flight:
            self.counters[stats.FULL_SYNC_STALE_REPLIES] += 1
            return
        now = monotonic_ms()
        link.last_activity_ms = now
        self._heard(link, now)
        try:
            response = wire.decode_response(frames[2])
            if response.error is not None:
                if response.error.code == INCOMPATIBLE_PROTOCOL:
                    raise ProtocolRefused(f"peer {link.name} refused us: {response.error.message}")
                raise SyncProtocolError(
                    f"refused: {response.error.code} {response.error.message}"
                )
            if session.in_flight[corr] == SyncSession.DIGEST:
                session.on_digest_reply(corr, response)
                self._learn_speaks(link.name, session)
                self.learn_filter(link.name, session.peer_filter)
            else:
                publication = session.on_dump_reply(corr, response)
                key_vals = wire.decoded_key_vals(publication)
                if key_vals:
                    self.flooding.charge_transit(key_vals, publication.timestamp_ms, wall_ms())
                    self.flooding.admit(key_vals)  # a leaf keeps only its share
                    if key_vals:  # unless all of it expired on the way
                        self._merge_reply(link, key_vals, now)
        except ProtocolRefused as exc:
            self._learn_speaks(link.name, session)
            self._refuse(link, str(exc))
            return
        except (wire.DecodeError, SyncProtocolError, ValueError) as exc:
            self.counters[stats.FULL_SYNC_BAD_REPLIES] += 1
            self._failed(link, str(exc))
            return
        self._advance(link, now)

    def _learn_speaks(self, name: str, session: SyncSession) -> None:
        if session.peer_speaks is not None and name in self.table:
            self.table[name].speaks = session.peer_speaks

    def _refuse(self, link: PeerLink, why: str) -> None:
        """No protocol in common: the peer is refused (IDLE, no floods, PEER_DUMP says why) and
        retried with backoff, as after a failure (it may be upgraded or downgraded in place)."""
        self.counters[stats.PEER_PROTOCOL_REFUSED] += 1
        self._drop_session(link)
        link.sync_id = None
        self.table.refuse(link.name, why, monotonic_ms())
        backoff = self.table[link.name].backoff.current_ms
        log.error("peer %s refused: %s; retry in ~%d ms", link.name, why, backoff)
        self.update_initial_sync()

    def _held_bytes(self, key: str) -> bytes | None:
        value = self.db.get([key], monotonic_ms()).get(key)
        return value.value if value is not None else None

    def _merge_reply(self, link: PeerLink, key_vals: WireKeyVals, now: int) -> None:
        if self.security is not None:
            self.counters[stats.MEMBER_READMISSION_DROPPED] += len(
                drop_readmissions(self._held_bytes, key_vals))
        result = self.db.merge_decoded(key_vals, now)
        self.counters[stats.FULL_SYNC_RECEIVED_KEY_VALS] += len(key_vals)
        # No divergence resync here: this sync is what repairs it.
        self.flooding.merged((link.name,), result)
        if result.delta:
            # Flooded on to everyone but the peer it came from.
            self._sink.queue_flood((link.name,), result.delta)

    def _finalize(self, link: PeerLink, now: int) -> None:
        session = link.session
        assert session is not None
        pending: set[str] = set()
        if link.sync_id is not None:
            got = self.table.sync_succeeded(link.name, link.sync_id, now)
            if got is None:  # the table moved on (peer re-added or failed): abandon
                self._drop_session(link)
                return
            pending = got
        keys = session.tobe_updated | pending
        sends = self.flooding.finalize(link.name, keys, now, wall_at(now))
        self._send_all(sends)
        sent = sum(send.key_count for send in sends)
        if link.session is not session:
            return  # a send failed: the peer went back to IDLE
        link.session = None
        link.sync_id = None
        duration = now - session.started_ms
        counters = self.counters
        counters[stats.FULL_SYNC_SUCCESS] += 1
        self._sink.on_peer_synced(link.name)
        counters[stats.FULL_SYNC_SENT_KEY_VALS] += sent
        counters[stats.FULL_SYNC_DURATION_MS_SUM] += duration
        counters[stats.FULL_SYNC_DURATION_MS_LAST] = duration
        counters[stats.FULL_SYNC_DIFFERING_BUCKETS] += session.differing_buckets
        if session.reason == "anti_entropy" and session.keys_received + sent > 0:
            counters[stats.ANTI_ENTROPY_REPAIRS] += 1
        log.info(
            "sync with %s done (%s) in %d ms: %d bucket(s) differed, %d key(s) in, %d out",
            link.name,
            session.reason,
            duration,
            session.differing_buckets,
            session.keys_received,
            sent,
        )
        self.update_initial_sync()
        self.start_due_syncs(now)

    def _failed(self, link: PeerLink, why: str) -> None:
        now = monotonic_ms()
        had_session = link.session is not None
        self._drop_session(link)
        link.sync_id = None
        self.table.sync_failed(link.name, now)
        self.counters[stats.FULL_SYNC_FAILURES if had_session else stats.PEER_FAILURES] += 1
        backoff = self.table[link.name].backoff.current_ms
        log.warning("peer %s: %s; retry in ~%d ms", link.name, why, backoff)
        self._reset_socket(link)
        self.update_initial_sync()

    def _reset_socket(self, link: PeerLink) -> None:
        """A fresh socket drops whatever was queued for an unreachable peer; the next sync
        repairs what it missed."""
        if link.sock is not None:
            self._close_socket(link)
            try:
                self._open_socket(link)
            except (zmq.ZMQError, CurveError) as exc:
                log.error("peer %s: cannot reconnect: %s", link.name, exc)


__all__ = ["SYNCING", "PeerLink", "Peering"]

"""A seeded, deterministic simulation of the KvStore core under a hostile network.

N in-memory `KvStoreDb`s exchange messages through a simulated network that drops, duplicates,
reorders (random delays), holds (partitions that queue, as TCP does, and deliver on heal) and
cuts (partitions that drop), on a simulated clock, with wall clocks skewed per node. Everything
derives from one seed: `simulate(seed)` always plays the same scenario and returns the same
result, so a failing seed is a regression test as it stands.

What runs is the core the node runs: the flood protocol `kvstore.flood.FloodProtocol` (loop
detection, time in transit, flood targets, hop TTLs, the finalize step) on the KEY_SET bytes it
encodes, `merge_decoded`, `dump_difference`, `digest_children`, `expire` and the full-sync step
machine `SyncSession`. What sits in the node shell (`kvstore/node_peers.py`) is re-enacted: a
sync step unanswered for `sync_timeout_ms` failing the sync and dropping what was queued for that
peer (the node rebuilds its socket), anti-entropy with one random peer per interval; every peer
counts as initialized. Not simulated: the rate limiter, forwarding as received (a byte-level
optimisation with the same content), process crashes.

Leaf nodes (`kvstore.filters`): a `Simulation` may be given leaf filters per node. A leaf floods,
merges and syncs through the same core with its filter (`FloodProtocol(own_filter=...)`,
`SyncSession(own_filter=...)`, `node_sync.digest_reply`, `dump_difference(key_filter=...)`), and
its peers know its filter from the start, as they learn it from the leaf's first sync. The scale
benchmark (tools/bench/sim_scale.py) runs such topologies on a fault-free network
(`fault_free`), unchecked.

Checked (`kvmesh.chaos.model`, the same checker as the real chaos run): no key merged anywhere so
that it would live past its latest legitimate expiry by more than the clock bound; after healing
and a few reliable anti-entropy rounds, all root digests equal and every store holding the merge
winner of every acknowledged write and no key past its TTL.
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kvmesh.chaos.model import KeyExpectation, Write, WriteLog, check_store, ttl_overrun_ms
from kvstore import wire
from kvstore.db import KvStoreDb
from kvstore.filters import KeyFilter, filter_from_wire
from kvstore.flood import FloodProtocol, Send
from kvstore.gen.kvstore_thrift.ttypes import (
    Command,
    KeyFilters,
    Publication,
    Request,
    Response,
)
from kvstore.node_sync import SyncSession, answered_share, digest_reply
from kvstore.peers import PeerTable
from kvstore.value import TTL_INFINITY, Value, WireKeyVals

__all__ = ["Scenario", "SimResult", "Simulation", "fault_free", "scenario_of", "simulate"]

DECREMENT_MS = 1
THRESHOLD_MS = 500
SYNC_TIMEOUT_MS = 2000
PRESENT_MARGIN_MS = 1500


@dataclass(frozen=True)
class Scenario:
    seed: int
    nodes: int
    links: tuple[tuple[int, int], ...]
    duration_ms: int
    writes: int
    drop: float
    duplicate: float
    max_delay_ms: int
    skew_ms: int
    partitions: tuple[tuple[int, int, frozenset[int], bool], ...]  # start, end, side, hold
    sync_interval_ms: int


@dataclass
class SimResult:
    seed: int
    problems: list[str] = field(default_factory=list)
    acknowledged: int = 0
    messages: int = 0
    converged_after_syncs: int | None = None

    @property
    def ok(self) -> bool:
        return not self.problems


def scenario_of(seed: int) -> Scenario:
    """The scenario a seed stands for."""
    rng = random.Random(seed)
    n = rng.randint(2, 6)
    ring = [(i, (i + 1) % n) for i in range(n)] if n > 2 else [(0, 1)]
    links = {tuple(sorted(pair)) for pair in ring}
    for _ in range(rng.randint(0, n)):
        a, b = rng.sample(range(n), 2)
        links.add(tuple(sorted((a, b))))
    duration = rng.randint(5_000, 30_000)
    partitions = []
    for _ in range(rng.randint(0, 3)):
        start = rng.randint(0, duration - 1000)
        end = min(duration, start + rng.randint(500, 12_000))
        side = frozenset(rng.sample(range(n), rng.randint(1, max(1, n - 1))))
        partitions.append((start, end, side, rng.random() < 0.5))
    return Scenario(
        seed=seed, nodes=n, links=tuple(sorted(links)),  # type: ignore[arg-type]
        duration_ms=duration, writes=rng.randint(10, 80),
        drop=rng.choice((0.0, 0.05, 0.2, 0.4)), duplicate=rng.choice((0.0, 0.05, 0.2)),
        max_delay_ms=rng.choice((5, 50, 500, 3000)), skew_ms=rng.choice((0, 0, 20, 300)),
        partitions=tuple(partitions), sync_interval_ms=rng.choice((1000, 3000, 10_000)))


def fault_free(nodes: int, links: tuple[tuple[int, int], ...], seed: int = 0) -> Scenario:
    """A scenario of `nodes` over `links` with a perfect network: nothing dropped, duplicated,
    held or skewed, every message delivered in the order sent (so a flood goes breadth first)."""
    return Scenario(seed=seed, nodes=nodes, links=links, duration_ms=0, writes=0, drop=0.0,
                    duplicate=0.0, max_delay_ms=0, skew_ms=0, partitions=(),
                    sync_interval_ms=0)


def _copy(value: Value) -> Value:
    """What the receiver decodes: a fresh object (the wire never shares them)."""
    return Value(value.version, value.originator_id, value.value, value.ttl_ms,
                 value.ttl_version, value.hash)


@dataclass
class _Session:
    peer: int
    session: SyncSession
    last_ms: int
    corr: set[int] = field(default_factory=set)


class Simulation:
    """The simulated nodes and network of a scenario. `leaf_filters`: node index -> its leaf
    filter (a leaf has one peer); `checked`: keep the write log and check TTLs as merges happen
    (off for the scale benchmark, which writes thousands of keys and checks nothing)."""

    def __init__(self, sc: Scenario, *, leaf_filters: Mapping[int, KeyFilter] | None = None,
                 checked: bool = True) -> None:
        self.sc = sc
        self.leaf_filters = dict(leaf_filters or {})
        self.checked = checked
        self.rng = random.Random(sc.seed ^ 0x5EED)
        self.now = 0
        self.queue: list[tuple[int, int, Callable[..., None], tuple[Any, ...]]] = []
        self.seq = itertools.count()
        self.names = [f"n{i}" for i in range(sc.nodes)]
        self.dbs = [KvStoreDb(name, ttl_decrement_ms=DECREMENT_MS,
                              ttl_threshold_ms=THRESHOLD_MS) for name in self.names]
        self.peers: list[list[int]] = [[] for _ in range(sc.nodes)]
        for a, b in sc.links:
            self.peers[a].append(b)
            self.peers[b].append(a)
        self.index = {name: i for i, name in enumerate(self.names)}
        self.flooding = [self._flood_core(i) for i in range(sc.nodes)]
        self.offsets = [self.rng.randint(-sc.skew_ms, sc.skew_ms) for _ in range(sc.nodes)]
        self.bound_ms = max(self.offsets) - min(self.offsets) + 1
        self.sessions: dict[tuple[int, int], _Session] = {}
        self.corr_ids = itertools.count(1)
        self.held: dict[tuple[int, int], list[tuple[Callable[..., None], tuple[Any, ...]]]] = {}
        self.generation: dict[tuple[int, int], int] = {}  # bumped when a link's queue is dropped
        self.log = WriteLog()
        self.problems: list[str] = []
        self.messages = 0
        self.reliable = False
        self._expectations: dict[str, KeyExpectation] = {}
        self._log_changed = False  # the expectations are recomputed only when needed

    # -------------------------------------------------------------- clock and network

    def at(self, when: int, fn: Callable[..., None], *args: Any) -> None:
        heapq.heappush(self.queue, (when, next(self.seq), fn, args))

    def wall(self, node: int) -> int:
        return self.now + self.offsets[node]

    def cut(self, a: int, b: int) -> tuple[bool, bool] | None:
        """(held?) if a partition separates a and b now, else None."""
        if self.reliable:
            return None
        for start, end, side, hold in self.sc.partitions:
            if start <= self.now < end and ((a in side) != (b in side)):
                return (hold, True)
        return None

    def send(self, src: int, dst: int, fn: Callable[..., None], *args: Any) -> None:
        self.messages += 1
        blocked = self.cut(src, dst)
        if blocked is not None:
            if blocked[0]:
                self.held.setdefault((src, dst), []).append((fn, args))
            return
        if not self.reliable and self.rng.random() < self.sc.drop:
            return
        copies = 2 if not self.reliable and self.rng.random() < self.sc.duplicate else 1
        generation = self.generation.get((src, dst), 0)
        for _ in range(copies):
            delay = self.rng.randint(0, 5 if self.reliable else self.sc.max_delay_ms)
            self.at(self.now + delay, self._deliver, src, dst, generation, fn, args)

    def _deliver(self, src: int, dst: int, generation: int, fn: Callable[..., None],
                 args: tuple[Any, ...]) -> None:
        if generation != self.generation.get((src, dst), 0):
            return  # queued on a socket that has since been rebuilt
        fn(*args)

    def release_held(self) -> None:
        for (src, dst), messages in list(self.held.items()):
            if self.cut(src, dst) is None:
                del self.held[(src, dst)]
                for fn, args in messages:
                    self.send(src, dst, fn, *args)

    # -------------------------------------------------------------- flooding

    def _flood_core(self, node: int) -> FloodProtocol:
        """The node's flood protocol with every peer initialized, as a node's are once its
        rounds of full syncs are done (a simulated peer never fails a sync for good: the network
        does the failing). Round by round: the peer table starts `parallel_syncs_start` at a
        time."""
        table = PeerTable(initial_backoff_ms=100, max_backoff_ms=1000, rng=random.Random(node))
        for peer in self.peers[node]:
            table.add(self.names[peer], 0)
            table[self.names[peer]].key_filter = self.leaf_filters.get(peer)
        while started := table.start_syncs(0):
            for peer_state in started:
                table.sync_succeeded(peer_state.name, peer_state.sync_id, 0)
        return FloodProtocol(self.names[node], self.dbs[node], table, Counter(),
                             max_clock_skew_ms=1000, own_filter=self.leaf_filters.get(node))

    def merged(self, node: int, key_vals: WireKeyVals, path: tuple[str, ...]) -> dict[str, Value]:
        """Merge at `node` and flood the delta on, as the node does; returns the delta."""
        delta = self.dbs[node].merge_decoded(key_vals, self.now).delta
        if delta:
            self._flooded(node, path, delta)
        return delta

    def _flooded(self, node: int, path: tuple[str, ...], delta: dict[str, Value]) -> None:
        self._check_ttl(node, delta)
        self._send_all(node, self.flooding[node].flood(path, delta, (), self.now,
                                                         self.wall(node)))

    def _send_all(self, node: int, sends: list[Send]) -> None:
        for send in sends:
            for target in send.targets:
                peer = self.index[target]
                self.send(node, peer, self.on_flood, peer, send.payload)

    def on_flood(self, node: int, payload: bytes) -> None:
        params = wire.decode_request(payload).key_set  # a duplicate decodes afresh
        assert params is not None
        intake = self.flooding[node].receive(params, self.wall(node))
        if not intake.looped:
            self.merged(node, intake.key_vals, intake.path)

    def _check_ttl(self, node: int, delta: dict[str, Value]) -> None:
        finite = [key for key, value in delta.items() if value.ttl_ms != TTL_INFINITY]
        if not finite or not self.checked:
            return
        if self._log_changed:
            self._expectations = self.log.expectations()
            self._log_changed = False
        for key, stored in self.dbs[node].get(finite, self.now).items():
            exp = self._expectations.get(key)
            if exp is None or stored.ttl_ms == TTL_INFINITY:
                continue
            over = ttl_overrun_ms(exp, self.now, stored.ttl_ms)
            if over > self.bound_ms:
                self.problems.append(f"t={self.now} {self.names[node]}: {key} merged to live "
                                     f"{over} ms past its TTL (bound {self.bound_ms} ms)")

    # -------------------------------------------------------------- full sync

    def start_sync(self, node: int, peer: int) -> None:
        if (node, peer) in self.sessions:
            return
        session = SyncSession(self.names[peer], self.names[node], self.dbs[node],
                              started_ms=self.now, buckets_per_request=4096,
                              own_filter=self.leaf_filters.get(node),
                              peer_filter=self.flooding[node].table[self.names[peer]].key_filter)
        self.sessions[(node, peer)] = _Session(peer, session, self.now)
        self._advance(node, peer)

    def _advance(self, node: int, peer: int) -> None:
        state = self.sessions.get((node, peer))
        if state is None:
            return
        for phase, request in state.session.next_requests(self.now):
            corr = next(self.corr_ids)
            state.session.sent(corr.to_bytes(8, "big"), phase)
            state.corr.add(corr)
            self.send(node, peer, self.on_request, peer, node, corr, request)
        if state.session.finished:
            self._finalize(node, peer, state)

    def on_request(self, node: int, requester: int, corr: int, request: Request) -> None:
        db = self.dbs[node]
        own = self.leaf_filters.get(node)
        if request.cmd == Command.DIGEST_GET:
            assert request.digest is not None
            requested = self._learn_filter(node, requester, request.digest.filters)
            response = Response(digest=digest_reply(db, own, requested,
                                                    request.digest.node_ids or []))
        else:
            params = request.key_dump
            assert params is not None and params.key_val_hashes is not None
            requested = self._learn_filter(node, requester, params.filters)
            hashes = {k: _copy(v) for k, v in params.key_val_hashes.items()}
            send, want = db.dump_difference(hashes, self.now, buckets=params.buckets,
                                            key_filter=answered_share(own, requested))
            response = Response(publication=Publication(
                key_vals=send, tobe_updated_keys=want, timestamp_ms=self.wall(node)))
        self.send(node, requester, self.on_reply, requester, node, corr, response)

    def _learn_filter(self, node: int, peer: int, filters: KeyFilters | None) -> KeyFilter | None:
        """A sync request's filters: `node` floods `peer` only its share from now on."""
        key_filter = filter_from_wire(filters)
        self.flooding[node].table[self.names[peer]].key_filter = key_filter
        return key_filter

    def on_reply(self, node: int, peer: int, corr: int, response: Response) -> None:
        state = self.sessions.get((node, peer))
        if state is None or corr not in state.corr:
            return  # stale (the sync failed or the reply is a duplicate)
        state.corr.discard(corr)
        state.last_ms = self.now
        key = corr.to_bytes(8, "big")
        if response.digest is not None:
            state.session.on_digest_reply(key, response)
            self.flooding[node].table[self.names[peer]].key_filter = state.session.peer_filter
        else:
            publication = state.session.on_dump_reply(key, response)
            key_vals = WireKeyVals({k: _copy(v) for k, v in (publication.key_vals or {}).items()})
            self.flooding[node].charge_transit(key_vals, publication.timestamp_ms,
                                               self.wall(node))
            self.flooding[node].admit(key_vals)  # a leaf keeps only its share
            self.merged(node, key_vals, (self.names[peer],))
        self._advance(node, peer)

    def _finalize(self, node: int, peer: int, state: _Session) -> None:
        del self.sessions[(node, peer)]
        self._send_all(node, self.flooding[node].finalize(
            self.names[peer], state.session.tobe_updated, self.now, self.wall(node)))

    def check_timeouts(self) -> None:
        # Also the nodes' expiry timers (reads and merges already treat an expired key as
        # absent; collecting it matters for the digests).
        for db in self.dbs:
            db.expire(self.now)
        for (node, peer), state in list(self.sessions.items()):
            if self.now - state.last_ms > SYNC_TIMEOUT_MS:
                del self.sessions[(node, peer)]
                # The node rebuilds its socket to the peer: what was queued is gone.
                self.generation[(node, peer)] = self.generation.get((node, peer), 0) + 1
                self.held.pop((node, peer), None)

    # -------------------------------------------------------------- workload

    def write(self, node: int, kv: dict[str, Value]) -> None:
        """A client's KEY_SET at `node`: merged there and flooded on."""
        if self.checked:
            intended = {k: _copy(v) for k, v in kv.items()}
            self._note(intended)  # the log must know a key before a store can hold it
        db = self.dbs[node]
        result = db.merge(kv, self.now)
        if self.checked:
            self.log.extend((Write(k, v, self.now, self.now, acked=True)
                             for k, v in intended.items() if k not in result.no_merge), token=0)
            self._log_changed = True
        if result.delta:
            self._flooded(node, (), result.delta)

    def _note(self, intended: dict[str, Value]) -> None:
        self.log.begin(0, (Write(k, v, self.now, self.now, acked=False)
                           for k, v in intended.items()))
        self._log_changed = True

    def workload(self) -> list[tuple[int, int, dict[str, Value]]]:
        rng = random.Random(self.sc.seed ^ 0xC0FFEE)
        finite: dict[str, int] = {}
        ops: list[tuple[int, int, dict[str, Value]]] = []
        for op in range(self.sc.writes):
            when = rng.randint(0, self.sc.duration_ms)
            node = rng.randrange(self.sc.nodes)
            writer = f"w{rng.randrange(3)}"
            roll = rng.random()
            if roll < 0.35:
                kv = {f"shared/{rng.randrange(4)}": Value(rng.randint(1, 4), writer,
                                                          f"{op}".encode(), TTL_INFINITY, 0)}
            elif roll < 0.6:
                kv = {f"own/{op}": Value(1, writer, b"o", TTL_INFINITY, 0)}
            elif roll < 0.85 or not finite:
                key = f"ttl/{op}"
                finite[key] = 0
                kv = {key: Value(1, "w", b"t", rng.randint(600, 8000), 0)}
            else:
                key = rng.choice(sorted(finite))
                finite[key] += 1
                kv = {key: Value(1, "w", None, rng.randint(600, 8000), finite[key])}
            ops.append((when, node, kv))
        return ops

    # -------------------------------------------------------------- run

    def run(self) -> SimResult:
        sc = self.sc
        for when, node, kv in self.workload():
            self.at(when, self.write, node, kv)
        for _start, end, _side, _hold in sc.partitions:
            self.at(end, self.release_held)
        sync_rng = random.Random(sc.seed ^ 0xA5A5)
        for node in range(sc.nodes):
            t = sync_rng.randint(0, sc.sync_interval_ms)
            while t < sc.duration_ms:
                self.at(t, self._anti_entropy, node, sync_rng.randrange(1 << 30))
                t += int(sc.sync_interval_ms * sync_rng.uniform(0.8, 1.2))
        for t in range(0, sc.duration_ms + SYNC_TIMEOUT_MS * 2, 250):
            self.at(t, self.check_timeouts)
        self._run_until(sc.duration_ms + SYNC_TIMEOUT_MS * 2)
        # Heal: a reliable network, partitions over, then full syncs until all agree.
        self.reliable = True
        self.release_held()
        result = SimResult(sc.seed, messages=self.messages,
                           acknowledged=self.log.acknowledged())
        for attempt in range(1, 4 * sc.nodes + 1):
            for node in range(sc.nodes):
                for peer in self.peers[node]:
                    self.start_sync(node, peer)
            self._run_until(self.now + 200)
            self.sessions.clear()
            for db in self.dbs:
                db.expire(self.now)
            if len({db.root_digest() for db in self.dbs}) == 1:
                result.converged_after_syncs = attempt
                break
        else:
            self.problems.append("stores did not converge after healing")
        expected = self.log.expectations()
        for name, db in zip(self.names, self.dbs, strict=True):
            self.problems += check_store(name, db.dump(self.now), expected, self.now,
                                         present_margin_ms=PRESENT_MARGIN_MS,
                                         bound_ms=self.bound_ms)
        result.problems = self.problems
        return result

    def _anti_entropy(self, node: int, pick: int) -> None:
        peers = self.peers[node]
        if peers:
            self.start_sync(node, peers[pick % len(peers)])

    def settle(self) -> None:
        """Deliver messages until none is left (every event scheduled so far, and what they
        cause; with no run() timers this ends once the network is quiet)."""
        while self.queue:
            self._run_until(self.queue[0][0])

    def _run_until(self, end: int) -> None:
        while self.queue and self.queue[0][0] <= end:
            when, _seq, fn, args = heapq.heappop(self.queue)
            self.now = max(self.now, when)
            fn(*args)
        self.now = max(self.now, end)


def simulate(seed: int) -> SimResult:
    """Play the scenario of `seed` (deterministic) and check it."""
    return Simulation(scenario_of(seed)).run()

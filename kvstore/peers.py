"""Sans-I/O peer bookkeeping: per-peer sync state machine, backoff, parallel-sync cap, anti-entropy.

The node moves messages; this module decides *when* and *with whom*:

- `PeerTable.start_syncs(now)` names the IDLE peers to send a full-sync request to now (their
  backoff allows it and the parallel-sync cap has room) and moves them to SYNCING.
- The node reports the outcome: `sync_succeeded` (-> INITIALIZED, returns the keys flooded while
  the sync was in flight, to add to the finalize step), `sync_failed` (-> IDLE with exponential
  backoff; the node times out each sync step itself, since a long sync that keeps getting replies
  must not be cut off), `inconsistency` (-> IDLE without backoff penalty: a flood showed the two
  stores diverged, `kvstore.value.diverged_from_sender`).
- `PeerTable.flood_targets(keys)` says which peers get a flooded publication (INITIALIZED ones)
  and remembers the keys for peers whose sync is in flight.
- `AntiEntropyTimer` picks one random peer every interval (±20 % jitter) for a periodic sync.
- Liveness (`dead_after_ms` > 0): a peer is probed (`keepalives_due`: the node sends it a cheap
  request) when nothing was heard from it for a third of `dead_after_ms`; `heard_from` records
  any reply. A peer not heard from for `dead_after_ms` is marked *down* by `mark_silent`
  (-> IDLE with backoff, whatever it was doing): a down peer is not synced, only probed, until
  it answers again, when `heard_from` clears its backoff so that it is synced at once. Floods
  are one-way, so without probes a dead peer would stay INITIALIZED until the next sync with
  it, minutes later (and forever with anti-entropy off).

State machine (events on the left, PeerState values from the IDL)::

    IDLE --start--> SYNCING --success--> INITIALIZED
      ^                |  \\--failure / timeout / inconsistency--> IDLE
      \\-- failure / inconsistency (from INITIALIZED) --------------/
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final

from kvstore.filters import KeyFilter
from kvstore.gen.kvstore_thrift.ttypes import PeerState
from kvstore.protocol import Speaks

__all__ = [
    "IDLE",
    "INITIALIZED",
    "SYNCING",
    "AntiEntropyTimer",
    "Backoff",
    "Peer",
    "PeerState",
    "PeerTable",
]

IDLE: Final[int] = PeerState.IDLE
SYNCING: Final[int] = PeerState.SYNCING
INITIALIZED: Final[int] = PeerState.INITIALIZED


class Backoff:
    """Exponential backoff: 0 until the first error, then initial, doubling up to max.

    Deterministic by default; pass `rng` and `jitter` (e.g. 0.1 for ±10 %) to spread retries.
    """

    __slots__ = ("_jitter", "_rng", "current_ms", "initial_ms", "max_ms", "retry_at_ms")

    def __init__(
        self,
        initial_ms: int,
        max_ms: int,
        *,
        rng: random.Random | None = None,
        jitter: float = 0.0,
    ) -> None:
        if initial_ms <= 0 or max_ms < initial_ms:
            raise ValueError(f"backoff needs 0 < initial <= max, got {initial_ms}, {max_ms}")
        if not 0.0 <= jitter < 1.0 or (jitter and rng is None):
            raise ValueError("backoff jitter must be in [0, 1) and needs an rng")
        self.initial_ms = initial_ms
        self.max_ms = max_ms
        self.current_ms = 0
        self.retry_at_ms: int | None = None
        self._rng = rng
        self._jitter = jitter

    def report_error(self, now_ms: int) -> None:
        self.current_ms = (
            self.initial_ms if self.current_ms == 0 else min(2 * self.current_ms, self.max_ms)
        )
        wait = self.current_ms
        if self._jitter and self._rng is not None:
            wait = round(wait * self._rng.uniform(1.0 - self._jitter, 1.0 + self._jitter))
        self.retry_at_ms = now_ms + wait

    def report_success(self) -> None:
        self.current_ms = 0
        self.retry_at_ms = None

    def can_try(self, now_ms: int) -> bool:
        return self.retry_at_ms is None or now_ms >= self.retry_at_ms


@dataclass(eq=False)
class Peer:
    """What the table knows about one peer. `spec` is opaque to the core (the node's PeerSpec)."""

    name: str
    backoff: Backoff
    spec: object = None
    state: int = IDLE
    state_since_ms: int = 0
    flaps: int = 0  # times the peer fell back to IDLE after having been INITIALIZED
    sync_id: int = 0  # bumped on every sync start; a reply for an older id is stale
    sync_started_ms: int = 0
    errors: int = 0
    # Keys flooded while this peer's sync was in flight: sent with its finalize step.
    pending_keys: set[str] = field(default_factory=set)
    # The peer's key filters once known (it is a leaf: `kvstore.filters`); None: it takes all.
    key_filter: KeyFilter | None = None
    # Liveness: when a reply was last heard from it, when it was last probed, and whether it is
    # marked down (silent for dead_after_ms: not synced, only probed, until it answers).
    last_heard_ms: int = 0
    last_probe_ms: int = 0
    down: bool = False

    # What the peer said it speaks in its last sync hello (`kvstore.protocol`); None: not yet.
    speaks: Speaks | None = None
    # Why the peering is refused (an incompatible protocol), until a sync succeeds again.
    refused: str | None = None


class PeerTable:
    """All peers of one store and the rules for syncing them (see module docstring)."""

    def __init__(
        self,
        *,
        initial_backoff_ms: int = 4_000,
        max_backoff_ms: int = 256_000,
        parallel_syncs_start: int = 2,
        parallel_syncs_max: int = 32,
        rng: random.Random | None = None,
        backoff_jitter: float = 0.0,
        dead_after_ms: int = 0,
    ) -> None:
        if not 0 < parallel_syncs_start <= parallel_syncs_max:
            raise ValueError("need 0 < parallel_syncs_start <= parallel_syncs_max")
        Backoff(initial_backoff_ms, max_backoff_ms, rng=rng, jitter=backoff_jitter)  # validate
        self._peers: dict[str, Peer] = {}
        self.dead_after_ms = self.keepalive_ms = 0
        self.set_dead_after(dead_after_ms)
        self._initial_backoff_ms = initial_backoff_ms
        self._max_backoff_ms = max_backoff_ms
        self._rng = rng
        self._backoff_jitter = backoff_jitter
        self.parallel_syncs = parallel_syncs_start
        self.parallel_syncs_max = parallel_syncs_max
        self._sync_ids = 0

    # ---------------------------------------------------------------- membership

    def __len__(self) -> int:
        return len(self._peers)

    def __contains__(self, name: object) -> bool:
        return name in self._peers

    def __getitem__(self, name: str) -> Peer:
        return self._peers[name]

    def peers(self) -> list[Peer]:
        return list(self._peers.values())

    def add(self, name: str, now_ms: int, spec: object = None) -> Peer:
        """Add a peer, or update one (a changed spec restarts it from IDLE; same spec: no-op)."""
        peer = self._peers.get(name)
        if peer is not None:
            if peer.spec == spec:
                return peer
            peer.spec = spec
            peer.pending_keys.clear()
            self._set_state(peer, IDLE, now_ms)
            peer.backoff.report_success()
            peer.down = False  # a new address: given the full time to answer
            peer.last_heard_ms = peer.last_probe_ms = now_ms
            return peer
        backoff = Backoff(
            self._initial_backoff_ms,
            self._max_backoff_ms,
            rng=self._rng,
            jitter=self._backoff_jitter,
        )
        peer = Peer(name=name, backoff=backoff, spec=spec, state_since_ms=now_ms,
                    last_heard_ms=now_ms, last_probe_ms=now_ms)
        self._peers[name] = peer
        return peer

    def remove(self, name: str) -> Peer | None:
        return self._peers.pop(name, None)

    # ---------------------------------------------------------------- sync lifecycle

    def in_flight(self) -> int:
        return sum(1 for p in self._peers.values() if p.state == SYNCING)

    def start_syncs(self, now_ms: int) -> list[Peer]:
        """IDLE peers to send a full-sync request to now; they move to SYNCING.

        Respects each peer's backoff and the parallel-sync cap. Peers are taken in name order,
        so the choice is deterministic.
        """
        room = self.parallel_syncs - self.in_flight()
        started: list[Peer] = []
        if room <= 0:
            return started
        for name in sorted(self._peers):
            peer = self._peers[name]
            if peer.state != IDLE or peer.down or not peer.backoff.can_try(now_ms):
                continue
            self._sync_ids += 1
            peer.sync_id = self._sync_ids
            peer.sync_started_ms = now_ms
            # Keys flooded before this point are covered by the hash dump sent with the request.
            peer.pending_keys.clear()
            self._set_state(peer, SYNCING, now_ms)
            started.append(peer)
            if len(started) >= room:
                break
        return started

    def sync_succeeded(self, name: str, sync_id: int, now_ms: int) -> set[str] | None:
        """The sync `sync_id` with `name` got its reply: -> INITIALIZED.

        Returns the keys flooded during the sync (to send in the finalize step, with the
        requested keys), or None if the reply is stale (unknown peer, other sync, not SYNCING),
        in which case nothing changes.
        """
        peer = self._peers.get(name)
        if peer is None or peer.state != SYNCING or peer.sync_id != sync_id:
            return None
        pending = peer.pending_keys
        peer.pending_keys = set()
        peer.backoff.report_success()
        peer.refused = None
        self._set_state(peer, INITIALIZED, now_ms)
        self.parallel_syncs = min(2 * self.parallel_syncs, self.parallel_syncs_max)
        return pending

    def sync_failed(self, name: str, now_ms: int, *, sync_id: int | None = None) -> bool:
        """A request to `name` failed (sync, flood or finalize): -> IDLE with backoff.

        With `sync_id`, only that sync's failure counts (a late error of an old sync is
        ignored). Returns whether the peer changed state.
        """
        peer = self._peers.get(name)
        if peer is None or (sync_id is not None and peer.sync_id != sync_id):
            return False
        peer.errors += 1
        peer.backoff.report_error(now_ms)
        return self._to_idle(peer, now_ms)

    def refuse(self, name: str, reason: str, now_ms: int) -> bool:
        """The peer's protocol cannot be spoken (`kvstore.protocol.agree`): -> IDLE with
        backoff (it is retried: it may be upgraded in place), marked refused with `reason`.
        A refused peer is never INITIALIZED, so it gets no floods: no half-working peering."""
        peer = self._peers.get(name)
        if peer is None:
            return False
        peer.refused = reason
        peer.errors += 1
        peer.backoff.report_error(now_ms)
        peer.pending_keys.clear()
        return self._to_idle(peer, now_ms)

    def inconsistency(self, name: str, now_ms: int) -> bool:
        """The peer sent something that shows our views diverged (e.g. a TTL update for a key we
        hold with another version): resync it at once, without a backoff penalty."""
        peer = self._peers.get(name)
        if peer is None:
            return False
        return self._to_idle(peer, now_ms)

    # ---------------------------------------------------------------- liveness

    def set_dead_after(self, dead_after_ms: int) -> None:
        """The liveness limit (0: no probes, nobody marked down; a down peer stays down until
        it answers a probe, so turning them off also brings the down ones back to IDLE)."""
        if dead_after_ms < 0:
            raise ValueError("dead_after_ms must be >= 0 (0: no liveness checks)")
        self.dead_after_ms = dead_after_ms
        # Probes go out after a third of the limit without news: a peer that is alive answers
        # two or three of them before it could be taken for dead.
        self.keepalive_ms = max(1, dead_after_ms // 3)
        if not dead_after_ms:
            for peer in self._peers.values():
                peer.down = False

    def heard_from(self, name: str, now_ms: int) -> bool:
        """A reply came from `name` (to a probe or a sync step). Returns True when the peer was
        marked down: it is back, and synced at once (its backoff is cleared)."""
        peer = self._peers.get(name)
        if peer is None:
            return False
        peer.last_heard_ms = max(peer.last_heard_ms, now_ms)
        if not peer.down:
            return False
        peer.down = False
        peer.backoff.report_success()
        return True

    def keepalives_due(self, now_ms: int) -> list[Peer]:
        """Peers to send a probe to now: nothing heard from them, and no probe sent, for the
        keep-alive interval (down peers too: their answer is how they come back)."""
        if not self.dead_after_ms:
            return []
        due: list[Peer] = []
        for name in sorted(self._peers):
            peer = self._peers[name]
            if now_ms - max(peer.last_heard_ms, peer.last_probe_ms) >= self.keepalive_ms:
                peer.last_probe_ms = now_ms
                due.append(peer)
        return due

    def mark_silent(self, now_ms: int) -> list[Peer]:
        """Peers not heard from for `dead_after_ms` (and not marked yet): marked down, back to
        IDLE with backoff (a sync in flight with one is over: the node drops it)."""
        if not self.dead_after_ms:
            return []
        silent: list[Peer] = []
        for name in sorted(self._peers):
            peer = self._peers[name]
            if peer.down or now_ms - peer.last_heard_ms < self.dead_after_ms:
                continue
            peer.down = True
            peer.errors += 1
            peer.backoff.report_error(now_ms)
            peer.pending_keys.clear()
            self._to_idle(peer, now_ms)
            silent.append(peer)
        return silent

    def down_count(self) -> int:
        return sum(1 for p in self._peers.values() if p.down)

    # ---------------------------------------------------------------- flooding

    def flood_targets(self, keys: Iterable[str], exclude: Iterable[str] = ()) -> list[str]:
        """Names of the peers to flood a publication with `keys` to: the INITIALIZED ones, minus
        `exclude` (e.g. the sender). Peers whose sync is in flight remember the keys instead."""
        skip = set(exclude)
        targets: list[str] = []
        key_list: list[str] | None = None
        for name, peer in self._peers.items():
            if peer.state == INITIALIZED:
                if name not in skip:
                    targets.append(name)
            elif peer.state == SYNCING:
                if key_list is None:
                    key_list = list(keys)
                peer.pending_keys.update(key_list)
        return targets

    def initial_sync_done(self) -> bool:
        """Every peer is INITIALIZED or has failed at least once (so readiness is not held
        hostage by a dead peer); trivially true with no peers."""
        return all(p.state == INITIALIZED or p.errors > 0 for p in self._peers.values())

    # ---------------------------------------------------------------- internals

    def _to_idle(self, peer: Peer, now_ms: int) -> bool:
        if peer.state == IDLE:
            return False
        if peer.state == INITIALIZED:
            peer.flaps += 1
        self._set_state(peer, IDLE, now_ms)
        return True

    @staticmethod
    def _set_state(peer: Peer, state: int, now_ms: int) -> None:
        if peer.state != state:
            peer.state = state
            peer.state_since_ms = now_ms


class AntiEntropyTimer:
    """Every `interval_ms` (±`jitter`), pick one random peer for a periodic sync.

    The first pick is due at `start_ms` (default: at once), as in Open/R. `rng` is injectable so
    tests and simulations are reproducible.
    """

    def __init__(
        self,
        interval_ms: int,
        rng: random.Random,
        *,
        jitter: float = 0.2,
        start_ms: int = 0,
    ) -> None:
        if interval_ms <= 0:
            raise ValueError("anti-entropy interval must be > 0")
        if not 0.0 <= jitter < 1.0:
            raise ValueError("anti-entropy jitter must be in [0, 1)")
        self.interval_ms = interval_ms
        self.jitter = jitter
        self._rng = rng
        self.next_due_ms = start_ms

    def poll(self, now_ms: int, candidates: Sequence[str]) -> str | None:
        """If due, schedule the next round and return a random candidate (None if none)."""
        if now_ms < self.next_due_ms:
            return None
        spread = self._rng.uniform(1.0 - self.jitter, 1.0 + self.jitter)
        self.next_due_ms = now_ms + max(1, round(self.interval_ms * spread))
        if not candidates:
            return None
        return self._rng.choice(sorted(candidates))

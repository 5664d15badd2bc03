"""Per-peer link state kept by the node: the DEALER socket to the peer and its sync bookkeeping.

State machine (as Open/R's thrift-era KvStore): IDLE -> SYNCING -> INITIALIZED, back to IDLE on
any failure (timeout, send failure, protocol error) with exponential backoff before the next
attempt. Flooding goes only to INITIALIZED peers; keys flooded while a peer is not initialized are
remembered (`pending_keys`) and sent in that peer's finalize step, so it misses nothing.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import zmq

from kvstore.gen.kvstore_thrift.ttypes import PeerSpec, PeerState
from kvstore.node_sync import SyncSession

IDLE = PeerState.IDLE
SYNCING = PeerState.SYNCING
INITIALIZED = PeerState.INITIALIZED


@dataclass
class Backoff:
    """Exponential backoff: each failure doubles the wait (initial .. maximum); success resets."""

    initial_ms: int
    max_ms: int
    current_ms: int = 0

    def failed(self) -> int:
        self.current_ms = (
            self.initial_ms if self.current_ms == 0 else min(self.max_ms, self.current_ms * 2)
        )
        return self.current_ms

    def reset(self) -> None:
        self.current_ms = 0


@dataclass
class PeerLink:
    name: str
    cmd_url: str
    pub_url: str
    backoff: Backoff
    sock: zmq.Socket[bytes] | None = None
    state: int = IDLE
    state_since_ms: int = 0  # wall clock, for operators
    flaps: int = 0
    next_attempt_ms: int = 0  # monotonic: earliest time of the next sync attempt
    initialized_once: bool = False
    failed_once: bool = False
    pending_keys: set[str] = field(default_factory=set)
    session: SyncSession | None = None
    last_activity_ms: int = 0  # monotonic: last request sent or reply received in the session

    def set_state(self, state: int, wall_ms: int) -> None:
        if state != self.state:
            self.state = state
            self.state_since_ms = wall_ms
            if state == INITIALIZED:
                self.flaps += 1
                self.initialized_once = True

    def spec(self) -> PeerSpec:
        return PeerSpec(
            cmd_url=self.cmd_url,
            pub_url=self.pub_url,
            state=self.state,
            state_since_ms=self.state_since_ms,
            flaps=self.flaps,
        )

    @property
    def settled(self) -> bool:
        """Counts towards "initial sync done": initialized, or failed at least once."""
        return self.initialized_once or self.failed_once


@dataclass
class SyncCap:
    """How many full syncs may run at once: starts low, doubles on each success (Open/R: 2 -> 32),
    so a node that just came up does not flood every peer with dump requests at once."""

    limit: int = 2
    maximum: int = 32

    def succeeded(self) -> None:
        self.limit = min(self.maximum, self.limit * 2)


def jittered(interval_s: float, rng: random.Random) -> float:
    """interval +- 20 %, so the periodic syncs of many nodes do not line up."""
    return interval_s * rng.uniform(0.8, 1.2)

"""Is a node's agent alive, read from the mesh alone (sans-I/O: the caller passes the clock).

An agent refreshes its record `node/<N>/agent` every `heartbeat_ms` (a TTL-only update) and
states in it how often (`heartbeat_ms`) and with which TTL (`ttl_ms`). Every store hands out a
key's *remaining* TTL, so any node can tell how long ago the record was last refreshed:
`ttl_ms - remaining`. Three missed heartbeats make the agent down, since its last refresh.

Its statuses (`status/<N>/...`) live as long as the record (the same TTL, a day by default):
while the agent is down they are shown as stale (its last word), never as current, and they
do not vanish minutes after it died.

A 0.4.0 agent's record has neither field: it refreshed everything every 75 s with a 300 s TTL.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kvstore import TTL_INFINITY

HEARTBEAT_MS = 10_000
HEARTBEAT_MS_RANGE = (100, 3_600_000)  # what `--heartbeat-ms` / `[agent] heartbeat_ms` accept
MISSED_HEARTBEATS = 3  # so a late flood or a busy agent is not taken for dead
LEGACY_HEARTBEAT_MS = 75_000
LEGACY_TTL_MS = 300_000


@dataclass(frozen=True)
class AgentLiveness:
    """`known`: a record was found; `up`: refreshed lately; `last_seen`: unix seconds of its
    last refresh (None when unknown)."""

    known: bool
    up: bool
    last_seen: float | None = None

    def describe(self, now: float | None = None) -> str:
        if not self.known:
            return "no agent record"
        if self.up:
            return "up"
        if self.last_seen is None:
            return "down"
        now = time.time() if now is None else now
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.last_seen))
        return f"down since {stamp} ({format_age(now - self.last_seen)} ago)"

    def as_json(self) -> dict[str, Any]:
        return {"known": self.known, "up": self.up, "last_seen": self.last_seen}


def agent_liveness(record: Mapping[str, Any] | None, ttl_left_ms: int | None,
                   now: float) -> AgentLiveness:
    """The liveness of an agent from its record and the record's remaining TTL."""
    if record is None:
        return AgentLiveness(known=False, up=False)
    heartbeat_ms = _positive(record.get("heartbeat_ms"), LEGACY_HEARTBEAT_MS)
    ttl_ms = _positive(record.get("ttl_ms"), LEGACY_TTL_MS)
    if ttl_left_ms is None or ttl_left_ms == TTL_INFINITY:
        return AgentLiveness(known=True, up=True)  # never expires: nothing to measure
    age_ms = max(0, ttl_ms - ttl_left_ms)
    last_seen = now - age_ms / 1000
    return AgentLiveness(known=True, up=age_ms <= MISSED_HEARTBEATS * heartbeat_ms,
                         last_seen=last_seen)


def format_age(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def _positive(value: object, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 \
        else default

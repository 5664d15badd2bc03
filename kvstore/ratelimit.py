"""Flood rate limiting, sans-I/O: a token bucket and a buffer of KEYS that never loses one.

One token is one publication (not one key), as in Open/R. When no token is left, the keys of the
publication are buffered; when a token is available again, the buffer is flushed as ONE
publication whose values are re-read from the store at that moment. Re-reading (instead of keeping
the values) means the flush carries the newest state of every key, skips keys that expired
meanwhile, and costs memory per distinct key rather than per update: a key updated 100 times while
throttled is flooded once, with its last value.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from kvstore.value import Value

__all__ = ["FloodBuffer", "FloodLimiter", "FloodRelease", "TokenBucket"]

# Refills are float arithmetic; a token due "exactly now" must not be lost to rounding.
_EPSILON = 1e-9


class TokenBucket:
    """`rate_per_s` tokens per second, at most `burst` stored; starts full. Time is passed in.

    Disabled (always grants) when rate_per_s <= 0 or burst <= 0, as Open/R's defaults.
    """

    __slots__ = ("_last_ms", "_tokens", "burst", "rate_per_s")

    def __init__(self, rate_per_s: float, burst: int, now_ms: int) -> None:
        self.rate_per_s = float(rate_per_s)
        self.burst = int(burst)
        self._tokens = float(max(self.burst, 0))
        self._last_ms = now_ms

    @property
    def enabled(self) -> bool:
        return self.rate_per_s > 0 and self.burst > 0

    def _refill(self, now_ms: int) -> None:
        elapsed = now_ms - self._last_ms
        if elapsed > 0:
            self._tokens = min(float(self.burst), self._tokens + elapsed * self.rate_per_s / 1000)
            self._last_ms = now_ms

    def available(self, now_ms: int) -> float:
        if not self.enabled:
            return float("inf")
        self._refill(now_ms)
        return self._tokens

    def consume(self, now_ms: int, tokens: float = 1.0) -> bool:
        """Take `tokens` if available now; return whether they were taken."""
        if not self.enabled:
            return True
        self._refill(now_ms)
        if self._tokens >= tokens - _EPSILON:
            self._tokens -= tokens
            return True
        return False

    def ms_until_available(self, now_ms: int, tokens: float = 1.0) -> int:
        """Milliseconds until `tokens` can be consumed (0 if now)."""
        if not self.enabled:
            return 0
        self._refill(now_ms)
        missing = tokens - self._tokens
        if missing <= 0:
            return 0
        # ceil, so that consume() at now + result succeeds
        return -int(-missing * 1000 // self.rate_per_s)


class _Reader(Protocol):
    def get(self, keys: Iterable[str], now_ms: int) -> dict[str, Value]: ...


class FloodBuffer:
    """Insertion-ordered set of keys waiting to be flooded."""

    __slots__ = ("_keys",)

    def __init__(self) -> None:
        self._keys: dict[str, None] = {}

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, key: object) -> bool:
        return key in self._keys

    def add(self, keys: Iterable[str]) -> None:
        self._keys.update(dict.fromkeys(keys))

    def flush(self, db: _Reader, now_ms: int) -> dict[str, Value]:
        """Empty the buffer, returning the CURRENT value of every buffered key still stored
        (copies with their remaining TTL, from `db.get`); keys gone meanwhile are skipped."""
        keys = self._keys
        self._keys = {}
        return db.get(keys, now_ms)


@dataclass(slots=True)
class FloodRelease:
    """What to flood now.

    key_vals: the values (pass them through `KvStoreDb.prepare_flood` as usual).
    from_buffer: True when this is a buffer flush re-read from the store. Its flood path
        (node_ids) is then unknown: flood it to every peer, including the original senders.
    """

    key_vals: Mapping[str, Value]
    from_buffer: bool


class FloodLimiter:
    """Token bucket + key buffer in front of flooding. The node calls `submit` with every merge
    delta and `poll` at `next_poll_ms` (a timer); whatever they return is flooded."""

    def __init__(self, db: _Reader, rate_per_s: float, burst: int, now_ms: int) -> None:
        self._db = db
        self.bucket = TokenBucket(rate_per_s, burst, now_ms)
        self.buffer = FloodBuffer()
        self.suppressed = 0  # publications that had to be buffered
        self.buffered_keys = 0  # keys added to the buffer (with repeats)

    def submit(self, delta: Mapping[str, Value], now_ms: int) -> FloodRelease | None:
        """Offer a merge delta for flooding: released at once, or buffered (returns None)."""
        if not delta:
            return None
        if self.buffer:
            # Keep order: newer keys join the buffer; flush it all if a token is available.
            self.buffer.add(delta)
            self.buffered_keys += len(delta)
            if self.bucket.consume(now_ms):
                return self._flush(now_ms)
            self.suppressed += 1
            return None
        if self.bucket.consume(now_ms):
            return FloodRelease(delta, from_buffer=False)
        self.buffer.add(delta)
        self.buffered_keys += len(delta)
        self.suppressed += 1
        return None

    def poll(self, now_ms: int) -> FloodRelease | None:
        """Flush the buffer if it holds keys and a token is available."""
        if not self.buffer or not self.bucket.consume(now_ms):
            return None
        return self._flush(now_ms)

    def _flush(self, now_ms: int) -> FloodRelease | None:
        key_vals = self.buffer.flush(self._db, now_ms)
        return FloodRelease(key_vals, from_buffer=True) if key_vals else None

    def next_poll_ms(self, now_ms: int) -> int | None:
        """When `poll` will release the buffer, or None if nothing is buffered."""
        if not self.buffer:
            return None
        return now_ms + self.bucket.ms_until_available(now_ms)

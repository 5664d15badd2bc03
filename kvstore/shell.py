"""What the node's I/O shell modules (`kvstore.node`, `kvstore.node_peers`, ...) share: the
clocks they pass into the core, how much one socket wakeup may drain, and throttled warnings."""

from __future__ import annotations

import logging
import time

# Messages handled per socket wakeup before yielding to timers and other sockets (fairness).
DRAIN_LIMIT = 512


def monotonic_ms() -> int:
    """The core's clock (TTL expiry, timers): monotonic milliseconds."""
    return int(time.monotonic() * 1000)


def wall_ms() -> int:
    """The wire's clock (`timestamp_ms`): wall-clock milliseconds since the epoch."""
    return int(time.time() * 1000)


def wall_at(mono_ms: int) -> int:
    """The wall clock at the instant the monotonic clock read `mono_ms` (a past `monotonic_ms()`).

    The stamp (`timestamp_ms`) of a message whose remaining TTLs were computed at `mono_ms`: the
    receiver charges everything since then as time in transit (`kvstore.transit`). Stamping with
    `wall_ms()` at send time instead would charge no one for what the sender did in between
    (publishing, encoding, a big dump, a stall under load), and the receiver would keep the keys
    that much longer than the sender does (tests/kvstore/test_ttl_send_stamp.py)."""
    return wall_ms() - (monotonic_ms() - mono_ms)


class ThrottledWarning:
    """A warning repeated by an outsider (a reconnecting client, a subscriber that does not
    read): logged at most once per `interval_s`, with the number of repeats left out."""

    def __init__(self, logger: logging.Logger, interval_s: float = 5.0) -> None:
        self._logger = logger
        self._interval_s = interval_s
        self._last = -interval_s
        self._unlogged = 0

    def warn(self, message: str) -> None:
        now = time.monotonic()
        if now - self._last < self._interval_s:
            self._unlogged += 1
            return
        more = f" ({self._unlogged} more since the last report)" if self._unlogged else ""
        self._logger.warning("%s%s", message, more)
        self._last = now
        self._unlogged = 0

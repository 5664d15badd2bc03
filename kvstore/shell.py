"""What the node's I/O shell modules (`kvstore.node`, `kvstore.node_peers`) share: the clocks
they pass into the core, and how much one socket wakeup may drain."""

from __future__ import annotations

import time

# Messages handled per socket wakeup before yielding to timers and other sockets (fairness).
DRAIN_LIMIT = 512


def monotonic_ms() -> int:
    """The core's clock (TTL expiry, timers): monotonic milliseconds."""
    return int(time.monotonic() * 1000)


def wall_ms() -> int:
    """The wire's clock (`timestamp_ms`): wall-clock milliseconds since the epoch."""
    return int(time.time() * 1000)

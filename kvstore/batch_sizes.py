"""Size distribution of flooded batches, kept as plain counters (sans-I/O).

The node has no metrics library: each flood adds one to the counter of its size's bucket
(`kvstore.flood.batch_size.le.<bound>`, not cumulative) plus `.count` and `.sum`; whoever exports
metrics (the agent's /metrics) turns them into a cumulative histogram.
"""

from __future__ import annotations

import bisect
from collections.abc import MutableMapping

BOUNDS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)
PREFIX = "kvstore.flood.batch_size"


def bucket_key(size: int) -> str:
    index = bisect.bisect_left(BOUNDS, size)
    return f"{PREFIX}.le.{BOUNDS[index] if index < len(BOUNDS) else 'inf'}"


def count_batch(counters: MutableMapping[str, int], size: int) -> None:
    counters[bucket_key(size)] = counters.get(bucket_key(size), 0) + 1
    counters[f"{PREFIX}.count"] = counters.get(f"{PREFIX}.count", 0) + 1
    counters[f"{PREFIX}.sum"] = counters.get(f"{PREFIX}.sum", 0) + size

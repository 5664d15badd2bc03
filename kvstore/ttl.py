"""TTL countdown: keys ordered by absolute expiry time (monotonic ms), with lazy deletion.

Design, chosen for memory (a store holds ~1 M keys, most with a finite TTL):
- a min-heap of *distinct* expiry times, and
- a dict expiry time -> the key (a bare str) or the keys (a list) due at that time.
Keys merged in the same millisecond share one heap entry, so a bulk load costs ~8 bytes per key;
a key with a unique expiry costs one dict slot and one heap slot (no per-entry tuple).

Entries are never removed when a key is refreshed, replaced or made infinite ("lazy deletion").
The queue only proposes candidates; the owner (`KvStoreDb`) checks each one against the stored
record (whose `ttl_ms` holds the key's absolute expiry) and drops stale candidates. A stale entry
therefore cannot delete a key that has since been refreshed, re-set with an infinite TTL, etc.
Stale entries die by themselves when their time comes, so with the usual refresh cadence (every
TTL/4) a key has at most ~5 entries; only pathological patterns (a long TTL refreshed very often)
make the owner rebuild the queue (`rebuild`, O(n)).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator

__all__ = ["ExpiryQueue"]


class ExpiryQueue:
    """Min-queue of (absolute expiry ms, key) candidates; see the module docstring."""

    __slots__ = ("_due", "_heap", "_size")

    def __init__(self) -> None:
        self._heap: list[int] = []
        self._due: dict[int, str | list[str]] = {}
        self._size = 0

    def __len__(self) -> int:
        """Number of (possibly stale) entries."""
        return self._size

    def push(self, key: str, expiry_ms: int) -> None:
        due = self._due
        slot = due.get(expiry_ms)
        if slot is None:
            due[expiry_ms] = key
            heapq.heappush(self._heap, expiry_ms)
        elif type(slot) is str:
            due[expiry_ms] = [slot, key]
        else:
            slot.append(key)  # type: ignore[union-attr]
        self._size += 1

    def push_many(self, keys: list[str], expiry_ms: int) -> None:
        """Queue several keys for the same expiry time."""
        if not keys:
            return
        due = self._due
        slot = due.get(expiry_ms)
        if slot is None:
            due[expiry_ms] = keys[0] if len(keys) == 1 else list(keys)
            heapq.heappush(self._heap, expiry_ms)
        elif type(slot) is str:
            due[expiry_ms] = [slot, *keys]
        else:
            slot.extend(keys)  # type: ignore[union-attr]
        self._size += len(keys)

    def peek(self) -> int | None:
        """Earliest expiry time in the queue (possibly only stale entries), or None if empty."""
        return self._heap[0] if self._heap else None

    def keys_at(self, expiry_ms: int) -> tuple[str, ...] | list[str]:
        """The keys queued for exactly `expiry_ms`."""
        slot = self._due.get(expiry_ms)
        if slot is None:
            return ()
        return (slot,) if type(slot) is str else slot  # type: ignore[return-value]

    def drop_earliest_head(self, count: int) -> None:
        """Drop the first `count` keys queued at the earliest expiry time (the owner found them
        stale), so the next look at that time starts past them; `count` must leave one."""
        if count <= 0:
            return
        slot = self._due[self._heap[0]]
        if isinstance(slot, str) or count >= len(slot):
            raise ValueError("drop_earliest_head must leave at least one key")
        del slot[:count]
        self._size -= count

    def pop_earliest(self) -> tuple[int, tuple[str, ...] | list[str]]:
        """Remove and return the earliest expiry time and its keys. The queue must not be empty."""
        expiry_ms = heapq.heappop(self._heap)
        slot = self._due.pop(expiry_ms)
        keys: tuple[str, ...] | list[str] = (slot,) if type(slot) is str else slot  # type: ignore[assignment]
        self._size -= len(keys)
        return expiry_ms, keys

    def pop_due(self, now_ms: int) -> Iterator[tuple[int, str]]:
        """Remove and yield every (expiry, key) with expiry <= now_ms, earliest first."""
        heap = self._heap
        while heap and heap[0] <= now_ms:
            expiry_ms, keys = self.pop_earliest()
            for key in keys:
                yield expiry_ms, key

    def rebuild(self, live: Iterable[tuple[str, int]]) -> None:
        """Replace the content with exactly `live` (key, expiry) pairs, dropping stale entries.

        O(n): entries are grouped first and the heap is built in one go.
        """
        due: dict[int, str | list[str]] = {}
        size = 0
        for key, expiry_ms in live:
            slot = due.get(expiry_ms)
            if slot is None:
                due[expiry_ms] = key
            elif type(slot) is str:
                due[expiry_ms] = [slot, key]
            else:
                slot.append(key)  # type: ignore[union-attr]
            size += 1
        heap = list(due)
        heapq.heapify(heap)
        self._heap = heap
        self._due = due
        self._size = size

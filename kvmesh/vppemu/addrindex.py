"""Indexes that keep the emulator's per-call cost independent of how much is configured.

`AddressIndex` answers "which interface addresses overlap this one, in this table" with a few
dictionary lookups (the enclosing networks) and one range query on a sorted list (the enclosed
ones), instead of a scan of every address. `InstancePool` hands out the lowest free instance
number (loopback instances, tap ids) in O(log n).
"""

from __future__ import annotations

import heapq
import ipaddress
from collections.abc import Iterator
from dataclasses import dataclass

from sortedcontainers import SortedList

IPInterface = ipaddress.IPv4Interface | ipaddress.IPv6Interface


@dataclass(frozen=True, order=True)
class _Entry:
    network: int  # network address as an integer
    prefixlen: int
    sw_if_index: int
    address: IPInterface


class AddressIndex:
    def __init__(self) -> None:
        # (table, ip version) -> {(network, prefixlen): [entries]} and the same entries sorted
        self._by_net: dict[tuple[int, int], dict[tuple[int, int], list[_Entry]]] = {}
        self._sorted: dict[tuple[int, int], SortedList] = {}
        self._by_ip: dict[ipaddress.IPv4Address | ipaddress.IPv6Address, list[tuple[int, int]]] = {}

    @staticmethod
    def _entry(sw_if_index: int, address: IPInterface) -> _Entry:
        return _Entry(
            int(address.network.network_address), address.network.prefixlen, sw_if_index, address
        )

    def add(self, table: int, sw_if_index: int, address: IPInterface) -> None:
        space = (table, address.version)
        entry = self._entry(sw_if_index, address)
        self._by_net.setdefault(space, {}).setdefault((entry.network, entry.prefixlen), []).append(
            entry
        )
        self._sorted.setdefault(space, SortedList()).add(entry)
        self._by_ip.setdefault(address.ip, []).append((table, sw_if_index))

    def remove(self, table: int, sw_if_index: int, address: IPInterface) -> None:
        space = (table, address.version)
        entry = self._entry(sw_if_index, address)
        bucket = self._by_net[space][(entry.network, entry.prefixlen)]
        bucket.remove(entry)
        if not bucket:
            del self._by_net[space][(entry.network, entry.prefixlen)]
        self._sorted[space].remove(entry)
        owners = self._by_ip[address.ip]
        owners.remove((table, sw_if_index))
        if not owners:
            del self._by_ip[address.ip]

    def overlapping(self, table: int, address: IPInterface) -> Iterator[tuple[int, IPInterface]]:
        """(sw_if_index, address) of every address in `table` whose network overlaps."""
        space = (table, address.version)
        by_net = self._by_net.get(space)
        if not by_net:
            return
        bits = address.max_prefixlen
        ip = int(address.ip)
        plen = address.network.prefixlen
        # networks that contain the new one (or are it)
        for length in range(plen + 1):
            mask = ((1 << length) - 1) << (bits - length) if length else 0
            for entry in by_net.get((ip & mask, length), ()):
                yield entry.sw_if_index, entry.address
        # networks the new one contains
        start = int(address.network.network_address)
        end = int(address.network.broadcast_address)
        lo = _Entry(start, plen + 1, -1, address)
        for entry in self._sorted[space].irange(minimum=lo):
            if entry.network > end:
                break
            if entry.prefixlen > plen:
                yield entry.sw_if_index, entry.address

    def tables_with_ip(self, address: IPInterface) -> list[tuple[int, int]]:
        """(table, sw_if_index) of every interface holding exactly this IP."""
        return list(self._by_ip.get(address.ip, ()))


class InstancePool:
    """Instance numbers in use; `take()` returns the lowest free one."""

    def __init__(self) -> None:
        self.used: set[int] = set()
        self._freed: list[int] = []  # heap of released numbers below _next
        self._next = 0

    def take(self, wanted: int | None = None) -> int:
        if wanted is None:
            while self._freed:
                n = heapq.heappop(self._freed)
                if n not in self.used:
                    self.used.add(n)
                    return n
            while self._next in self.used:
                self._next += 1
            wanted = self._next
        self.used.add(wanted)
        return wanted

    def release(self, n: int) -> None:
        self.used.discard(n)
        heapq.heappush(self._freed, n)


class VppPool:
    """Indices as a VPP pool (vppinfra pool.h) hands them out: a freed index is reused before
    a new one, the last freed first; iterating a pool walks its indices in order."""

    def __init__(self, first: int = 0) -> None:
        self._free: list[int] = []
        self._next = first

    def get(self) -> int:
        if self._free:
            return self._free.pop()
        self._next += 1
        return self._next - 1

    def put(self, index: int) -> None:
        self._free.append(index)

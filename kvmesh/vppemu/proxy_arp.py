"""Proxy ARP as VPP 24.06 keeps it (src/vnet/arp/arp_proxy.c, arp_api.c); no I/O.

- Ranges: a vector of (low, high, FIB index), walked in the order they were added. The table is
  looked up by id first (`NO_SUCH_FIB`, -3); adding a range that is there is accepted and changes
  nothing, deleting one that is not is `NO_SUCH_ENTRY` (-6). VPP does not check that low <= high
  (a reversed range answers nothing). `proxy_arp_details` carries the range's FIB index in its
  `table_id` field, as VPP fills it; a range outlives its table (VPP keeps the index).
- Interfaces: one flag per sw_if_index; enabling or disabling twice is accepted. VPP never clears
  the flag of a deleted interface, so `proxy_arp_intfc_dump` still lists its index.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from kvmesh.vppemu import errors as E
from kvmesh.vppemu.errors import ApiError
from kvmesh.vppemu.plane import Plane


@dataclass(frozen=True)
class ProxyRange:
    low: ipaddress.IPv4Address
    high: ipaddress.IPv4Address
    fib_index: int


class ProxyArp:
    def __init__(self, dataplane: Plane) -> None:
        self._dp = dataplane
        self.ranges: list[ProxyRange] = []
        self.enabled: set[int] = set()

    def add_del(self, table_id: int, low: ipaddress.IPv4Address, high: ipaddress.IPv4Address,
                is_add: bool) -> None:
        fib_index = self._dp.fib_indices.get((False, table_id))
        if fib_index is None:
            raise ApiError(E.NO_SUCH_FIB, f"no ip4 table {table_id}")
        entry = ProxyRange(low, high, fib_index)
        if entry in self.ranges:
            if not is_add:
                self.ranges.remove(entry)
            return
        if not is_add:
            raise ApiError(E.NO_SUCH_ENTRY, f"no proxy ARP range {low}-{high} in table {table_id}")
        self.ranges.append(entry)

    def enable(self, sw_if_index: int, on: bool) -> None:
        self._dp.interface(sw_if_index)  # VALIDATE_SW_IF_INDEX
        if on:
            self.enabled.add(sw_if_index)
        else:
            self.enabled.discard(sw_if_index)

    def snapshot(self) -> dict[str, object]:
        return {"ranges": [[str(r.low), str(r.high), r.fib_index] for r in self.ranges],
                "interfaces": sorted(self.enabled)}

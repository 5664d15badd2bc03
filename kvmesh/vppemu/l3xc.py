"""L3 cross-connects as VPP 24.06 keeps them (src/plugins/l3xc/l3xc.c, l3xc_api.c); no I/O.

One cross-connect per (input interface, family), numbered from a pool and walked in pool order.
`l3xc_update` creates one or replaces the paths of the existing one; the input interface must
exist (INVALID_SW_IF_INDEX, -2), it needs at least one path (INVALID_VALUE, -7) and each path is
decoded as fib_api_path_decode does: a path through an interface needs an existing one
(NO_MATCHING_INTERFACE, -54), a path without one is resolved in a table that must exist
(NO_SUCH_FIB, -3); a weight of 0 is 1. Deleting a cross-connect that is not there is INVALID_VALUE.
VPP never fills `is_ip6` in `l3xc_details` (always false: the family is the paths'), and answers
`stats_index` 0. Deleting the input interface leaves the cross-connect in place, as in VPP.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from kvmesh.vppemu import errors as E
from kvmesh.vppemu.addrindex import VppPool
from kvmesh.vppemu.errors import ApiError
from kvmesh.vppemu.plane import Plane, check_path_target

ANY = 0xFFFFFFFF
PATH_NORMAL = 0


@dataclass
class CrossConnect:
    index: int
    sw_if_index: int
    is_ip6: bool
    paths: list[Any] = field(default_factory=list)  # kvmesh.vppemu.state.Path


class L3xc:
    def __init__(self, dataplane: Plane) -> None:
        self._dp = dataplane
        self.xcs: dict[tuple[int, bool], CrossConnect] = {}
        self._pool = VppPool()

    def _decoded(self, path: Any, is_ip6_path: bool) -> Any:
        if path.path_type == PATH_NORMAL:
            check_path_target(self._dp, path.sw_if_index, path.nh_table_id, is_ip6_path)
        return replace(path, weight=path.weight or 1)

    def update(self, sw_if_index: int, is_ip6: bool, paths: list[tuple[Any, bool]]) -> None:
        """`paths`: each decoded path with whether its next-hop protocol is IPv6."""
        self._dp.interface(sw_if_index)  # VALIDATE_SW_IF_INDEX
        if not paths:
            raise ApiError(E.INVALID_VALUE, "no paths")
        decoded = [self._decoded(path, ip6) for path, ip6 in paths]
        xc = self.xcs.get((sw_if_index, is_ip6))
        if xc is None:
            xc = CrossConnect(self._pool.get(), sw_if_index, is_ip6)
            self.xcs[(sw_if_index, is_ip6)] = xc
        xc.paths = decoded

    def delete(self, sw_if_index: int, is_ip6: bool) -> None:
        self._dp.interface(sw_if_index)  # VALIDATE_SW_IF_INDEX
        xc = self.xcs.pop((sw_if_index, is_ip6), None)
        if xc is None:
            raise ApiError(E.INVALID_VALUE, f"no L3XC on {sw_if_index}")
        self._pool.put(xc.index)

    def walk(self, sw_if_index: int) -> list[CrossConnect]:
        """All (~0), in pool order, or those of one interface (IPv4 first)."""
        if sw_if_index == ANY:
            return sorted(self.xcs.values(), key=lambda xc: xc.index)
        return [xc for ip6 in (False, True)
                if (xc := self.xcs.get((sw_if_index, ip6))) is not None]

    def snapshot(self) -> list[list[Any]]:
        return [[xc.sw_if_index, xc.is_ip6, len(xc.paths)] for xc in self.walk(ANY)]

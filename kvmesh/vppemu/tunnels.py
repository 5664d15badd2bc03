"""GRE (gre plugin) and IPIP (vnet/ipip) tunnel interfaces, as VPP 24.06 keeps them.

- Both: source and destination of one address family (else INVALID_PROTOCOL) and different
  (SAME_SRC_DST); the outer table must exist (NO_SUCH_FIB); a multipoint tunnel has no
  destination (INVALID_DST_ADDRESS); the same tunnel twice - the same endpoints, outer table,
  mode (and for GRE type and session) - is IF_ALREADY_EXISTS; the interface is `gre<instance>`
  or `ipip<instance>`, the instance the one asked for or else its pool index, INSTANCE_IN_USE
  when taken; L3 MTU 9000.
- GRE: type l3 (a point-to-point L3 interface, no MAC), teb or erspan (ethernet); session id
  at most 1023 (INVALID_SESSION_ID); deleted by the same parameters (NO_SUCH_ENTRY when none).
- IPIP: deleted by sw_if_index (NO_SUCH_ENTRY when that is no IPIP tunnel).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, replace
from typing import Any

from kvmesh.vppemu import errors as E
from kvmesh.vppemu.addrindex import InstancePool
from kvmesh.vppemu.errors import ApiError
from kvmesh.vppemu.plane import IPAddress, Plane

GRE_L3, GRE_TEB, GRE_ERSPAN = range(3)
MODE_P2P, MODE_MP = range(2)
MAX_SESSION_ID = 1023
INVALID_INDEX = 0xFFFFFFFF
TUNNEL_MTU = 9000


@dataclass(frozen=True)
class Tunnel:
    kind: str  # "gre" | "ipip"
    src: IPAddress
    dst: IPAddress
    table_id: int
    mode: int
    gre_type: int = GRE_L3
    session_id: int = 0
    flags: int = 0
    dscp: int = 0
    instance: int = INVALID_INDEX

    def identity(self) -> tuple[Any, ...]:
        """What makes two tunnels the same (VPP's tunnel database key)."""
        return (self.kind, self.src, self.dst, self.table_id, self.mode, self.gre_type,
                self.session_id)


class Tunnels:
    def __init__(self, dataplane: Plane) -> None:
        self._dp = dataplane
        self.by_index: dict[int, Tunnel] = {}
        self._pools = {"gre": InstancePool(), "ipip": InstancePool()}
        self._instances: dict[str, set[int]] = {"gre": set(), "ipip": set()}
        self._pool_index: dict[int, int] = {}  # sw_if_index -> the tunnel's pool index

    def add(self, tunnel: Tunnel) -> int:
        if tunnel.src.version != tunnel.dst.version:
            raise ApiError(E.INVALID_PROTOCOL, "source and destination families differ")
        if tunnel.src == tunnel.dst:
            raise ApiError(E.SAME_SRC_DST, "source and destination are the same")
        if (tunnel.src.version == 6, tunnel.table_id) not in self._dp.tables:
            raise ApiError(E.NO_SUCH_FIB, f"no table {tunnel.table_id}")
        if tunnel.kind == "gre" and tunnel.session_id > MAX_SESSION_ID:
            raise ApiError(E.INVALID_SESSION_ID, f"session id {tunnel.session_id}")
        if tunnel.mode == MODE_MP and not tunnel.dst.is_unspecified:
            raise ApiError(E.INVALID_DST_ADDRESS, "a multipoint tunnel has no destination")
        if self.find(tunnel) is not None:
            raise ApiError(E.IF_ALREADY_EXISTS, "the tunnel exists")
        pool = self._pools[tunnel.kind]
        index = pool.take()
        instance = index if tunnel.instance == INVALID_INDEX else tunnel.instance
        if instance in self._instances[tunnel.kind]:
            pool.release(index)
            raise ApiError(E.INSTANCE_IN_USE, f"{tunnel.kind}{instance} exists")
        self._instances[tunnel.kind].add(instance)
        tunnel = replace(tunnel, instance=instance)
        ethernet = tunnel.kind == "gre" and tunnel.gre_type != GRE_L3
        device = "GRE tunnel device" if tunnel.kind == "gre" else "IPIP tunnel device"
        if ethernet:
            iface = self._dp.add_ethernet_interface(tunnel.kind, f"{tunnel.kind}{instance}",
                                                    device, None, instance=instance)
        else:
            iface = self._dp.add_l3_interface(tunnel.kind, f"{tunnel.kind}{instance}", device,
                                              TUNNEL_MTU, instance=instance)
        self._pool_index[iface.sw_if_index] = index
        self.by_index[iface.sw_if_index] = tunnel
        return iface.sw_if_index

    def find(self, tunnel: Tunnel) -> int | None:
        for sw_if_index, other in self.by_index.items():
            if other.identity() == tunnel.identity():
                return sw_if_index
        return None

    def remove(self, sw_if_index: int) -> None:
        """Forget a tunnel (the dataplane deletes its interface)."""
        tunnel = self.by_index.pop(sw_if_index)
        self._instances[tunnel.kind].discard(tunnel.instance)
        self._pools[tunnel.kind].release(self._pool_index.pop(sw_if_index))

    def is_p2p(self, sw_if_index: int) -> bool | None:
        """Whether the tunnel is point-to-point (VPP's P2P interface class: an L3 tunnel, not
        multipoint); None when the interface is no GRE/IPIP tunnel."""
        tunnel = self.by_index.get(sw_if_index)
        if tunnel is None:
            return None
        return tunnel.mode == MODE_P2P and (tunnel.kind == "ipip" or tunnel.gre_type == GRE_L3)

    def ipip_index(self, sw_if_index: int) -> int:
        tunnel = self.by_index.get(sw_if_index)
        if tunnel is None or tunnel.kind != "ipip":
            raise ApiError(E.NO_SUCH_ENTRY, f"sw_if_index {sw_if_index} is no IPIP tunnel")
        return sw_if_index

    def gre_index(self, tunnel: Tunnel) -> int:
        found = self.find(tunnel)
        if found is None:
            raise ApiError(E.NO_SUCH_ENTRY, "no such GRE tunnel")
        return found


def parse_address(af: int, un: Any) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    if int(af) == 1:
        return ipaddress.IPv6Address(bytes(un.ip6))
    return ipaddress.IPv4Address(bytes(un.ip4))

"""WireGuard interfaces and peers, as VPP 24.06's wireguard plugin keeps them
(src/plugins/wireguard/wireguard_api.c, wireguard_if.c, wireguard_peer.c); no I/O.

- `wireguard_interface_create`: the instance asked for (`user_instance`, ~0: the lowest free)
  must be below 16384 and free, else INVALID_REGISTRATION; the interface is `wg<instance>`, an L3
  tunnel (no MAC, device class "Wireguard Tunnel", MTU 9000) with a carrier while it is admin
  up; its public key is the X25519 public key of the private key (`generate_key` makes a
  random private key). Any port, any source address, several interfaces on one port.
- `wireguard_interface_delete`: a missing interface is INVALID_SW_IF_INDEX, one that is not a
  WireGuard interface INVALID_VALUE; its peers are removed with it.
- `wireguard_peer_add`: the interface must exist (INVALID_SW_IF_INDEX), at least one allowed IP
  (INVALID_VALUE), the interface a WireGuard one (INVALID_SW_IF_INDEX), the public key new to
  every interface (ENTRY_ALREADY_EXISTS), fewer than 2^20 peers (LIMIT_EXCEEDED). The table,
  endpoint and keepalive are taken as given. A peer cannot be changed: remove and add.
- `wireguard_peer_remove`: an unknown index is NO_SUCH_ENTRY.
- dumps: the private key only when asked for (`show_private_key`); an unknown interface or peer
  index has no details. A peer's flags are 0 (no handshake ever completes here).
Interfaces and peers are numbered from pools (the lowest free index first).
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass, field

from kvmesh.vppemu import errors as E
from kvmesh.vppemu.addrindex import InstancePool
from kvmesh.vppemu.curve25519 import KEY_LEN, public_key
from kvmesh.vppemu.errors import ApiError
from kvmesh.vppemu.plane import IPAddress, Plane

MAX_INSTANCE = 16 * 1024  # WG_ITF_MAX_INSTANCE
MAX_PEERS = 1 << 20
INVALID_INDEX = 0xFFFFFFFF
WG_MTU = 9000
DEVICE_CLASS = "Wireguard Tunnel"
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass
class WgInterface:
    index: int  # in VPP's pool of WireGuard interfaces
    instance: int
    private_key: bytes
    public_key: bytes
    port: int
    src: IPAddress
    sw_if_index: int
    peers: set[int] = field(default_factory=set)


@dataclass
class WgPeer:
    index: int
    public_key: bytes
    sw_if_index: int
    table_id: int
    endpoint: IPAddress
    port: int
    persistent_keepalive: int
    # As given: (address, prefix length); VPP keeps the address bits as they came.
    allowed_ips: list[tuple[IPAddress, int]]
    flags: int = 0


class Wireguard:
    def __init__(self, dataplane: Plane) -> None:
        self._dp = dataplane
        self.interfaces: dict[int, WgInterface] = {}  # by sw_if_index
        self.peers: dict[int, WgPeer] = {}  # by peer index
        self._instances: set[int] = set()
        self._if_pool = InstancePool()
        self._peer_pool = InstancePool()

    # ------------------------------------------------------------------ interfaces
    def _take_instance(self, wanted: int) -> int:
        if wanted == INVALID_INDEX:
            instance = next(n for n in range(MAX_INSTANCE + 1) if n not in self._instances)
        else:
            instance = wanted
        if instance >= MAX_INSTANCE or instance in self._instances:
            raise ApiError(E.INVALID_REGISTRATION, f"instance {wanted} is taken or too large")
        return instance

    def create(self, wanted_instance: int, private_key: bytes | None, port: int,
               src: IPAddress) -> int:
        """`private_key` None: generate one."""
        instance = self._take_instance(wanted_instance)
        key = private_key if private_key is not None else os.urandom(KEY_LEN)
        index = self._if_pool.take()
        iface = self._dp.add_l3_interface("wireguard", f"wg{instance}", DEVICE_CLASS, WG_MTU,
                                          instance=instance)
        self._instances.add(instance)
        self.interfaces[iface.sw_if_index] = WgInterface(
            index, instance, key, public_key(key), port, src, iface.sw_if_index)
        return int(iface.sw_if_index)

    def delete(self, sw_if_index: int) -> None:
        """Forget an interface and its peers (the dataplane removes the interface)."""
        self._dp.interface(sw_if_index)  # VALIDATE_SW_IF_INDEX
        wg = self.interfaces.get(sw_if_index)
        if wg is None:
            raise ApiError(E.INVALID_VALUE, f"sw_if_index {sw_if_index} is not WireGuard")
        for peer in sorted(wg.peers):
            self.remove_peer(peer)
        del self.interfaces[sw_if_index]
        self._instances.discard(wg.instance)
        self._if_pool.release(wg.index)

    # ------------------------------------------------------------------ peers
    def add_peer(self, peer: WgPeer) -> int:
        self._dp.interface(peer.sw_if_index)  # VALIDATE_SW_IF_INDEX
        if not peer.allowed_ips:
            raise ApiError(E.INVALID_VALUE, "a peer needs allowed IPs")
        wg = self.interfaces.get(peer.sw_if_index)
        if wg is None:
            raise ApiError(E.INVALID_SW_IF_INDEX, f"sw_if_index {peer.sw_if_index} is not "
                                                  "WireGuard")
        if any(p.public_key == peer.public_key for p in self.peers.values()):
            raise ApiError(E.ENTRY_ALREADY_EXISTS, "a peer with this public key exists")
        if len(self.peers) > MAX_PEERS:
            raise ApiError(E.LIMIT_EXCEEDED, "too many peers")
        peer.index = self._peer_pool.take()
        self.peers[peer.index] = peer
        wg.peers.add(peer.index)
        return peer.index

    def remove_peer(self, index: int) -> None:
        peer = self.peers.pop(index, None)
        if peer is None:
            raise ApiError(E.NO_SUCH_ENTRY, f"no peer {index}")
        self.interfaces[peer.sw_if_index].peers.discard(index)
        self._peer_pool.release(index)

    def snapshot(self) -> dict[str, object]:
        """Without keys: the control channel's state is for tests and debugging."""
        return {
            "interfaces": [{"sw_if_index": w.sw_if_index, "instance": w.instance,
                            "port": w.port, "src": str(w.src), "peers": sorted(w.peers)}
                           for _, w in sorted(self.interfaces.items())],
            "peers": [{"index": p.index, "sw_if_index": p.sw_if_index,
                       "endpoint": str(p.endpoint), "port": p.port,
                       "allowed_ips": [f"{a}/{n}" for a, n in p.allowed_ips]}
                      for _, p in sorted(self.peers.items())],
        }

"""The emulated dataplane: interfaces (incl. sub-interfaces, VXLAN tunnels, memif), addresses,
unnumbered, bridge domains, L2 cross-connects and static L2 FIB entries, FIB tables, routes and
IP neighbors.

Pure state, no I/O: every operation either changes the state and returns, or raises `ApiError` with
VPP's retval and changes nothing. Interface flag changes and deletions queue `InterfaceEvent`s,
which the server turns into `sw_interface_event` messages for the clients that asked for them.

Where VPP's behaviour is simplified, the docstring of the operation says so (see also docs/vpp.md).
"""

from __future__ import annotations

import ipaddress
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from kvmesh.vppemu import errors as E
from kvmesh.vppemu.abf import Abf
from kvmesh.vppemu.acl import AclTable
from kvmesh.vppemu.addrindex import AddressIndex, InstancePool, VppPool
from kvmesh.vppemu.bond import Bonds
from kvmesh.vppemu.errors import ApiError
from kvmesh.vppemu.ip6_nd import Ip6Nd
from kvmesh.vppemu.ipsec import Ipsec
from kvmesh.vppemu.l3xc import L3xc
from kvmesh.vppemu.lcp import LinuxCp
from kvmesh.vppemu.nat44 import Nat44
from kvmesh.vppemu.plane import (
    ADMIN_UP,
    SUB_INNER_VLAN_ID_ANY,
    SUB_NO_TAGS,
    SUB_ONE_TAG,
    SUB_OUTER_VLAN_ID_ANY,
    SUB_TWO_TAGS,
    check_path_target,
)
from kvmesh.vppemu.plane import SUB_EXACT_MATCH as SUB_EXACT_MATCH  # for handlers_l2l3
from kvmesh.vppemu.proxy_arp import ProxyArp
from kvmesh.vppemu.punt import PuntSockets
from kvmesh.vppemu.span import Span
from kvmesh.vppemu.srv6 import Srv6
from kvmesh.vppemu.tunnels import Tunnels
from kvmesh.vppemu.wireguard import Wireguard

IPInterface = ipaddress.IPv4Interface | ipaddress.IPv6Interface
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

INVALID_INDEX = 0xFFFFFFFF
MAX_BD_ID = 0xFFFFFF
MIN_MTU = 64
MAX_MTU = 9216
# ethernet_main.default_mtu (src/vnet/ethernet/init.c): every interface registered as ethernet
# (loopback, tap, af_packet, vxlan, memif) starts with this hardware and L3 MTU. VPP 24.06 reads
# an af_packet host interface's MTU but does not apply it to the VPP side.
DEFAULT_MTU = 9000
MAX_RING = 32768
TAG_LEN = 64  # string[64] on the wire: 63 characters and the terminating NUL

LINK_UP = 2  # interface_types.api if_status_flags (ADMIN_UP: vppemu.plane)

# Bridge domain flags (l2.api bd_flags).
BD_LEARN = 1
BD_FWD = 2
BD_FLOOD = 4
BD_UU_FLOOD = 8
BD_ARP_TERM = 16
BD_ARP_UFWD = 32
BD_DEFAULT_FLAGS = BD_LEARN | BD_FWD | BD_FLOOD | BD_UU_FLOOD

# FIB path types (fib_types.api fib_path_type).
PATH_NORMAL = 0
PATH_LOCAL = 1
PATH_DROP = 2

PORT_NORMAL = 0
PORT_BVI = 1


# VLAN tag rewrite operations (l2_vtr.h), and how many configured tags each needs.
VTR_DISABLED, VTR_PUSH_1, VTR_PUSH_2, VTR_POP_1, VTR_POP_2 = range(5)
VTR_TRANSLATE_1_1, VTR_TRANSLATE_1_2, VTR_TRANSLATE_2_1, VTR_TRANSLATE_2_2 = range(5, 9)
VTR_TAGS_NEEDED = {VTR_POP_1: 1, VTR_TRANSLATE_1_1: 1, VTR_TRANSLATE_1_2: 1,
                   VTR_POP_2: 2, VTR_TRANSLATE_2_1: 2, VTR_TRANSLATE_2_2: 2}
MAX_VLAN = 4095
IF_TYPE_SUB = 1  # interface_types.api if_type

# ip_neighbor.api ip_neighbor_flags
NEIGHBOR_STATIC = 1
NEIGHBOR_NO_FIB_ENTRY = 2

VXLAN_PORT = 4789
MEMIF_DEFAULT_SOCKET = "/run/vpp/memif.sock"  # socket id 0 (the runtime directory's memif.sock)
MEMIF_DEFAULT_RING = 1024
MEMIF_DEFAULT_BUFFER = 2048
MEMIF_ROLE_MASTER = 0


@dataclass
class SubInfo:
    parent: int  # sup_sw_if_index
    sub_id: int
    flags: int
    outer_vlan: int
    inner_vlan: int

    @property
    def tags(self) -> int:
        if self.flags & SUB_TWO_TAGS:
            return 2
        return 1 if self.flags & SUB_ONE_TAG else 0

    @property
    def exact_tags(self) -> int:
        """Tags with a configured value (l2vtr_configure's cfg_tags): an `any` tag is none."""
        if self.flags & SUB_NO_TAGS or self.flags & SUB_OUTER_VLAN_ID_ANY:
            return 0
        if self.flags & SUB_INNER_VLAN_ID_ANY:
            return min(self.tags, 1)
        return self.tags


@dataclass
class VxlanInfo:
    instance: int
    src: IPAddress
    dst: IPAddress
    src_port: int
    dst_port: int
    vni: int
    encap_vrf: int
    mcast_sw_if_index: int
    decap_next_index: int

    @property
    def key(self) -> tuple[IPAddress, IPAddress, int, int, int]:
        return (self.src, self.dst, self.vni, self.encap_vrf, self.dst_port)


@dataclass
class MemifInfo:
    socket_id: int
    memif_id: int
    role: int
    mode: int
    ring_size: int
    buffer_size: int
    zero_copy: bool
    secret: str


@dataclass
class Neighbor:
    sw_if_index: int
    ip: IPAddress
    mac: bytes
    flags: int


@dataclass
class TapInfo:
    tap_id: int
    rx_ring: int
    tx_ring: int
    host_if_name: str
    host_mtu: int  # 0 unless host_mtu_set (VPP reports what was asked, not the kernel's)
    host_mac: bytes = bytes(6)
    host_namespace: str = ""
    host_bridge: str = ""
    flags: int = 0


@dataclass
class Interface:
    sw_if_index: int
    name: str
    kind: str  # "local" | "loopback" | "tap" | "af_packet"
    dev_type: str
    mac: bytes
    # The hardware MTU (hw_interface_set_mtu; reported as link_mtu, for a sub-interface its
    # parent's) and the software per-protocol MTUs [L3, IP4, IP6, MPLS] (sw_interface_set_mtu;
    # hw_interface_set_mtu sets L3 on the interface and its sub-interfaces).
    mtu: int
    instance: int = 0
    sw_mtu: list[int] = field(default_factory=lambda: [0, 0, 0, 0])
    # l2_interface_vlan_tag_rewrite: (vtr_op, push_dot1q, tag1, tag2) as configured.
    vtr: tuple[int, int, int, int] = (VTR_DISABLED, 0, 0, 0)
    admin_up: bool = False
    tag: str = ""
    vrf: dict[bool, int] = field(default_factory=lambda: {False: 0, True: 0})
    addresses: list[IPInterface] = field(default_factory=list)
    unnumbered_from: int | None = None
    tap: TapInfo | None = None
    host_if_name: str = ""  # af_packet
    sub: SubInfo | None = None  # a sub-interface: its parent and tags
    vxlan: VxlanInfo | None = None
    memif: MemifInfo | None = None

    @property
    def link_up(self) -> bool:
        # Emulated devices have a carrier as soon as they are up (local0 never has one).
        # (A sub-interface's carrier is its parent's: see Dataplane.interface_flags.)
        return self.admin_up and self.kind != "local"

    @property
    def flags(self) -> int:
        return (ADMIN_UP if self.admin_up else 0) | (LINK_UP if self.link_up else 0)


@dataclass
class BridgeDomain:
    bd_id: int
    flags: int = BD_DEFAULT_FLAGS
    mac_age: int = 0
    tag: str = ""
    members: dict[int, int] = field(default_factory=dict)  # sw_if_index -> split-horizon group
    bvi: int | None = None


@dataclass(frozen=True)
class Path:
    sw_if_index: int
    next_hop: IPAddress | None
    weight: int = 1
    preference: int = 0
    path_type: int = PATH_NORMAL
    nh_table_id: int = 0

    def same_path(self, other: Path) -> bool:
        """VPP identifies a path by where it goes, not by its weight or preference."""
        return (self.sw_if_index, self.next_hop, self.path_type) == (
            other.sw_if_index,
            other.next_hop,
            other.path_type,
        )


@dataclass(frozen=True)
class RouteEntry:
    table_id: int
    prefix: IPNetwork
    paths: tuple[Path, ...]
    stats_index: int = 0


@dataclass(frozen=True)
class InterfaceEvent:
    sw_if_index: int
    flags: int
    deleted: bool


def _random_mac(rng: random.Random) -> bytes:
    # Locally administered, unicast: what VPP's random MACs look like (02:fe:..).
    return bytes([0x02, 0xFE, *(rng.randrange(256) for _ in range(4))])


def _special_routes(table_id: int, is_ip6: bool) -> list[RouteEntry]:
    """The entries VPP installs in every new FIB table (drop defaults, multicast, receive)."""
    if is_ip6:
        specials = [("::/0", PATH_DROP), ("fe80::/10", PATH_LOCAL)]
    else:
        specials = [
            ("0.0.0.0/0", PATH_DROP),
            ("0.0.0.0/32", PATH_DROP),
            ("224.0.0.0/4", PATH_DROP),
            ("240.0.0.0/4", PATH_DROP),
            ("255.255.255.255/32", PATH_LOCAL),
        ]
    return [
        RouteEntry(
            table_id,
            ipaddress.ip_network(prefix),
            (Path(INVALID_INDEX, None, 1, 0, path_type),),
        )
        for prefix, path_type in specials
    ]


class Dataplane:
    """All configuration state of one emulated VPP instance. A VPP restart is a new instance."""

    def __init__(
        self,
        host_if_exists: Callable[[str], bool] | None = None,
        seed: int | None = None,
    ) -> None:
        self._host_if_exists = host_if_exists or (lambda _name: True)
        self._rng = random.Random(seed)
        self.interfaces: dict[int, Interface] = {}
        self.bridge_domains: dict[int, BridgeDomain] = {}
        # (is_ip6, table_id) -> table name; table 0 always exists.
        self.tables: dict[tuple[bool, int], str] = {
            (False, 0): "ipv4-VRF:0",
            (True, 0): "ipv6-VRF:0",
        }
        # (is_ip6, table_id) -> FIB index, from one pool per family as VPP's fib tables; VPP's
        # own tables (0) take index 0. (VPP's IPv6 link-local tables take IPv6 indices too:
        # not emulated.)
        self.fib_indices: dict[tuple[bool, int], int] = {(False, 0): 0, (True, 0): 0}
        self._fib_pools = {False: VppPool(first=1), True: VppPool(first=1)}
        # (is_ip6, table_id, prefix) -> paths added through the API
        self.routes: dict[tuple[bool, int, IPNetwork], list[Path]] = {}
        self.events: list[InterfaceEvent] = []
        self._addresses = AddressIndex()
        self._loopbacks = InstancePool()
        self._tap_ids = InstancePool()
        self._tap_hosts: set[str] = set()
        self._af_packet_hosts: dict[str, int] = {}
        self._next_sw_if_index = 0
        self._next_stats_index = 0
        self._init_l2l3_extras()
        self._add_interface("local", "local0", "local", bytes(6), mtu=0)
        # Plugins (their own modules): state that goes with the instance.
        self.acl = AclTable()
        self.abf = Abf(self.acl)
        self.nat44 = Nat44(self._first_ip4)
        self.bonds = Bonds(self)
        self.tunnels = Tunnels(self)
        self.lcp = LinuxCp(self)
        self.ipsec = Ipsec(lambda is_ip6, table: (is_ip6, table) in self.tables,
                           self.tunnels.is_p2p)
        self.srv6 = Srv6(self)
        self.proxy_arp = ProxyArp(self)
        self.l3xc = L3xc(self)
        self.ip6_nd = Ip6Nd(self)
        self.wireguard = Wireguard(self)
        self.span = Span()
        self.punt = PuntSockets()

    # ------------------------------------------------------------------ interfaces
    def _add_interface(
        self, kind: str, name: str, dev_type: str, mac: bytes, mtu: int, instance: int = 0
    ) -> Interface:
        iface = Interface(
            sw_if_index=self._next_sw_if_index,
            name=name,
            kind=kind,
            dev_type=dev_type,
            mac=mac,
            mtu=mtu,
            instance=instance,
            sw_mtu=[mtu, 0, 0, 0],
        )
        self.interfaces[iface.sw_if_index] = iface
        self._next_sw_if_index += 1
        return iface

    def add_ethernet_interface(self, kind: str, name: str, dev_type: str, mac: bytes | None,
                               instance: int = 0) -> Interface:
        """A new interface registered as ethernet: the given MAC or a random one, VPP's
        default MTU."""
        return self._add_interface(kind, name, dev_type,
                                   mac if mac and any(mac) else _random_mac(self._rng),
                                   DEFAULT_MTU, instance=instance)

    def add_l3_interface(self, kind: str, name: str, dev_type: str, mtu: int,
                         instance: int = 0) -> Interface:
        """A new interface that is not ethernet (an L3 tunnel): no MAC, no hardware MTU to set."""
        return self._add_interface(kind, name, dev_type, bytes(6), mtu, instance=instance)

    def delete_tunnel(self, sw_if_index: int) -> None:
        self.tunnels.remove(sw_if_index)
        self._delete_interface(self.interfaces[sw_if_index])

    def delete_bond(self, sw_if_index: int) -> None:
        self.bonds.delete(sw_if_index)
        self._delete_interface(self.interfaces[sw_if_index])

    def delete_wireguard(self, sw_if_index: int) -> None:
        self.wireguard.delete(sw_if_index)
        self._delete_interface(self.interfaces[sw_if_index])

    def interface(self, sw_if_index: int, retval: int = E.INVALID_SW_IF_INDEX) -> Interface:
        iface = self.interfaces.get(sw_if_index)
        if iface is None:
            raise ApiError(retval, f"invalid sw_if_index {sw_if_index}")
        return iface

    @staticmethod
    def _lowest_free(used: set[int]) -> int:
        n = 0
        while n in used:
            n += 1
        return n

    def create_loopback(self, mac: bytes, instance: int | None = None) -> int:
        if instance is not None and instance in self._loopbacks.used:
            raise ApiError(E.INSTANCE_IN_USE, f"loopback instance {instance} in use")
        instance = self._loopbacks.take(instance)
        if not any(mac):
            # VPP's default loopback MAC: de:ad:00:00:<instance>
            mac = bytes([0xDE, 0xAD, 0, 0, (instance >> 8) & 0xFF, instance & 0xFF])
        iface = self._add_interface(
            "loopback", f"loop{instance}", "Loopback", mac, DEFAULT_MTU, instance=instance
        )
        return iface.sw_if_index

    def delete_loopback(self, sw_if_index: int) -> None:
        iface = self.interface(sw_if_index)
        if iface.kind != "loopback":
            raise ApiError(E.INVALID_SW_IF_INDEX, f"sw_if_index {sw_if_index} is not a loopback")
        self._delete_interface(iface)

    def create_tap(
        self,
        tap_id: int,
        mac: bytes | None,
        rx_ring: int,
        tx_ring: int,
        host_if_name: str,
        host_mtu: int | None,
        host_namespace: str = "",
        host_bridge: str = "",
        flags: int = 0,
        host_mac: bytes | None = None,
    ) -> int:
        if tap_id != INVALID_INDEX and tap_id in self._tap_ids.used:
            # VPP answers INVALID_INTERFACE ("interface already exists") for a taken tap id.
            raise ApiError(E.INVALID_INTERFACE, f"tap id {tap_id} already exists")
        for ring, what in ((rx_ring, "rx"), (tx_ring, "tx")):
            if ring <= 0 or ring > MAX_RING or ring & (ring - 1):
                raise ApiError(E.INVALID_VALUE, f"{what} ring size {ring}: power of 2 <= 32768")
        if host_if_name and host_if_name in self._tap_hosts:
            raise ApiError(E.IF_ALREADY_EXISTS, f"host interface {host_if_name} exists")
        tap_id = self._tap_ids.take(None if tap_id == INVALID_INDEX else tap_id)
        host_if_name = host_if_name or f"tap{tap_id}"
        if host_if_name in self._tap_hosts:
            self._tap_ids.release(tap_id)
            raise ApiError(E.IF_ALREADY_EXISTS, f"host interface {host_if_name} exists")
        self._tap_hosts.add(host_if_name)
        iface = self._add_interface(
            "tap",
            f"tap{tap_id}",
            "virtio",
            mac if mac and any(mac) else _random_mac(self._rng),
            DEFAULT_MTU,
            instance=tap_id,
        )
        iface.tap = TapInfo(
            tap_id, rx_ring, tx_ring, host_if_name, host_mtu or 0,
            # tap.c: a zero host MAC is replaced by a generated one, set on the Linux side.
            host_mac if host_mac and any(host_mac) else _random_mac(self._rng),
            host_namespace, host_bridge, flags,
        )
        return iface.sw_if_index

    def delete_tap(self, sw_if_index: int) -> None:
        iface = self.interface(sw_if_index)
        if iface.kind != "tap":
            raise ApiError(E.INVALID_SW_IF_INDEX, f"sw_if_index {sw_if_index} is not a tap")
        self._delete_interface(iface)

    def create_af_packet(self, host_if_name: str, mac: bytes | None) -> int:
        if not host_if_name:
            raise ApiError(E.INVALID_VALUE, "host_if_name is empty")
        if host_if_name in self._af_packet_hosts:
            raise ApiError(E.IF_ALREADY_EXISTS, f"host-{host_if_name} already exists")
        if not self._host_if_exists(host_if_name):
            raise ApiError(E.INVALID_INTERFACE, f"host interface {host_if_name} does not exist")
        iface = self._add_interface(
            "af_packet",
            f"host-{host_if_name}",
            "af-packet",  # VNET_DEVICE_CLASS (af_packet_device_class).name
            mac if mac and any(mac) else _random_mac(self._rng),
            DEFAULT_MTU,
        )
        iface.host_if_name = host_if_name
        self._af_packet_hosts[host_if_name] = iface.sw_if_index
        return iface.sw_if_index

    def delete_af_packet(self, host_if_name: str) -> None:
        sw_if_index = self._af_packet_hosts.get(host_if_name)
        if sw_if_index is None:
            raise ApiError(E.SYSCALL_ERROR_1, f"host interface {host_if_name} does not exist")
        self._delete_interface(self.interfaces[sw_if_index])

    def _delete_interface(self, iface: Interface) -> None:
        """Remove an interface and everything that refers to it.

        Simplification: VPP keeps FIB entries whose path goes through a deleted interface
        (unresolved); the emulator removes those paths, and the route when no path is left.
        """
        idx = iface.sw_if_index
        # VPP deletes the sub-interfaces of a hardware interface with it (vnet_delete_hw_interface).
        for child in [i for i in self.interfaces.values() if i.sub and i.sub.parent == idx]:
            self._delete_interface(child)
        self._forget_interface(iface)
        for address in iface.addresses:
            self._addresses.remove(iface.vrf[address.version == 6], idx, address)
        if iface.kind == "loopback":
            self._loopbacks.release(iface.instance)
        elif iface.kind == "vxlan":
            self._vxlan_instances.release(iface.instance)
        elif iface.tap is not None:
            self._tap_ids.release(iface.tap.tap_id)
            self._tap_hosts.discard(iface.tap.host_if_name)
        elif iface.kind == "af_packet":
            self._af_packet_hosts.pop(iface.host_if_name, None)
        for bd in self.bridge_domains.values():
            bd.members.pop(idx, None)
            if bd.bvi == idx:
                bd.bvi = None
        for other in self.interfaces.values():
            if other.unnumbered_from == idx:
                other.unnumbered_from = None
        for key in list(self.routes):
            paths = [p for p in self.routes[key] if p.sw_if_index != idx]
            if paths:
                self.routes[key] = paths
            else:
                del self.routes[key]
        self.acl.forget_interface(idx)
        self.nat44.forget_interface(idx)
        self.bonds.forget_interface(idx)
        self.lcp.forget_interface(idx)
        self.ipsec.forget_interface(idx)
        self.srv6.forget_interface(idx)
        self.ip6_nd.forget_interface(idx)
        del self.interfaces[idx]
        self.events.append(InterfaceEvent(idx, 0, True))

    def _first_ip4(self, sw_if_index: int) -> ipaddress.IPv4Address | None:
        iface = self.interfaces.get(sw_if_index)
        for address in iface.addresses if iface is not None else ():
            if isinstance(address, ipaddress.IPv4Interface):
                return address.ip
        return None

    def set_flags(self, sw_if_index: int, flags: int) -> None:
        iface = self.interface(sw_if_index)
        admin_up = bool(flags & ADMIN_UP)
        if admin_up != iface.admin_up:
            iface.admin_up = admin_up
            self.events.append(InterfaceEvent(iface.sw_if_index, iface.flags, False))

    def set_mtu(self, sw_if_index: int, mtu: int) -> None:
        """hw_interface_set_mtu: hardware interfaces only (a sub-interface is INVALID_VALUE);
        the new MTU becomes the L3 MTU of the interface and of its sub-interfaces
        (vnet_hw_interface_set_max_frame_size walks them)."""
        iface = self.interface(sw_if_index)
        if iface.sub is not None:
            raise ApiError(E.INVALID_VALUE, f"{iface.name} is not a hardware interface")
        if iface.kind == "local":
            raise ApiError(E.INVALID_VALUE, "local0 has no MTU")
        if iface.kind in ("gre", "ipip", "wireguard") and not any(iface.mac):
            # hw_interface_set_mtu: no ethernet interface behind it
            raise ApiError(E.FEATURE_DISABLED, f"{iface.name} is not an ethernet interface")
        if not MIN_MTU <= mtu <= MAX_MTU:
            raise ApiError(E.INVALID_VALUE, f"MTU {mtu} outside {MIN_MTU}..{MAX_MTU}")
        if mtu == iface.mtu:
            return
        iface.mtu = mtu
        for other in self.interfaces.values():
            if other is iface or (other.sub is not None and other.sub.parent == sw_if_index):
                other.sw_mtu[0] = mtu

    def set_protocol_mtu(self, sw_if_index: int, mtu: list[int]) -> None:
        """sw_interface_set_mtu: the four per-protocol MTUs of one software interface, taken
        as given (VPP validates only the interface)."""
        self.interface(sw_if_index).sw_mtu = list(mtu)

    def set_vlan_tag_rewrite(self, sw_if_index: int, vtr: tuple[int, int, int, int]) -> None:
        """l2_interface_vlan_tag_rewrite (l2_api.c, l2vtr_configure): an unknown operation is
        INVALID_VALUE; a non-ethernet interface INVALID_INTERFACE; popping or translating
        more tags than the sub-interface matches exactly INVALID_VLAN_TAG_COUNT."""
        iface = self.interface(sw_if_index)
        op = vtr[0]
        if not VTR_DISABLED <= op <= VTR_TRANSLATE_2_2:
            raise ApiError(E.INVALID_VALUE, f"vtr_op {op}")
        if iface.kind == "local":
            raise ApiError(E.INVALID_INTERFACE, f"{iface.name} is not an ethernet interface")
        tags = iface.sub.exact_tags if iface.sub is not None else 0
        if VTR_TAGS_NEEDED.get(op, 0) > tags:
            raise ApiError(E.INVALID_VLAN_TAG_COUNT,
                           f"vtr_op {op} needs {VTR_TAGS_NEEDED[op]} tag(s), {iface.name} has "
                           f"{tags}")
        iface.vtr = vtr if op != VTR_DISABLED else (VTR_DISABLED, 0, 0, 0)

    def link_mtu(self, iface: Interface) -> int:
        """What sw_interface_details reports as link_mtu: the hardware interface's."""
        while iface.sub is not None:
            iface = self.interfaces[iface.sub.parent]
        return iface.mtu

    def set_mac(self, sw_if_index: int, mac: bytes) -> None:
        iface = self.interface(sw_if_index)
        if mac[0] & 1:
            raise ApiError(E.INVALID_VALUE, "multicast MAC address")
        iface.mac = mac

    def set_tag(self, sw_if_index: int, tag: str, is_add: bool) -> None:
        iface = self.interface(sw_if_index)
        iface.tag = tag if is_add else ""

    # ------------------------------------------------------------------ L3
    def add_del_address(
        self, sw_if_index: int, address: IPInterface | None, is_add: bool, del_all: bool
    ) -> None:
        """Interface addresses, with VPP's conflict rules.

        Adding an address that overlaps one in the same table (on any interface, including the
        same address again) is ADDRESS_IN_USE; the same address in another table is
        DUPLICATE_IF_ADDRESS; deleting an absent one is ADDRESS_NOT_FOUND_FOR_INTERFACE.
        """
        iface = self.interface(sw_if_index)
        if del_all:
            for existing in iface.addresses:
                self._addresses.remove(
                    iface.vrf[existing.version == 6], iface.sw_if_index, existing
                )
                if existing.version == 6:
                    self.ip6_nd.link_disable(iface.sw_if_index)  # each address held a lock
            iface.addresses.clear()
            return
        if address is None:
            raise ApiError(E.INVALID_ADDRESS_FAMILY, "bad address")
        table = iface.vrf[address.version == 6]
        if not is_add:
            if address not in iface.addresses:
                raise ApiError(
                    E.ADDRESS_NOT_FOUND_FOR_INTERFACE, f"{address} not found on {iface.name}"
                )
            iface.addresses.remove(address)
            self._addresses.remove(table, iface.sw_if_index, address)
            if address.version == 6:
                self.ip6_nd.link_disable(iface.sw_if_index)
            return
        for other_table, other_index in self._addresses.tables_with_ip(address):
            if other_table != table:
                other = self.interfaces[other_index].name
                raise ApiError(E.DUPLICATE_IF_ADDRESS, f"{address.ip} present on {other}")
        for other_index, existing in self._addresses.overlapping(table, address):
            same_subnet_sibling = (
                other_index == iface.sw_if_index
                and existing.network.prefixlen == address.network.prefixlen
                and existing.ip != address.ip
            )
            if not same_subnet_sibling:
                other = self.interfaces[other_index].name
                raise ApiError(
                    E.ADDRESS_IN_USE,
                    f"{address} on {iface.name} conflicts with {existing} on {other}",
                )
        iface.addresses.append(address)
        self._addresses.add(table, iface.sw_if_index, address)
        if address.version == 6:
            self.ip6_nd.link_enable(iface.sw_if_index)  # an IPv6 address enables IPv6

    def set_table(self, sw_if_index: int, is_ip6: bool, vrf: int) -> None:
        iface = self.interface(sw_if_index)
        if iface.vrf[is_ip6] == vrf:
            return
        if (is_ip6, vrf) not in self.tables:
            raise ApiError(E.NO_SUCH_FIB, f"no such {'ip6' if is_ip6 else 'ip4'} table {vrf}")
        if any(a.version == (6 if is_ip6 else 4) for a in iface.addresses):
            raise ApiError(E.ADDRESS_FOUND_FOR_INTERFACE, f"{iface.name} has addresses")
        iface.vrf[is_ip6] = vrf

    def get_table(self, sw_if_index: int, is_ip6: bool) -> int:
        return self.interface(sw_if_index).vrf[is_ip6]

    def set_unnumbered(
        self, ip_sw_if_index: int, unnumbered_sw_if_index: int, is_add: bool
    ) -> None:
        self.interface(ip_sw_if_index)
        target = self.interface(unnumbered_sw_if_index, E.INVALID_SW_IF_INDEX_2)
        if ip_sw_if_index == unnumbered_sw_if_index:
            raise ApiError(E.INVALID_VALUE, "an interface cannot borrow from itself")
        if is_add:
            target.unnumbered_from = ip_sw_if_index
        elif target.unnumbered_from == ip_sw_if_index:
            target.unnumbered_from = None

    def add_del_table(self, is_ip6: bool, table_id: int, name: str, is_add: bool) -> None:
        """Adding an existing table or deleting an absent one is accepted silently, like VPP."""
        key = (is_ip6, table_id)
        if is_add:
            if key not in self.tables:
                self.tables[key] = name or f"{'ipv6' if is_ip6 else 'ipv4'}-VRF:{table_id}"
                self.fib_indices[key] = self._fib_pools[is_ip6].get()
            return
        if table_id == 0 or key not in self.tables:
            return
        del self.tables[key]
        self._fib_pools[is_ip6].put(self.fib_indices.pop(key))
        for route_key in [k for k in self.routes if k[0] == is_ip6 and k[1] == table_id]:
            del self.routes[route_key]
        for iface in self.interfaces.values():
            if iface.vrf[is_ip6] == table_id:
                for address in iface.addresses:
                    if (address.version == 6) == is_ip6:
                        self._addresses.remove(table_id, iface.sw_if_index, address)
                        self._addresses.add(0, iface.sw_if_index, address)
                iface.vrf[is_ip6] = 0

    def add_del_route(
        self,
        is_add: bool,
        is_multipath: bool,
        table_id: int,
        prefix: IPNetwork,
        paths: list[Path],
    ) -> int:
        """FIB entries from the API. Returns the stats index of the entry.

        Without `is_multipath` an add replaces all paths and a delete removes the entry;
        with it, paths are added/removed one by one. Deleting what is not there is not an error.
        """
        is_ip6 = prefix.version == 6
        if (is_ip6, table_id) not in self.tables:
            raise ApiError(E.NO_SUCH_FIB, f"no such table {table_id}")
        if not paths:
            raise ApiError(E.NO_PATHS_IN_ROUTE, "no paths in route")
        for path in paths:  # fib_api_path_decode's checks
            if path.path_type == PATH_NORMAL:
                check_path_target(self, path.sw_if_index, path.nh_table_id, is_ip6)
        key = (is_ip6, table_id, prefix)
        current = self.routes.get(key, [])
        if is_add:
            if not is_multipath:
                updated = list(paths)
            else:
                updated = list(current)
                for path in paths:
                    updated = [p for p in updated if not p.same_path(path)] + [path]
            self.routes[key] = updated
        else:
            if is_multipath:
                remaining = [p for p in current if not any(p.same_path(x) for x in paths)]
            else:
                remaining = []
            if remaining:
                self.routes[key] = remaining
            else:
                self.routes.pop(key, None)
        return self._stats_index(key)

    def _stats_index(self, key: tuple[bool, int, IPNetwork]) -> int:
        # A stable, per-entry number is all the client can observe.
        return hash(key) & 0xFFFF

    def route_entries(self, is_ip6: bool, table_id: int) -> Iterator[RouteEntry]:
        """All FIB entries of a table, as `ip_route_dump` shows them: the table's special
        entries, the attached and local entries of interface addresses, and API routes."""
        if (is_ip6, table_id) not in self.tables:
            return
        yield from _special_routes(table_id, is_ip6)
        for iface in self.interfaces.values():
            if iface.vrf[is_ip6] != table_id:
                continue
            for addr in iface.addresses:
                if (addr.version == 6) != is_ip6:
                    continue
                if addr.network.prefixlen < addr.max_prefixlen:
                    yield RouteEntry(table_id, addr.network, (Path(iface.sw_if_index, None),))
                host = ipaddress.ip_network(addr.ip)
                yield RouteEntry(table_id, host, (Path(iface.sw_if_index, None, 1, 0, PATH_LOCAL),))
        for (r_ip6, r_table, prefix), paths in self.routes.items():
            if r_ip6 == is_ip6 and r_table == table_id:
                yield RouteEntry(
                    table_id, prefix, tuple(paths), self._stats_index((r_ip6, r_table, prefix))
                )

    # ------------------------------------------------------------------ L2
    def bd_add_del(self, bd_id: int, flags: int, mac_age: int, tag: str, is_add: bool) -> int:
        if is_add:
            if bd_id == INVALID_INDEX:
                bd_id = self._lowest_free(set(self.bridge_domains) | {0})
            if bd_id == 0:
                raise ApiError(E.BD_NOT_MODIFIABLE, "bridge domain 0 can't be modified")
            if bd_id > MAX_BD_ID:
                raise ApiError(E.BD_ID_EXCEED_MAX, f"bridge domain id {bd_id} exceeds 16M")
            if bd_id in self.bridge_domains:
                raise ApiError(E.BD_ALREADY_EXISTS, f"bridge domain {bd_id} exists")
            self.bridge_domains[bd_id] = BridgeDomain(bd_id, flags, mac_age, tag)
            return bd_id
        if bd_id == 0:
            raise ApiError(E.BD_NOT_MODIFIABLE, "bridge domain 0 can't be deleted")
        bd = self.bridge_domains.get(bd_id)
        if bd is None:
            raise ApiError(E.NO_SUCH_ENTRY, f"no bridge domain {bd_id}")
        if bd.members:
            raise ApiError(E.BD_IN_USE, f"bridge domain {bd_id} has member interfaces")
        del self.bridge_domains[bd_id]
        for key in [k for k in self.l2fib if k[0] == bd_id]:
            del self.l2fib[key]
        return bd_id

    def bd_set_flags(self, bd_id: int, flags: int, is_set: bool) -> int:
        bd = self.bridge_domains.get(bd_id)
        if bd is None:
            raise ApiError(E.NO_SUCH_ENTRY, f"no bridge domain {bd_id}")
        bd.flags = (bd.flags | flags) if is_set else (bd.flags & ~flags)
        return bd.flags

    def set_l2_bridge(
        self, sw_if_index: int, bd_id: int, port_type: int, shg: int, enable: bool
    ) -> None:
        """Put an interface into a bridge domain (creating the domain if needed, as VPP does),
        or back to L3 mode."""
        iface = self.interface(sw_if_index)
        current = self._bd_of(sw_if_index)
        if not enable:
            if current is not None:
                current.members.pop(sw_if_index, None)
                if current.bvi == sw_if_index:
                    current.bvi = None
            return
        if bd_id > MAX_BD_ID:
            raise ApiError(E.BD_ID_EXCEED_MAX, f"bridge domain id {bd_id} exceeds 16M")
        bd = self.bridge_domains.get(bd_id)
        if port_type == PORT_BVI and bd is not None and bd.bvi not in (None, sw_if_index):
            raise ApiError(E.BD_ALREADY_HAS_BVI, f"bridge domain {bd_id} already has a BVI")
        if bd is None:
            bd = self.bridge_domains[bd_id] = BridgeDomain(bd_id)
        self.xconnects.pop(sw_if_index, None)  # one L2 mode at a time: ends a cross-connect
        if current is not None and current is not bd:
            current.members.pop(sw_if_index, None)
            if current.bvi == sw_if_index:
                current.bvi = None
        bd.members[iface.sw_if_index] = shg
        if port_type == PORT_BVI:
            bd.bvi = sw_if_index
        elif bd.bvi == sw_if_index:
            bd.bvi = None

    def _bd_of(self, sw_if_index: int) -> BridgeDomain | None:
        for bd in self.bridge_domains.values():
            if sw_if_index in bd.members:
                return bd
        return None

    # ------------------------------------------------------------------ issue 19 additions
    # Neighbors, sub-interfaces, L2 cross-connects, static L2 FIB entries, VXLAN tunnels, memif.
    # Initialised with the instance, so a restart (a new Dataplane) loses them with the rest.
    def _init_l2l3_extras(self) -> None:
        self.neighbors: dict[tuple[int, IPAddress], Neighbor] = {}
        self.xconnects: dict[int, int] = {}  # rx sw_if_index -> tx sw_if_index
        # (bd_id, mac) -> (sw_if_index, static, bvi); only API-made entries (nothing is learnt)
        self.l2fib: dict[tuple[int, bytes], tuple[int, bool, bool]] = {}
        self.memif_sockets: dict[int, str] = {0: MEMIF_DEFAULT_SOCKET}
        self._vxlan_instances = InstancePool()

    def _forget_interface(self, iface: Interface) -> None:
        """What refers to a deleted interface goes with it: its neighbors, cross-connects (as
        receiver, and - a simplification - as transmitter) and L2 FIB entries."""
        idx = iface.sw_if_index
        for neighbor in [k for k in self.neighbors if k[0] == idx]:
            del self.neighbors[neighbor]
        self.xconnects.pop(idx, None)
        for rx in [rx for rx, tx in self.xconnects.items() if tx == idx]:
            del self.xconnects[rx]
        for key in [k for k, v in self.l2fib.items() if v[0] == idx]:
            del self.l2fib[key]

    def interface_flags(self, iface: Interface) -> int:
        """Admin and link flags; a sub-interface has a carrier when it and its parent are up."""
        if iface.sub is not None:
            parent = self.interfaces.get(iface.sub.parent)
            link = iface.admin_up and parent is not None and parent.link_up
            return (ADMIN_UP if iface.admin_up else 0) | (LINK_UP if link else 0)
        return iface.flags

    # neighbors (ip_neighbor.c)
    def neighbor_add(self, sw_if_index: int, ip: IPAddress, mac: bytes, flags: int) -> None:
        """Add or update; a static entry is not overwritten by a dynamic one with another MAC
        (VPP answers -2 then), a dynamic one becomes static."""
        self.interface(sw_if_index)
        existing = self.neighbors.get((sw_if_index, ip))
        if existing is None:
            self.neighbors[(sw_if_index, ip)] = Neighbor(sw_if_index, ip, mac, flags)
            return
        if not flags & NEIGHBOR_STATIC and existing.flags & NEIGHBOR_STATIC:
            if existing.mac != mac:
                raise ApiError(E.INVALID_SW_IF_INDEX, "refusing to overwrite a static neighbor")
            return
        if flags & NEIGHBOR_STATIC:
            existing.flags |= NEIGHBOR_STATIC
        existing.mac = mac

    def neighbor_del(self, sw_if_index: int, ip: IPAddress) -> None:
        self.interface(sw_if_index)
        if self.neighbors.pop((sw_if_index, ip), None) is None:
            raise ApiError(E.NO_SUCH_ENTRY, f"no neighbor {ip} on sw_if_index {sw_if_index}")

    # sub-interfaces (interface_api.c, ethernet/interface.c)
    def create_subif(
        self, sw_if_index: int, sub_id: int, flags: int, outer: int, inner: int, *,
        vlan_api: bool = False,
    ) -> int:
        """`create_vlan_subif` (`vlan_api`: one exact-match tag, sub id = VLAN, made on the
        hardware parent) or `create_subif`. A sub id taken on the parent: VLAN_ALREADY_EXISTS."""
        parent = self.interface(sw_if_index)
        if vlan_api:
            while parent.sub is not None:  # vnet_get_sup_hw_interface
                parent = self.interfaces[parent.sub.parent]
            if sub_id == 0 or sub_id > MAX_VLAN:
                raise ApiError(E.INVALID_VLAN, f"vlan {sub_id} outside 1..{MAX_VLAN}")
        if any(i.sub and i.sub.parent == parent.sw_if_index and i.sub.sub_id == sub_id
               for i in self.interfaces.values()):
            raise ApiError(E.VLAN_ALREADY_EXISTS, f"{parent.name}.{sub_id} already exists")
        match = (flags, outer, inner)
        if any(i.sub and i.sub.parent == parent.sw_if_index
               and (i.sub.flags, i.sub.outer_vlan, i.sub.inner_vlan) == match
               for i in self.interfaces.values()):
            # ethernet_sw_interface_add_del: "vlan is already in use"; vnet_create_sub_interface
            # answers UNSPECIFIED.
            raise ApiError(E.UNSPECIFIED, f"{parent.name}: vlan {outer}/{inner} is already in use")
        iface = self._add_interface(
            "sub", f"{parent.name}.{sub_id}", parent.dev_type, parent.mac, parent.mtu
        )
        iface.sw_mtu = [0, 0, 0, 0]  # the API handlers' zeroed template (interface_api.c)
        iface.sub = SubInfo(parent.sw_if_index, sub_id, flags, outer, inner)
        return iface.sw_if_index

    def delete_subif(self, sw_if_index: int) -> None:
        iface = self.interface(sw_if_index)
        if iface.sub is None:
            raise ApiError(E.INVALID_SUB_SW_IF_INDEX, f"{iface.name} is not a sub-interface")
        self._delete_interface(iface)

    # L2 cross-connect (l2_api.c, l2_input.c set_int_l2_mode)
    def set_l2_xconnect(self, rx: int, tx: int, enable: bool) -> None:
        """Cross-connect rx to tx (taking rx out of its bridge domain, as VPP's L2 mode change
        does), or put rx back in L3 mode."""
        self.interface(rx)
        if not enable:
            self.xconnects.pop(rx, None)
            return
        self.interface(tx, E.INVALID_SW_IF_INDEX_2)
        bd = self._bd_of(rx)
        if bd is not None:
            bd.members.pop(rx, None)
            if bd.bvi == rx:
                bd.bvi = None
        self.xconnects[rx] = tx

    # L2 FIB (l2_api.c vl_api_l2fib_add_del_t_handler)
    def l2fib_add_del(
        self, bd_id: int, mac: bytes, sw_if_index: int, is_add: bool, static: bool, bvi: bool
    ) -> None:
        """An entry needs an existing domain (NO_SUCH_ENTRY) and an interface in bridge mode
        (INVALID_SW_IF_INDEX); deleting an absent entry is NO_SUCH_ENTRY."""
        if bd_id not in self.bridge_domains:
            raise ApiError(E.NO_SUCH_ENTRY, f"no bridge domain {bd_id}")
        if not is_add:
            if self.l2fib.pop((bd_id, mac), None) is None:
                raise ApiError(E.NO_SUCH_ENTRY, f"no L2 FIB entry {mac.hex(':')}")
            return
        self.interface(sw_if_index)
        if self._bd_of(sw_if_index) is None:
            raise ApiError(E.INVALID_SW_IF_INDEX, f"sw_if_index {sw_if_index} is not in L2 mode")
        self.l2fib[(bd_id, mac)] = (sw_if_index, static, bvi)

    # VXLAN (vxlan plugin: vxlan_api.c, vxlan.c)
    def vxlan_add_del(self, info: VxlanInfo, is_add: bool) -> int:
        is_ip6 = info.src.version == 6
        if (is_ip6, info.encap_vrf) not in self.tables:
            raise ApiError(E.NO_SUCH_FIB, f"no encap table {info.encap_vrf}")
        if info.src == info.dst:
            raise ApiError(E.SAME_SRC_DST, "source and destination are the same")
        existing = next((i for i in self.interfaces.values()
                         if i.vxlan is not None and i.vxlan.key == info.key), None)
        if not is_add:
            if existing is None:
                raise ApiError(E.NO_SUCH_ENTRY, "no such VXLAN tunnel")
            self._delete_interface(existing)
            return existing.sw_if_index
        if existing is not None:
            raise ApiError(E.TUNNEL_EXIST, f"VXLAN tunnel exists: {existing.name}")
        wanted = None if info.instance == INVALID_INDEX else info.instance
        if wanted is not None and wanted in self._vxlan_instances.used:
            raise ApiError(E.INSTANCE_IN_USE, f"vxlan_tunnel{wanted} exists")
        info.instance = self._vxlan_instances.take(wanted)
        iface = self._add_interface(
            "vxlan", f"vxlan_tunnel{info.instance}", "VXLAN", _random_mac(self._rng),
            DEFAULT_MTU,
            instance=info.instance,
        )
        iface.vxlan = info
        return iface.sw_if_index

    # memif (memif plugin: memif_api.c, memif.c)
    def memif_socket_add_del(self, is_add: bool, socket_id: int, filename: str) -> int:
        if is_add and socket_id == INVALID_INDEX:
            socket_id = self._lowest_free(set(self.memif_sockets))
        if (socket_id == 0 and not is_add) or socket_id == INVALID_INDEX:
            raise ApiError(E.INVALID_ARGUMENT, f"socket id {socket_id}")
        if not is_add:
            if socket_id not in self.memif_sockets:
                raise ApiError(E.INVALID_ARGUMENT, f"no socket id {socket_id}")
            if any(i.memif and i.memif.socket_id == socket_id for i in self.interfaces.values()):
                raise ApiError(E.UNEXPECTED_INTF_STATE, f"socket id {socket_id} is in use")
            del self.memif_sockets[socket_id]
            return socket_id
        if not filename:
            raise ApiError(E.INVALID_ARGUMENT, "empty socket filename")
        current = self.memif_sockets.get(socket_id)
        if current is not None and current != filename:
            raise ApiError(E.ENTRY_ALREADY_EXISTS, f"socket id {socket_id} is {current}")
        self.memif_sockets[socket_id] = filename
        return socket_id

    def memif_create(self, info: MemifInfo, mac: bytes | None) -> int:
        """A memif id is unique per socket, and a socket is master or slave, not both
        (SUBIF_ALREADY_EXISTS); an unknown socket id is INVALID_ARGUMENT."""
        if info.socket_id not in self.memif_sockets:
            raise ApiError(E.INVALID_ARGUMENT, f"no socket id {info.socket_id}")
        if info.ring_size & (info.ring_size - 1):
            raise ApiError(E.INVALID_ARGUMENT, f"ring size {info.ring_size}: a power of 2")
        for other in self.interfaces.values():
            if other.memif is not None and other.memif.socket_id == info.socket_id:
                if other.memif.role != info.role:
                    raise ApiError(E.SUBIF_ALREADY_EXISTS, "socket is used with the other role")
                if other.memif.memif_id == info.memif_id:
                    raise ApiError(E.SUBIF_ALREADY_EXISTS,
                                   f"memif id {info.memif_id} taken on socket {info.socket_id}")
        iface = self._add_interface(
            "memif", f"memif{info.socket_id}/{info.memif_id}", "memif",
            mac if mac and any(mac) else _random_mac(self._rng), DEFAULT_MTU,
        )
        iface.memif = info
        return iface.sw_if_index

    def memif_delete(self, sw_if_index: int) -> None:
        iface = self.interface(sw_if_index)
        if iface.memif is None:
            raise ApiError(E.INVALID_SW_IF_INDEX, f"sw_if_index {sw_if_index} is not a memif")
        self._delete_interface(iface)

    def _snapshot_l2l3(self) -> dict[str, Any]:
        return {
            "neighbors": [
                {"sw_if_index": n.sw_if_index, "ip": str(n.ip), "mac": n.mac.hex(":"),
                 "flags": n.flags}
                for n in self.neighbors.values()
            ],
            "xconnects": [{"rx": rx, "tx": tx} for rx, tx in self.xconnects.items()],
            "l2fib": [
                {"bd_id": bd_id, "mac": mac.hex(":"), "sw_if_index": v[0], "static": v[1],
                 "bvi": v[2]}
                for (bd_id, mac), v in self.l2fib.items()
            ],
            "memif_sockets": {str(k): v for k, v in self.memif_sockets.items()},
        }

    # ------------------------------------------------------------------ views
    def pop_events(self) -> list[InterfaceEvent]:
        events, self.events = self.events, []
        return events

    def snapshot(self) -> dict[str, Any]:
        """The whole state as JSON-friendly data (for the control channel and for debugging)."""
        return {
            "interfaces": [
                {
                    "sw_if_index": i.sw_if_index,
                    "name": i.name,
                    "kind": i.kind,
                    "tag": i.tag,
                    "admin_up": i.admin_up,
                    "mtu": i.mtu,
                    "sw_mtu": list(i.sw_mtu),
                    "vtr": list(i.vtr),
                    "mac": i.mac.hex(":"),
                    "vrf": i.vrf[False],
                    "vrf6": i.vrf[True],
                    "addresses": [str(a) for a in i.addresses],
                    "unnumbered_from": i.unnumbered_from,
                    "tap": (
                        {
                            "id": i.tap.tap_id,
                            "rx_ring": i.tap.rx_ring,
                            "tx_ring": i.tap.tx_ring,
                            "host_if_name": i.tap.host_if_name,
                        }
                        if i.tap
                        else None
                    ),
                    "host_if_name": i.host_if_name,
                }
                for i in self.interfaces.values()
            ],
            "bridge_domains": [
                {
                    "bd_id": bd.bd_id,
                    "flags": bd.flags,
                    "members": sorted(bd.members),
                    "bvi": bd.bvi,
                }
                for bd in self.bridge_domains.values()
            ],
            "tables": sorted([is_ip6, table_id] for is_ip6, table_id in self.tables),
            "routes": [
                {
                    "table_id": table_id,
                    "prefix": str(prefix),
                    "paths": [
                        {
                            "sw_if_index": p.sw_if_index,
                            "next_hop": str(p.next_hop) if p.next_hop else None,
                            "weight": p.weight,
                            "preference": p.preference,
                        }
                        for p in paths
                    ],
                }
                for (_ip6, table_id, prefix), paths in self.routes.items()
            ],
            **self._snapshot_l2l3(),
            "acl": self.acl.snapshot(),
            "abf": self.abf.snapshot(),
            "bonds": self.bonds.snapshot(),
            "ipsec": self.ipsec.snapshot(),
            "srv6": self.srv6.snapshot(),
            "proxy_arp": self.proxy_arp.snapshot(),
            "l3xc": self.l3xc.snapshot(),
            "ip6_nd": self.ip6_nd.snapshot(),
            "wireguard": self.wireguard.snapshot(),
            "span": self.span.snapshot(),
            "punt": self.punt.snapshot(),
            "nat44": self.nat44.snapshot(),
        }

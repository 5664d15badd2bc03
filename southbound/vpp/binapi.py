"""Typed wrappers of the VPP binary-API messages the descriptors use.

Each method is one request (or one dump) through `VppConnection`, with arguments and results in
plain Python types: descriptors never see vpp_papi's namedtuples.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # vpp_papi is loaded when a connection is made, not by validating a model
    from southbound.vpp.connection import VppConnection

ANY_INDEX = 0xFFFFFFFF
ADMIN_UP = 1  # if_status_flags
LINK_UP = 2
PORT_NORMAL = 0  # l2_port_type
PORT_BVI = 1
AF_PACKET_MODE_ETHERNET = 1
PATH_NORMAL = 0  # fib_path_type
NO_LABELS: list[dict[str, int]] = [{}] * 16  # vpp_papi packs fixed arrays only when complete

# bd_flags bits by model field
BD_FLAG_BITS = {
    "learn": 1,
    "forward": 2,
    "flood": 4,
    "unknown_unicast_flood": 8,
    "arp_term": 16,
}


def path_next_hop(path: Any) -> str:
    """The next hop of a dumped fib_path (the unspecified address when there is none)."""
    return str(path.nh.address.ip6 if int(path.proto) == 1 else path.nh.address.ip4)


@dataclass(frozen=True)
class SubInterfaceDetails:
    parent: int  # sup_sw_if_index
    sub_id: int
    tags: int
    outer_vlan: int
    inner_vlan: int
    exact_match: bool


@dataclass(frozen=True)
class InterfaceDetails:
    sw_if_index: int
    name: str  # VPP's name, e.g. loop0, tap1, host-veth0
    dev_type: str
    tag: str
    admin_up: bool
    link_up: bool
    mtu: int
    mac: str
    sub: SubInterfaceDetails | None = None  # a sub-interface (sup_sw_if_index != sw_if_index)


@dataclass(frozen=True)
class TapDetails:
    sw_if_index: int
    rx_ring_size: int
    tx_ring_size: int
    host_if_name: str


@dataclass(frozen=True)
class BridgeDomainDetails:
    bd_id: int
    tag: str
    flags: dict[str, bool]
    members: tuple[int, ...]
    bvi: int | None


@dataclass(frozen=True)
class RoutePath:
    sw_if_index: int
    next_hop: str  # the unspecified address when there is none
    weight: int
    preference: int
    path_type: int
    table_id: int = 0  # where a path without an interface resolves its next hop


def fib_path(next_hop: str, sw_if_index: int, table_id: int, weight: int,
             preference: int) -> dict[str, Any]:
    """One fib_types.api `fib_path` of type normal: to `next_hop` (the unspecified address of
    its family when there is none) through `sw_if_index` (ANY_INDEX: resolved in `table_id`)."""
    is_ip6 = ":" in next_hop
    packed = socket.inet_pton(socket.AF_INET6 if is_ip6 else socket.AF_INET, next_hop)
    return {
        "sw_if_index": sw_if_index,
        "table_id": table_id,
        "weight": weight,
        "preference": preference,
        "type": PATH_NORMAL,
        "proto": 1 if is_ip6 else 0,
        "nh": {"address": {"ip6" if is_ip6 else "ip4": packed}},
        "label_stack": NO_LABELS,
    }


def route_path(p: Any) -> RoutePath:
    """A fib_path as read back."""
    return RoutePath(p.sw_if_index, path_next_hop(p), p.weight, p.preference, int(p.type),
                     p.table_id)


@dataclass(frozen=True)
class RouteDetails:
    table_id: int
    prefix: str
    paths: tuple[RoutePath, ...]


class VppApi:
    def __init__(self, connection: VppConnection) -> None:
        self.conn = connection

    # ------------------------------------------------------------------ interfaces
    def create_loopback(self, mac: str | None) -> int:
        reply = self.conn.call("create_loopback", mac_address=mac or bytes(6))
        return int(reply.sw_if_index)

    def delete_loopback(self, sw_if_index: int) -> None:
        self.conn.call("delete_loopback", sw_if_index=sw_if_index)

    def create_tap(
        self, mac: str | None, host_if_name: str | None, rx_ring_size: int, tx_ring_size: int
    ) -> int:
        reply = self.conn.call(
            "tap_create_v3",
            id=ANY_INDEX,
            use_random_mac=mac is None,
            mac_address=mac or bytes(6),
            num_rx_queues=1,
            num_tx_queues=1,
            rx_ring_sz=rx_ring_size,
            tx_ring_sz=tx_ring_size,
            host_if_name_set=host_if_name is not None,
            host_if_name=host_if_name or "",
        )
        return int(reply.sw_if_index)

    def delete_tap(self, sw_if_index: int) -> None:
        self.conn.call("tap_delete_v2", sw_if_index=sw_if_index)

    def create_af_packet(self, host_if_name: str, mac: str | None) -> int:
        reply = self.conn.call(
            "af_packet_create_v3",
            mode=AF_PACKET_MODE_ETHERNET,
            hw_addr=mac or bytes(6),
            use_random_hw_addr=mac is None,
            host_if_name=host_if_name,
            num_rx_queues=1,
            num_tx_queues=1,
        )
        return int(reply.sw_if_index)

    def delete_af_packet(self, host_if_name: str) -> None:
        self.conn.call("af_packet_delete", host_if_name=host_if_name)

    def set_tag(self, sw_if_index: int, tag: str) -> None:
        self.conn.call("sw_interface_tag_add_del", is_add=True, sw_if_index=sw_if_index, tag=tag)

    def set_admin_up(self, sw_if_index: int, up: bool) -> None:
        self.conn.call(
            "sw_interface_set_flags", sw_if_index=sw_if_index, flags=ADMIN_UP if up else 0
        )

    def set_mtu(self, sw_if_index: int, mtu: int) -> None:
        self.conn.call("hw_interface_set_mtu", sw_if_index=sw_if_index, mtu=mtu)

    def set_mac(self, sw_if_index: int, mac: str) -> None:
        self.conn.call("sw_interface_set_mac_address", sw_if_index=sw_if_index, mac_address=mac)

    def set_vrf(self, sw_if_index: int, vrf: int, ip6: bool) -> None:
        """Bind the interface to table `vrf` for IPv4, and for IPv6 too when `ip6` (the tables
        are `vpp/vrf/...` values the interface depends on)."""
        for is_ip6 in (False, True) if ip6 else (False,):
            self.conn.call(
                "sw_interface_set_table", sw_if_index=sw_if_index, is_ipv6=is_ip6, vrf_id=vrf
            )

    def add_del_address(self, sw_if_index: int, cidr: str, is_add: bool) -> None:
        self.conn.call(
            "sw_interface_add_del_address", sw_if_index=sw_if_index, is_add=is_add, prefix=cidr
        )

    def set_unnumbered(self, ip_sw_if_index: int, sw_if_index: int, is_add: bool) -> None:
        self.conn.call(
            "sw_interface_set_unnumbered",
            sw_if_index=ip_sw_if_index,
            unnumbered_sw_if_index=sw_if_index,
            is_add=is_add,
        )

    def interfaces(self) -> list[InterfaceDetails]:
        return [
            InterfaceDetails(
                sw_if_index=d.sw_if_index,
                name=d.interface_name,
                dev_type=d.interface_dev_type,
                tag=d.tag,
                admin_up=bool(d.flags & ADMIN_UP),
                link_up=bool(d.flags & LINK_UP),
                mtu=d.link_mtu,
                mac=str(d.l2_address),
                sub=_sub_details(d),
            )
            for d in self.conn.dump("sw_interface_dump", sw_if_index=ANY_INDEX)
        ]

    def taps(self) -> dict[int, TapDetails]:
        return {
            d.sw_if_index: TapDetails(d.sw_if_index, d.rx_ring_sz, d.tx_ring_sz, d.host_if_name)
            for d in self.conn.dump("sw_interface_tap_v2_dump", sw_if_index=ANY_INDEX)
        }

    def af_packets(self) -> dict[int, str]:
        return {d.sw_if_index: d.host_if_name for d in self.conn.dump("af_packet_dump")}

    def addresses(self, sw_if_index: int) -> list[str]:
        result = []
        for is_ip6 in (False, True):
            for d in self.conn.dump("ip_address_dump", sw_if_index=sw_if_index, is_ipv6=is_ip6):
                result.append(str(d.prefix))
        return result

    def vrf(self, sw_if_index: int) -> int:
        return int(self.conn.call("sw_interface_get_table", sw_if_index=sw_if_index).vrf_id)

    def unnumbered(self) -> dict[int, int]:
        """sw_if_index of each unnumbered interface -> sw_if_index it borrows from."""
        return {
            d.sw_if_index: d.ip_sw_if_index
            for d in self.conn.dump("ip_unnumbered_dump", sw_if_index=ANY_INDEX)
        }

    # ------------------------------------------------------------------ bridge domains
    def bd_add(self, bd_id: int, flags: dict[str, bool], tag: str) -> None:
        self.conn.call(
            "bridge_domain_add_del_v2",
            bd_id=bd_id,
            flood=flags["flood"],
            uu_flood=flags["unknown_unicast_flood"],
            forward=flags["forward"],
            learn=flags["learn"],
            arp_term=flags["arp_term"],
            bd_tag=tag,
            is_add=True,
        )

    def bd_delete(self, bd_id: int) -> None:
        self.conn.call("bridge_domain_add_del_v2", bd_id=bd_id, is_add=False)

    def bd_set_flags(self, bd_id: int, flags: dict[str, bool], old: dict[str, bool]) -> None:
        changed = [name for name in BD_FLAG_BITS if flags[name] != old.get(name)]
        set_bits = sum(BD_FLAG_BITS[n] for n in changed if flags[n])
        clear_bits = sum(BD_FLAG_BITS[n] for n in changed if not flags[n])
        if set_bits:
            self.conn.call("bridge_flags", bd_id=bd_id, is_set=True, flags=set_bits)
        if clear_bits:
            self.conn.call("bridge_flags", bd_id=bd_id, is_set=False, flags=clear_bits)

    def bd_member(self, sw_if_index: int, bd_id: int, bvi: bool, enable: bool) -> None:
        self.conn.call(
            "sw_interface_set_l2_bridge",
            rx_sw_if_index=sw_if_index,
            bd_id=bd_id,
            port_type=PORT_BVI if bvi else PORT_NORMAL,
            shg=0,
            enable=enable,
        )

    def bridge_domains(self) -> list[BridgeDomainDetails]:
        result = []
        for d in self.conn.dump("bridge_domain_dump", bd_id=ANY_INDEX, sw_if_index=ANY_INDEX):
            flags = {
                "flood": bool(d.flood),
                "forward": bool(d.forward),
                "learn": bool(d.learn),
                "unknown_unicast_flood": bool(d.uu_flood),
                "arp_term": bool(d.arp_term),
            }
            bvi = None if d.bvi_sw_if_index == ANY_INDEX else int(d.bvi_sw_if_index)
            members = tuple(m.sw_if_index for m in d.sw_if_details)
            result.append(BridgeDomainDetails(d.bd_id, d.bd_tag, flags, members, bvi))
        return result

    # ------------------------------------------------------------------ routes
    def add_del_route(
        self,
        is_add: bool,
        vrf: int,
        dst: str,
        next_hop: str,
        sw_if_index: int,
        weight: int,
        preference: int,
    ) -> None:
        """One path of a route; paths are added and removed one by one (multipath)."""
        path = fib_path(next_hop, sw_if_index, vrf, weight, preference)
        self.conn.call(
            "ip_route_add_del",
            is_add=is_add,
            is_multipath=True,
            route={"table_id": vrf, "prefix": dst, "n_paths": 1, "paths": [path]},
        )

    def tables(self) -> list[tuple[int, bool]]:
        return [(d.table.table_id, bool(d.table.is_ip6)) for d in self.conn.dump("ip_table_dump")]

    def routes(self, table_id: int, is_ip6: bool) -> list[RouteDetails]:
        result = []
        for d in self.conn.dump("ip_route_dump", table={"table_id": table_id, "is_ip6": is_ip6}):
            prefix = d.route.prefix
            paths = tuple(route_path(p) for p in d.route.paths)
            result.append(RouteDetails(d.route.table_id, str(prefix), paths))
        return result

    # ------------------------------------------------------------------ issue 19 additions
    def table_add_del(self, table_id: int, is_ip6: bool, name: str, is_add: bool) -> None:
        self.conn.call(
            "ip_table_add_del",
            is_add=is_add,
            table={"table_id": table_id, "is_ip6": is_ip6, "name": name},
        )

    def named_tables(self) -> list[tuple[int, bool, str]]:
        return [
            (d.table.table_id, bool(d.table.is_ip6), d.table.name)
            for d in self.conn.dump("ip_table_dump")
        ]

    def neighbor_add_del(
        self, sw_if_index: int, ip: str, mac: str, flags: int, is_add: bool
    ) -> None:
        neighbor = {"sw_if_index": sw_if_index, "flags": flags, "mac_address": mac,
                    "ip_address": ip}
        self.conn.call("ip_neighbor_add_del", is_add=is_add, neighbor=neighbor)

    def neighbors(self) -> list[NeighborDetails]:
        result = []
        for af in (0, 1):
            for d in self.conn.dump("ip_neighbor_dump", sw_if_index=ANY_INDEX, af=af):
                n = d.neighbor
                result.append(NeighborDetails(
                    n.sw_if_index, str(n.ip_address), str(n.mac_address), int(n.flags)))
        return result

    def create_vlan_subif(self, parent: int, vlan: int) -> int:
        reply = self.conn.call("create_vlan_subif", sw_if_index=parent, vlan_id=vlan)
        return int(reply.sw_if_index)

    def create_subif(
        self, parent: int, sub_id: int, flags: int, outer_vlan: int, inner_vlan: int
    ) -> int:
        reply = self.conn.call(
            "create_subif",
            sw_if_index=parent,
            sub_id=sub_id,
            sub_if_flags=flags,
            outer_vlan_id=outer_vlan,
            inner_vlan_id=inner_vlan,
        )
        return int(reply.sw_if_index)

    def delete_subif(self, sw_if_index: int) -> None:
        self.conn.call("delete_subif", sw_if_index=sw_if_index)

    def set_xconnect(self, rx: int, tx: int, enable: bool) -> None:
        self.conn.call(
            "sw_interface_set_l2_xconnect", rx_sw_if_index=rx, tx_sw_if_index=tx, enable=enable
        )

    def xconnects(self) -> dict[int, int]:
        """rx sw_if_index -> tx sw_if_index."""
        return {d.rx_sw_if_index: d.tx_sw_if_index for d in self.conn.dump("l2_xconnect_dump")}

    def l2fib_add_del(
        self, bd_id: int, mac: str, sw_if_index: int, static: bool, bvi: bool, is_add: bool
    ) -> None:
        self.conn.call(
            "l2fib_add_del",
            mac=mac,
            bd_id=bd_id,
            sw_if_index=sw_if_index,
            is_add=is_add,
            static_mac=static,
            filter_mac=False,
            bvi_mac=bvi,
        )

    def l2fib_entries(self) -> list[L2FibDetails]:
        return [
            L2FibDetails(d.bd_id, str(d.mac), d.sw_if_index, bool(d.static_mac), bool(d.bvi_mac))
            for d in self.conn.dump("l2_fib_table_dump", bd_id=ANY_INDEX)
            if not d.filter_mac
        ]

    def vxlan_add_del(
        self, src: str, dst: str, vni: int, encap_vrf: int, is_add: bool
    ) -> int:
        reply = self.conn.call(
            "vxlan_add_del_tunnel_v3",
            is_add=is_add,
            instance=ANY_INDEX,
            src_address=src,
            dst_address=dst,
            src_port=VXLAN_PORT,
            dst_port=VXLAN_PORT,
            mcast_sw_if_index=ANY_INDEX,
            encap_vrf_id=encap_vrf,
            decap_next_index=ANY_INDEX,  # l2-input: the tunnel is an L2 interface
            vni=vni,
            is_l3=False,
        )
        return int(reply.sw_if_index)

    def vxlan_tunnels(self) -> dict[int, VxlanDetails]:
        return {
            d.sw_if_index: VxlanDetails(
                str(d.src_address), str(d.dst_address), d.vni, d.encap_vrf_id
            )
            for d in self.conn.dump("vxlan_tunnel_v2_dump", sw_if_index=ANY_INDEX)
        }

    def gre_add_del(self, t: TunnelSpec, is_add: bool) -> int:
        reply = self.conn.call("gre_tunnel_add_del", is_add=is_add, tunnel={
            "type": t.kind_type, "mode": t.mode, "flags": 0, "session_id": t.session_id,
            "instance": ANY_INDEX if t.instance is None else t.instance,
            "outer_table_id": t.outer_vrf, "sw_if_index": ANY_INDEX, "src": t.src,
            "dst": t.dst})
        return int(reply.sw_if_index)

    def gre_tunnels(self) -> dict[int, TunnelSpec]:
        return {d.tunnel.sw_if_index: TunnelSpec(
            str(d.tunnel.src), str(d.tunnel.dst), d.tunnel.outer_table_id, int(d.tunnel.mode),
            d.tunnel.instance, int(d.tunnel.type), d.tunnel.session_id)
            for d in self.conn.dump("gre_tunnel_dump", sw_if_index=ANY_INDEX)}

    def ipip_add(self, t: TunnelSpec) -> int:
        reply = self.conn.call("ipip_add_tunnel", tunnel={
            "instance": ANY_INDEX if t.instance is None else t.instance, "src": t.src,
            "dst": t.dst, "sw_if_index": ANY_INDEX, "table_id": t.outer_vrf, "flags": 0,
            "mode": t.mode, "dscp": 0})
        return int(reply.sw_if_index)

    def ipip_delete(self, sw_if_index: int) -> None:
        self.conn.call("ipip_del_tunnel", sw_if_index=sw_if_index)

    def ipip_tunnels(self) -> dict[int, TunnelSpec]:
        return {d.tunnel.sw_if_index: TunnelSpec(
            str(d.tunnel.src), str(d.tunnel.dst), d.tunnel.table_id, int(d.tunnel.mode),
            d.tunnel.instance)
            for d in self.conn.dump("ipip_tunnel_dump", sw_if_index=ANY_INDEX)}

    def lcp_pair_add(self, phy: int, host_if_name: str, host_type: int, netns: str) -> int:
        reply = self.conn.call("lcp_itf_pair_add_del_v2", is_add=True, sw_if_index=phy,
                               host_if_name=host_if_name, host_if_type=host_type, netns=netns)
        return int(reply.host_sw_if_index)

    def lcp_pair_delete(self, phy: int) -> None:
        self.conn.call("lcp_itf_pair_add_del_v2", is_add=False, sw_if_index=phy)

    def lcp_pairs(self) -> dict[int, LcpPairDetails]:
        """Every Linux-CP pair by its VPP interface (the cursor get, one batch)."""
        return {d.phy_sw_if_index: LcpPairDetails(d.host_sw_if_index, d.host_if_name,
                                                  int(d.host_if_type), d.netns)
                for d in self.conn.get_all("lcp_itf_pair_get_v2", sw_if_index=ANY_INDEX)}

    def bond_create(self, bond_id: int | None, mode: int, lb: int, numa_only: bool, gso: bool,
                    mac: str | None) -> int:
        reply = self.conn.call(
            "bond_create2",
            mode=mode,
            lb=lb,
            numa_only=numa_only,
            enable_gso=gso,
            use_custom_mac=mac is not None,
            mac_address=mac or bytes(6),
            id=ANY_INDEX if bond_id is None else bond_id,
        )
        return int(reply.sw_if_index)

    def bond_delete(self, sw_if_index: int) -> None:
        self.conn.call("bond_delete", sw_if_index=sw_if_index)

    def bond_add_member(self, member: int, bond: int, passive: bool, long_timeout: bool) -> None:
        self.conn.call("bond_add_member", sw_if_index=member, bond_sw_if_index=bond,
                       is_passive=passive, is_long_timeout=long_timeout)

    def bond_detach_member(self, member: int) -> None:
        self.conn.call("bond_detach_member", sw_if_index=member)

    def bonds(self) -> dict[int, BondDetails]:
        return {
            d.sw_if_index: BondDetails(d.id, int(d.mode), int(d.lb), bool(d.numa_only))
            for d in self.conn.dump("sw_bond_interface_dump", sw_if_index=ANY_INDEX)
        }

    def bond_members(self, bond: int) -> dict[int, BondMemberDetails]:
        return {
            d.sw_if_index: BondMemberDetails(bool(d.is_passive), bool(d.is_long_timeout))
            for d in self.conn.dump("sw_member_interface_dump", sw_if_index=bond)
        }

    def memif_socket_add(self, filename: str) -> int:
        """Register a memif socket file under a new id (VPP chooses it)."""
        reply = self.conn.call(
            "memif_socket_filename_add_del_v2",
            is_add=True,
            socket_id=ANY_INDEX,
            socket_filename=filename,
        )
        return int(reply.socket_id)

    def memif_socket_delete(self, socket_id: int) -> None:
        self.conn.call(
            "memif_socket_filename_add_del_v2", is_add=False, socket_id=socket_id,
            socket_filename="",
        )

    def memif_sockets(self) -> dict[int, str]:
        return {
            d.socket_id: d.socket_filename
            for d in self.conn.dump("memif_socket_filename_dump")
        }

    def memif_create(self, socket_id: int, memif_id: int, master: bool, mac: str | None) -> int:
        reply = self.conn.call(
            "memif_create_v2",
            role=MEMIF_ROLE_MASTER if master else MEMIF_ROLE_SLAVE,
            mode=MEMIF_MODE_ETHERNET,
            id=memif_id,
            socket_id=socket_id,
            hw_addr=mac or bytes(6),
        )
        return int(reply.sw_if_index)

    def memif_delete(self, sw_if_index: int) -> None:
        self.conn.call("memif_delete", sw_if_index=sw_if_index)

    def memifs(self) -> dict[int, MemifDetails]:
        return {
            d.sw_if_index: MemifDetails(d.socket_id, d.id, int(d.role) == MEMIF_ROLE_MASTER)
            for d in self.conn.dump("memif_dump")
        }


VXLAN_PORT = 4789
MEMIF_ROLE_MASTER = 0
MEMIF_ROLE_SLAVE = 1
MEMIF_MODE_ETHERNET = 0
SUB_IF_ONE_TAG = 2  # interface_types.api sub_if_flags
SUB_IF_TWO_TAGS = 4
SUB_IF_EXACT_MATCH = 16
NEIGHBOR_STATIC = 1  # ip_neighbor.api ip_neighbor_flags
NEIGHBOR_NO_FIB_ENTRY = 2


@dataclass(frozen=True)
class NeighborDetails:
    sw_if_index: int
    ip: str
    mac: str
    flags: int


@dataclass(frozen=True)
class L2FibDetails:
    bd_id: int
    mac: str
    sw_if_index: int
    static: bool
    bvi: bool


@dataclass(frozen=True)
class VxlanDetails:
    src: str
    dst: str
    vni: int
    encap_vrf: int


@dataclass(frozen=True)
class LcpPairDetails:
    host_sw_if_index: int
    host_if_name: str
    host_type: int  # lcp.api lcp_itf_host_type: 0 tap, 1 tun
    netns: str


@dataclass(frozen=True)
class TunnelSpec:
    """A GRE or IPIP tunnel as the API takes and reports it."""

    src: str
    dst: str
    outer_vrf: int
    mode: int  # tunnel_types.api tunnel_mode: 0 p2p, 1 mp
    instance: int | None
    kind_type: int = 0  # GRE: gre_tunnel_type (0 l3, 1 teb, 2 erspan)
    session_id: int = 0


@dataclass(frozen=True)
class BondDetails:
    bond_id: int
    mode: int  # bond.api bond_mode
    lb: int  # bond.api bond_lb_algo
    numa_only: bool


@dataclass(frozen=True)
class BondMemberDetails:
    passive: bool
    long_timeout: bool


@dataclass(frozen=True)
class MemifDetails:
    socket_id: int
    memif_id: int
    master: bool


def _sub_details(d: Any) -> SubInterfaceDetails | None:
    if d.sup_sw_if_index == d.sw_if_index:
        return None
    return SubInterfaceDetails(
        parent=d.sup_sw_if_index,
        sub_id=d.sub_id,
        tags=d.sub_number_of_tags,
        outer_vlan=d.sub_outer_vlan_id,
        inner_vlan=d.sub_inner_vlan_id,
        exact_match=bool(int(d.sub_if_flags) & SUB_IF_EXACT_MATCH),
    )

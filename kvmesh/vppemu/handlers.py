"""Request handlers: decoded API requests in, dataplane operations, reply fields out.

A handler returns the fields of its reply (plain requests) or a list of `(details message,
fields)` (dumps). It raises `ApiError` to answer with a non-zero retval. Requests arrive decoded
without type conversion: addresses are raw bytes, unions carry all their arms.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kvmesh.vppemu import errors as E
from kvmesh.vppemu import state as S
from kvmesh.vppemu.errors import ApiError
from kvmesh.vppemu.state import Dataplane

VERSION = "24.06-kvmesh-emulator"

Details = list[tuple[str, dict[str, Any]]]
Result = dict[str, Any] | Details


@dataclass
class HandlerContext:
    dataplane: Dataplane
    context: int  # the request's context, echoed in details that carry one


Handler = Callable[[HandlerContext, Any], Result]
HANDLERS: dict[str, Handler] = {}


def handles(*names: str) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        for name in names:
            HANDLERS[name] = fn
        return fn

    return register


# ---------------------------------------------------------------------- codecs
def _ip(af: int, un: Any) -> S.IPAddress:
    if int(af) == 0:
        return ipaddress.IPv4Address(bytes(un.ip4))
    if int(af) == 1:
        return ipaddress.IPv6Address(bytes(un.ip6))
    raise ApiError(E.INVALID_ADDRESS_FAMILY, f"invalid address family {int(af)}")


def _interface_address(prefix: Any) -> S.IPInterface:
    addr = _ip(prefix.address.af, prefix.address.un)
    if prefix.len > addr.max_prefixlen:
        raise ApiError(E.INVALID_VALUE, f"prefix length {prefix.len}")
    return ipaddress.ip_interface((addr, prefix.len))


def _network(prefix: Any) -> S.IPNetwork:
    addr = _ip(prefix.address.af, prefix.address.un)
    try:
        return ipaddress.ip_network((addr, prefix.len))
    except ValueError as exc:
        raise ApiError(E.IP_PREFIX_INVALID, f"invalid prefix {addr}/{prefix.len}") from exc


def decode_address(raw: Any) -> S.IPAddress:
    """VPP's ip_address_decode: af 1 is IPv6, anything else IPv4 (no refusal)."""
    if int(raw.af) == 1:
        return ipaddress.IPv6Address(bytes(raw.un.ip6))
    return ipaddress.IPv4Address(bytes(raw.un.ip4)[:4])


def address_fields(addr: S.IPAddress) -> dict[str, Any]:
    if addr.version == 6:
        return {"af": 1, "un": {"ip6": addr.packed}}
    return {"af": 0, "un": {"ip4": addr.packed}}


def prefix_fields(addr: S.IPAddress, length: int) -> dict[str, Any]:
    return {"address": address_fields(addr), "len": length}


def _path(raw: Any) -> S.Path:
    is_ip6 = int(raw.proto) == 1
    packed = bytes(raw.nh.address.ip6 if is_ip6 else raw.nh.address.ip4)
    next_hop: S.IPAddress | None = (
        ipaddress.IPv6Address(packed) if is_ip6 else ipaddress.IPv4Address(packed)
    )
    if next_hop is not None and next_hop.packed == bytes(len(packed)):
        next_hop = None
    return S.Path(
        sw_if_index=raw.sw_if_index,
        next_hop=next_hop,
        weight=raw.weight,
        preference=raw.preference,
        path_type=int(raw.type),
        nh_table_id=raw.table_id,
    )


def path_fields(path: S.Path, is_ip6: bool) -> dict[str, Any]:
    nh_ip6 = path.next_hop.version == 6 if path.next_hop is not None else is_ip6
    address: dict[str, Any] = {}
    if path.next_hop is not None:
        address = {"ip6" if nh_ip6 else "ip4": path.next_hop.packed}
    return {
        "sw_if_index": path.sw_if_index,
        "table_id": path.nh_table_id,
        "rpf_id": 0,
        "weight": path.weight,
        "preference": path.preference,
        "type": path.path_type,
        "flags": 0,
        "proto": 1 if nh_ip6 else 0,
        "nh": {
            "address": address,
            "via_label": 0,
            "obj_id": 0,
            "classify_table_index": S.INVALID_INDEX,
        },
        "n_labels": 0,
        # vpp_papi packs fixed-size arrays only when given in full.
        "label_stack": [{}] * 16,
    }


def _mac(raw: Any) -> bytes:
    return bytes(raw)


# ---------------------------------------------------------------------- misc
@handles("show_version")
def show_version(_ctx: HandlerContext, _msg: Any) -> Result:
    return {
        "program": "vpe",
        "version": VERSION,
        "build_date": "emulated",
        "build_directory": os.path.dirname(__file__),
    }


# ---------------------------------------------------------------------- interfaces
@handles("create_loopback")
def create_loopback(ctx: HandlerContext, msg: Any) -> Result:
    return {"sw_if_index": ctx.dataplane.create_loopback(_mac(msg.mac_address))}


@handles("create_loopback_instance")
def create_loopback_instance(ctx: HandlerContext, msg: Any) -> Result:
    instance = msg.user_instance if msg.is_specified else None
    return {"sw_if_index": ctx.dataplane.create_loopback(_mac(msg.mac_address), instance)}


@handles("delete_loopback")
def delete_loopback(ctx: HandlerContext, msg: Any) -> Result:
    ctx.dataplane.delete_loopback(msg.sw_if_index)
    return {}


@handles("tap_create_v2", "tap_create_v3")
def tap_create(ctx: HandlerContext, msg: Any) -> Result:
    dp = ctx.dataplane
    sw_if_index = dp.create_tap(
        tap_id=msg.id,
        mac=None if msg.use_random_mac else _mac(msg.mac_address),
        rx_ring=msg.rx_ring_sz,
        tx_ring=msg.tx_ring_sz,
        host_if_name=msg.host_if_name if msg.host_if_name_set else "",
        host_mtu=msg.host_mtu_size if msg.host_mtu_set else None,
        host_namespace=msg.host_namespace if msg.host_namespace_set else "",
        host_bridge=msg.host_bridge if msg.host_bridge_set else "",
        flags=int(msg.tap_flags),
        host_mac=_mac(msg.host_mac_addr) if msg.host_mac_addr_set else None,
    )
    if msg.tag:
        dp.set_tag(sw_if_index, msg.tag, True)
    return {"sw_if_index": sw_if_index}


@handles("tap_delete_v2")
def tap_delete(ctx: HandlerContext, msg: Any) -> Result:
    ctx.dataplane.delete_tap(msg.sw_if_index)
    return {}


@handles("af_packet_create_v3")
def af_packet_create(ctx: HandlerContext, msg: Any) -> Result:
    mac = None if msg.use_random_hw_addr else _mac(msg.hw_addr)
    return {"sw_if_index": ctx.dataplane.create_af_packet(msg.host_if_name, mac)}


@handles("af_packet_delete")
def af_packet_delete(ctx: HandlerContext, msg: Any) -> Result:
    ctx.dataplane.delete_af_packet(msg.host_if_name)
    return {}


@handles("sw_interface_set_flags")
def set_flags(ctx: HandlerContext, msg: Any) -> Result:
    ctx.dataplane.set_flags(msg.sw_if_index, int(msg.flags))
    return {}


@handles("hw_interface_set_mtu")
def set_mtu(ctx: HandlerContext, msg: Any) -> Result:
    ctx.dataplane.set_mtu(msg.sw_if_index, msg.mtu)
    return {}


@handles("sw_interface_set_mtu")
def set_protocol_mtu(ctx: HandlerContext, msg: Any) -> Result:
    ctx.dataplane.set_protocol_mtu(msg.sw_if_index, [int(m) for m in msg.mtu])
    return {}


@handles("sw_interface_set_mac_address")
def set_mac(ctx: HandlerContext, msg: Any) -> Result:
    ctx.dataplane.set_mac(msg.sw_if_index, _mac(msg.mac_address))
    return {}


@handles("sw_interface_tag_add_del")
def tag_add_del(ctx: HandlerContext, msg: Any) -> Result:
    ctx.dataplane.set_tag(msg.sw_if_index, msg.tag, bool(msg.is_add))
    return {}


@handles("sw_interface_add_del_address")
def add_del_address(ctx: HandlerContext, msg: Any) -> Result:
    address = None if msg.del_all else _interface_address(msg.prefix)
    ctx.dataplane.add_del_address(msg.sw_if_index, address, bool(msg.is_add), bool(msg.del_all))
    return {}


@handles("sw_interface_set_table")
def set_table(ctx: HandlerContext, msg: Any) -> Result:
    ctx.dataplane.set_table(msg.sw_if_index, bool(msg.is_ipv6), msg.vrf_id)
    return {}


@handles("sw_interface_get_table")
def get_table(ctx: HandlerContext, msg: Any) -> Result:
    return {"vrf_id": ctx.dataplane.get_table(msg.sw_if_index, bool(msg.is_ipv6))}


@handles("sw_interface_set_unnumbered")
def set_unnumbered(ctx: HandlerContext, msg: Any) -> Result:
    ctx.dataplane.set_unnumbered(msg.sw_if_index, msg.unnumbered_sw_if_index, bool(msg.is_add))
    return {}


def interface_details(ctx: HandlerContext, iface: S.Interface) -> dict[str, Any]:
    sub = iface.sub
    return {
        "context": ctx.context,
        "sw_if_index": iface.sw_if_index,
        "sup_sw_if_index": iface.sw_if_index if sub is None else sub.parent,
        "l2_address": iface.mac,
        "flags": ctx.dataplane.interface_flags(iface),
        "type": 0 if sub is None else S.IF_TYPE_SUB,
        **({} if sub is None else {
            "sub_id": sub.sub_id,
            "sub_number_of_tags": sub.tags,
            "sub_outer_vlan_id": sub.outer_vlan,
            "sub_inner_vlan_id": sub.inner_vlan,
            "sub_if_flags": sub.flags,
        }),
        "link_duplex": 0 if iface.kind == "local" else 2,
        "link_speed": 0,
        "link_mtu": ctx.dataplane.link_mtu(iface),
        "mtu": list(iface.sw_mtu),
        "vtr_op": iface.vtr[0],
        "vtr_push_dot1q": iface.vtr[1],
        "vtr_tag1": iface.vtr[2],
        "vtr_tag2": iface.vtr[3],
        "b_dmac": bytes(6),
        "b_smac": bytes(6),
        "interface_name": iface.name,
        "interface_dev_type": iface.dev_type,
        "tag": iface.tag,
    }


@handles("sw_interface_dump")
def sw_interface_dump(ctx: HandlerContext, msg: Any) -> Result:
    result: Details = []
    for iface in ctx.dataplane.interfaces.values():
        if msg.name_filter_valid:
            if msg.name_filter not in iface.name:
                continue
        elif msg.sw_if_index != S.INVALID_INDEX and msg.sw_if_index != iface.sw_if_index:
            continue
        result.append(("sw_interface_details", interface_details(ctx, iface)))
    return result


@handles("sw_interface_tap_v2_dump")
def tap_dump(ctx: HandlerContext, msg: Any) -> Result:
    result: Details = []
    for iface in ctx.dataplane.interfaces.values():
        if iface.tap is None:
            continue
        if msg.sw_if_index not in (S.INVALID_INDEX, iface.sw_if_index):
            continue
        tap = iface.tap
        result.append(
            (
                "sw_interface_tap_v2_details",
                {
                    "context": ctx.context,
                    "sw_if_index": iface.sw_if_index,
                    "id": tap.tap_id,
                    "tx_ring_sz": tap.tx_ring,
                    "rx_ring_sz": tap.rx_ring,
                    "host_mtu_size": tap.host_mtu,
                    "host_mac_addr": tap.host_mac,
                    "host_ip4_prefix": {"address": bytes(4), "len": 0},
                    "host_ip6_prefix": {"address": bytes(16), "len": 0},
                    "tap_flags": tap.flags,
                    "dev_name": iface.name,
                    "host_if_name": tap.host_if_name,
                    "host_namespace": tap.host_namespace,
                    "host_bridge": tap.host_bridge,
                },
            )
        )
    return result


@handles("af_packet_dump")
def af_packet_dump(ctx: HandlerContext, _msg: Any) -> Result:
    return [
        (
            "af_packet_details",
            {"context": ctx.context, "sw_if_index": i.sw_if_index, "host_if_name": i.host_if_name},
        )
        for i in ctx.dataplane.interfaces.values()
        if i.kind == "af_packet"
    ]


# ---------------------------------------------------------------------- IP
@handles("ip_address_dump")
def ip_address_dump(ctx: HandlerContext, msg: Any) -> Result:
    iface = ctx.dataplane.interfaces.get(msg.sw_if_index)
    if iface is None:
        return []
    version = 6 if msg.is_ipv6 else 4
    return [
        (
            "ip_address_details",
            {
                "context": ctx.context,
                "sw_if_index": iface.sw_if_index,
                "prefix": prefix_fields(a.ip, a.network.prefixlen),
            },
        )
        for a in iface.addresses
        if a.version == version
    ]


@handles("ip_unnumbered_dump")
def ip_unnumbered_dump(ctx: HandlerContext, msg: Any) -> Result:
    return [
        (
            "ip_unnumbered_details",
            {
                "context": ctx.context,
                "sw_if_index": i.sw_if_index,
                "ip_sw_if_index": i.unnumbered_from,
            },
        )
        for i in ctx.dataplane.interfaces.values()
        if i.unnumbered_from is not None and msg.sw_if_index in (S.INVALID_INDEX, i.sw_if_index)
    ]


@handles("ip_table_add_del")
def ip_table_add_del(ctx: HandlerContext, msg: Any) -> Result:
    table = msg.table
    ctx.dataplane.add_del_table(bool(table.is_ip6), table.table_id, table.name, bool(msg.is_add))
    return {}


@handles("ip_table_dump")
def ip_table_dump(ctx: HandlerContext, _msg: Any) -> Result:
    return [
        (
            "ip_table_details",
            {
                "context": ctx.context,
                "table": {"table_id": table_id, "is_ip6": is_ip6, "name": name},
            },
        )
        # VPP walks each family's pool of tables: IPv4 then IPv6, by FIB index.
        for (is_ip6, table_id), name in sorted(
            ctx.dataplane.tables.items(),
            key=lambda item: (item[0][0], ctx.dataplane.fib_indices[item[0]]))
    ]


@handles("ip_route_add_del")
def ip_route_add_del(ctx: HandlerContext, msg: Any) -> Result:
    route = msg.route
    prefix = _network(route.prefix)
    paths = [_path(p) for p in route.paths]
    stats_index = ctx.dataplane.add_del_route(
        bool(msg.is_add), bool(msg.is_multipath), route.table_id, prefix, paths
    )
    return {"stats_index": stats_index}


@handles("ip_route_dump")
def ip_route_dump(ctx: HandlerContext, msg: Any) -> Result:
    is_ip6 = bool(msg.table.is_ip6)
    result: Details = []
    for entry in ctx.dataplane.route_entries(is_ip6, msg.table.table_id):
        result.append(
            (
                "ip_route_details",
                {
                    "context": ctx.context,
                    "route": {
                        "table_id": entry.table_id,
                        "stats_index": entry.stats_index,
                        "prefix": prefix_fields(
                            entry.prefix.network_address, entry.prefix.prefixlen
                        ),
                        "n_paths": len(entry.paths),
                        "paths": [path_fields(p, is_ip6) for p in entry.paths],
                    },
                },
            )
        )
    return result


# ---------------------------------------------------------------------- L2
def _bd_flags(msg: Any) -> int:
    flags = 0
    for field_name, bit in (
        ("learn", S.BD_LEARN),
        ("forward", S.BD_FWD),
        ("flood", S.BD_FLOOD),
        ("uu_flood", S.BD_UU_FLOOD),
        ("arp_term", S.BD_ARP_TERM),
        ("arp_ufwd", S.BD_ARP_UFWD),
    ):
        if getattr(msg, field_name):
            flags |= bit
    return flags


@handles("bridge_domain_add_del_v2")
def bd_add_del(ctx: HandlerContext, msg: Any) -> Result:
    bd_id = ctx.dataplane.bd_add_del(
        msg.bd_id, _bd_flags(msg), msg.mac_age, msg.bd_tag, bool(msg.is_add)
    )
    return {"bd_id": bd_id}


@handles("bridge_flags")
def bridge_flags(ctx: HandlerContext, msg: Any) -> Result:
    resulting = ctx.dataplane.bd_set_flags(msg.bd_id, int(msg.flags), bool(msg.is_set))
    return {"resulting_feature_bitmap": resulting}


@handles("sw_interface_set_l2_bridge")
def set_l2_bridge(ctx: HandlerContext, msg: Any) -> Result:
    ctx.dataplane.set_l2_bridge(
        msg.rx_sw_if_index, msg.bd_id, int(msg.port_type), msg.shg, bool(msg.enable)
    )
    return {}


@handles("bridge_domain_dump")
def bridge_domain_dump(ctx: HandlerContext, msg: Any) -> Result:
    result: Details = []
    for bd in sorted(ctx.dataplane.bridge_domains.values(), key=lambda b: b.bd_id):
        if msg.bd_id not in (S.INVALID_INDEX, bd.bd_id):
            continue
        if msg.sw_if_index != S.INVALID_INDEX and msg.sw_if_index not in bd.members:
            continue
        members = [
            {"context": ctx.context, "sw_if_index": idx, "shg": shg}
            for idx, shg in sorted(bd.members.items())
        ]
        result.append(
            (
                "bridge_domain_details",
                {
                    "context": ctx.context,
                    "bd_id": bd.bd_id,
                    "flood": bool(bd.flags & S.BD_FLOOD),
                    "uu_flood": bool(bd.flags & S.BD_UU_FLOOD),
                    "forward": bool(bd.flags & S.BD_FWD),
                    "learn": bool(bd.flags & S.BD_LEARN),
                    "arp_term": bool(bd.flags & S.BD_ARP_TERM),
                    "arp_ufwd": bool(bd.flags & S.BD_ARP_UFWD),
                    "mac_age": bd.mac_age,
                    "bd_tag": bd.tag,
                    "bvi_sw_if_index": S.INVALID_INDEX if bd.bvi is None else bd.bvi,
                    "uu_fwd_sw_if_index": S.INVALID_INDEX,
                    "n_sw_ifs": len(members),
                    "sw_if_details": members,
                },
            )
        )
    return result

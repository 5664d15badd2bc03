"""Handlers of the nat44-ed plugin's messages (state in `kvmesh.vppemu.nat44`)."""

from __future__ import annotations

import ipaddress
from typing import Any

from kvmesh.vppemu import nat44 as N
from kvmesh.vppemu.handlers import Details, HandlerContext, Result, handles

# nat_reset_timeouts: VPP's defaults (seconds)
TIMEOUTS = {"udp": 300, "tcp_established": 7440, "tcp_transitory": 240, "icmp": 60}
ENDPOINT_DEPENDENT = 1


def _ip4(raw: Any) -> ipaddress.IPv4Address:
    return ipaddress.IPv4Address(bytes(raw))


@handles("nat44_ed_plugin_enable_disable")
def plugin_enable_disable(ctx: HandlerContext, msg: Any) -> Result:
    nat = ctx.dataplane.nat44
    if msg.enable:
        nat.enable(msg.sessions, msg.inside_vrf, msg.outside_vrf, int(msg.flags))
    else:
        nat.disable()
    return {}


@handles("nat44_show_running_config")
def show_running_config(ctx: HandlerContext, _msg: Any) -> Result:
    nat = ctx.dataplane.nat44
    return {
        "inside_vrf": nat.inside_vrf,
        "outside_vrf": nat.outside_vrf,
        "sessions": nat.sessions,  # 0 while disabled (VPP zeroes its running config)
        "translation_buckets": nat.sessions // 2 if nat.enabled else 0,
        "timeouts": TIMEOUTS,
        "flags": ENDPOINT_DEPENDENT,
    }


@handles("nat44_add_del_address_range")
def add_del_address_range(ctx: HandlerContext, msg: Any) -> Result:
    nat = ctx.dataplane.nat44
    first, last = _ip4(msg.first_ip_address), _ip4(msg.last_ip_address)
    twice_nat = bool(int(msg.flags) & N.TWICE_NAT)
    if msg.is_add:
        nat.add_addresses(first, last, msg.vrf_id, twice_nat)
    else:
        nat.del_addresses(first, last, twice_nat)
    return {}


@handles("nat44_address_dump")
def address_dump(ctx: HandlerContext, _msg: Any) -> Result:
    addresses = ctx.dataplane.nat44.addresses
    ordered = [a for a in addresses if not a.twice_nat] + [a for a in addresses if a.twice_nat]
    return [("nat44_address_details", {
        "context": ctx.context, "ip_address": a.address.packed, "vrf_id": a.vrf_id,
        "flags": N.TWICE_NAT if a.twice_nat else 0}) for a in ordered]


@handles("nat44_interface_add_del_feature")
def interface_add_del_feature(ctx: HandlerContext, msg: Any) -> Result:
    ctx.dataplane.interface(msg.sw_if_index)
    nat = ctx.dataplane.nat44
    inside = bool(int(msg.flags) & N.INSIDE)
    if msg.is_add:
        nat.add_interface(msg.sw_if_index, inside)
    else:
        nat.del_interface(msg.sw_if_index, inside)
    return {}


@handles("nat44_interface_dump")
def interface_dump(ctx: HandlerContext, _msg: Any) -> Result:
    return [("nat44_interface_details", {"context": ctx.context, "sw_if_index": idx,
                                         "flags": flags})
            for idx, flags in sorted(ctx.dataplane.nat44.interfaces.items())]


@handles("nat44_add_del_static_mapping_v2")
def add_del_static_mapping(ctx: HandlerContext, msg: Any) -> Result:
    # VPP 24.06's v2 handler takes any non-zero external_sw_if_index as "the address of this
    # interface" (v1 compares with ~0): an address mapping sends 0.
    external_if = msg.external_sw_if_index
    mapping = N.StaticMapping(
        local=_ip4(msg.local_ip_address),
        external=_ip4(msg.external_ip_address),
        local_port=msg.local_port,
        external_port=msg.external_port,
        protocol=msg.protocol,
        vrf_id=msg.vrf_id,
        flags=int(msg.flags),
        tag=msg.tag,
        external_sw_if_index=external_if if external_if != 0 else N.INVALID_INDEX,
    )
    if msg.is_add:
        ctx.dataplane.nat44.add_mapping(mapping)
    else:
        ctx.dataplane.nat44.del_mapping(mapping)
    return {}


def _mapping_fields(ctx: HandlerContext, m: N.StaticMapping) -> dict[str, Any]:
    return {
        "context": ctx.context, "flags": m.flags & (N.TWICE_NAT | N.SELF_TWICE_NAT |
                                                    N.OUT2IN_ONLY | N.ADDR_ONLY),
        "local_ip_address": m.local.packed,
        "external_ip_address": (bytes(4) if m.external_sw_if_index != N.INVALID_INDEX
                                else m.external.packed),
        "protocol": m.protocol, "local_port": m.local_port, "external_port": m.external_port,
        "external_sw_if_index": m.external_sw_if_index, "vrf_id": m.vrf_id, "tag": m.tag,
    }


@handles("nat44_static_mapping_dump")
def static_mapping_dump(ctx: HandlerContext, _msg: Any) -> Result:
    nat = ctx.dataplane.nat44
    result: Details = [("nat44_static_mapping_details", _mapping_fields(ctx, m))
                       for m in [*nat.mappings, *nat.resolve]]
    return result

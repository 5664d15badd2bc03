"""Handlers of arp.api (proxy ARP), l3xc.api, ip6_nd.api (router advertisements) and ip.api's
`sw_interface_ip6_enable_disable` (state in `proxy_arp`, `l3xc`, `ip6_nd`)."""

from __future__ import annotations

import ipaddress
from typing import Any

from kvmesh.vppemu import errors as E
from kvmesh.vppemu.errors import ApiError
from kvmesh.vppemu.handlers import (
    Details,
    HandlerContext,
    Result,
    _path,
    decode_address,
    handles,
    path_fields,
    prefix_fields,
)
from kvmesh.vppemu.ip6_nd import INFINITE, PrefixConfig, RaConfig, RaInfo

IP4 = ipaddress.IPv4Address
ANY = 0xFFFFFFFF
L3XC_VERSION = (1, 0)  # L3XC_PLUGIN_VERSION_MAJOR/MINOR


# ---------------------------------------------------------------------- proxy ARP
@handles("proxy_arp_add_del")
def proxy_arp_add_del(ctx: HandlerContext, msg: Any) -> Result:
    p = msg.proxy
    ctx.dataplane.proxy_arp.add_del(p.table_id, IP4(bytes(p.low)), IP4(bytes(p.hi)),
                                    bool(msg.is_add))
    return {}


@handles("proxy_arp_dump")
def proxy_arp_dump(ctx: HandlerContext, _msg: Any) -> Result:
    return [("proxy_arp_details", {"context": ctx.context, "proxy": {
        "table_id": r.fib_index, "low": r.low.packed, "hi": r.high.packed}})
        for r in ctx.dataplane.proxy_arp.ranges]


@handles("proxy_arp_intfc_enable_disable")
def proxy_arp_intfc_enable_disable(ctx: HandlerContext, msg: Any) -> Result:
    ctx.dataplane.proxy_arp.enable(msg.sw_if_index, bool(msg.enable))
    return {}


@handles("proxy_arp_intfc_dump")
def proxy_arp_intfc_dump(ctx: HandlerContext, _msg: Any) -> Result:
    return [("proxy_arp_intfc_details", {"context": ctx.context, "sw_if_index": index})
            for index in sorted(ctx.dataplane.proxy_arp.enabled)]


# ---------------------------------------------------------------------- L3XC
@handles("l3xc_plugin_get_version")
def l3xc_plugin_get_version(ctx: HandlerContext, _msg: Any) -> Result:
    return {"major": L3XC_VERSION[0], "minor": L3XC_VERSION[1]}


@handles("l3xc_update")
def l3xc_update(ctx: HandlerContext, msg: Any) -> Result:
    xc = msg.l3xc
    paths = [(_path(p), int(p.proto) == 1) for p in list(xc.paths)[:xc.n_paths]]
    ctx.dataplane.l3xc.update(xc.sw_if_index, bool(xc.is_ip6), paths)
    return {"stats_index": 0}


@handles("l3xc_del")
def l3xc_del(ctx: HandlerContext, msg: Any) -> Result:
    ctx.dataplane.l3xc.delete(msg.sw_if_index, bool(msg.is_ip6))
    return {}


@handles("l3xc_dump")
def l3xc_dump(ctx: HandlerContext, msg: Any) -> Result:
    result: Details = []
    for xc in ctx.dataplane.l3xc.walk(msg.sw_if_index):
        result.append(("l3xc_details", {"context": ctx.context, "l3xc": {
            "sw_if_index": xc.sw_if_index, "is_ip6": False,  # VPP never fills it
            "n_paths": len(xc.paths),
            "paths": [path_fields(p, xc.is_ip6) for p in xc.paths]}}))
    return result


# ---------------------------------------------------------------------- IPv6 ND
@handles("sw_interface_ip6_enable_disable")
def sw_interface_ip6_enable_disable(ctx: HandlerContext, msg: Any) -> Result:
    nd = ctx.dataplane.ip6_nd
    ctx.dataplane.interface(msg.sw_if_index)  # VALIDATE_SW_IF_INDEX
    if msg.enable:
        if not nd.link_enable(msg.sw_if_index):
            raise ApiError(E.VALUE_EXIST, "IPv6 is enabled already (one more lock taken)")
    else:
        nd.link_disable(msg.sw_if_index)
    return {}


@handles("sw_interface_ip6nd_ra_config")
def sw_interface_ip6nd_ra_config(ctx: HandlerContext, msg: Any) -> Result:
    ctx.dataplane.interface(msg.sw_if_index)  # VALIDATE_SW_IF_INDEX
    ctx.dataplane.ip6_nd.config(msg.sw_if_index, RaConfig(
        suppress=msg.suppress == 1, managed=msg.managed == 1, other=msg.other == 1,
        ll_option=msg.ll_option == 1, send_unicast=msg.send_unicast == 1,
        cease=msg.cease == 1, is_no=msg.is_no == 1, default_router=msg.default_router == 1,
        max_interval=msg.max_interval, min_interval=msg.min_interval, lifetime=msg.lifetime,
        initial_count=msg.initial_count, initial_interval=msg.initial_interval))
    return {}


@handles("sw_interface_ip6nd_ra_prefix")
def sw_interface_ip6nd_ra_prefix(ctx: HandlerContext, msg: Any) -> Result:
    ctx.dataplane.interface(msg.sw_if_index)  # VALIDATE_SW_IF_INDEX
    address = decode_address(msg.prefix.address)
    # VPP reads the IPv6 arm of the address whatever its family says.
    ip6 = ipaddress.IPv6Address(bytes(msg.prefix.address.un.ip6)) if address.version == 4 \
        else address
    ctx.dataplane.ip6_nd.prefix(msg.sw_if_index, PrefixConfig(
        ip6, msg.prefix.len, use_default=bool(msg.use_default),
        no_advertise=bool(msg.no_advertise), off_link=bool(msg.off_link),
        no_autoconfig=bool(msg.no_autoconfig), no_onlink=bool(msg.no_onlink),
        is_no=bool(msg.is_no), valid_lifetime=msg.val_lifetime,
        preferred_lifetime=msg.pref_lifetime))
    return {}


def _ra_details(ctx: HandlerContext, ra: RaInfo) -> dict[str, Any]:
    prefixes = [{
        "prefix": prefix_fields(p.address, p.length), "onlink_flag": p.onlink,
        "autonomous_flag": p.autonomous, "val_lifetime": p.valid_lifetime,
        "pref_lifetime": p.preferred_lifetime,
        # Seconds left; the emulator's clock stands still.
        "valid_lifetime_expires": 0.0 if p.valid_lifetime == INFINITE else
        float(p.valid_lifetime),
        "pref_lifetime_expires": 0.0 if p.preferred_lifetime == INFINITE else
        float(p.preferred_lifetime),
        "decrement_lifetime_flag": p.decrement_lifetime, "no_advertise": not p.enabled}
        for p in ra.prefixes.values()]
    return {
        "context": ctx.context, "sw_if_index": ra.sw_if_index, "cur_hop_limit": 64,
        "adv_managed_flag": ra.managed, "adv_other_flag": ra.other,
        "adv_router_lifetime": ra.lifetime, "adv_neighbor_reachable_time": 0,
        "adv_retransmit_interval": 0, "adv_link_mtu": ra.link_mtu,
        "send_radv": ra.send_radv, "cease_radv": ra.cease_radv,
        "send_unicast": ra.send_unicast, "adv_link_layer_address": ra.link_layer_address,
        "max_radv_interval": ra.max_interval, "min_radv_interval": ra.min_interval,
        "last_radv_time": 0.0, "last_multicast_time": 0.0, "next_multicast_time": 0.0,
        "initial_adverts_count": ra.initial_count,
        "initial_adverts_interval": float(ra.initial_interval),
        "initial_adverts_sent": False, "n_advertisements_sent": 0, "n_solicitations_rcvd": 0,
        "n_solicitations_dropped": 0, "n_prefixes": len(prefixes), "prefixes": prefixes}


@handles("sw_interface_ip6nd_ra_dump")
def sw_interface_ip6nd_ra_dump(ctx: HandlerContext, msg: Any) -> Result:
    return [("sw_interface_ip6nd_ra_details", _ra_details(ctx, ra))
            for ra in ctx.dataplane.ip6_nd.walk(msg.sw_if_index)]



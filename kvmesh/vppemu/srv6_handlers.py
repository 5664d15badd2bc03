"""Handlers of sr.api (state in `kvmesh.vppemu.srv6`)."""

from __future__ import annotations

import ipaddress
from typing import Any

from kvmesh.vppemu.handlers import (
    Details,
    HandlerContext,
    Result,
    address_fields,
    decode_address,
    handles,
)
from kvmesh.vppemu.srv6 import IP6, LOOKUP_TABLE, LocalSid

MAX_SIDS = 16


def _segments(sids: Any) -> list[ipaddress.IPv6Address]:
    return [IP6(bytes(s)) for s in list(sids.sids)[:min(sids.num_sids, MAX_SIDS)]]


@handles("sr_localsid_add_del")
def sr_localsid_add_del(ctx: HandlerContext, msg: Any) -> Result:
    next_hop = decode_address(msg.nh_addr)
    ctx.dataplane.srv6.add_del_localsid(bool(msg.is_del), LocalSid(
        IP6(bytes(msg.localsid)), bool(msg.end_psp), int(msg.behavior), msg.sw_if_index,
        msg.vlan_index, msg.fib_table, None if next_hop.packed == bytes(4) else next_hop))
    return {}


@handles("sr_localsids_dump")
def sr_localsids_dump(ctx: HandlerContext, msg: Any) -> Result:
    result: Details = []
    for sid in ctx.dataplane.srv6.localsids.values():
        hop = sid.next_hop or ipaddress.IPv4Address(0)
        result.append(("sr_localsids_details", {
            "context": ctx.context, "addr": sid.sid.packed, "end_psp": sid.end_psp,
            "behavior": sid.behavior, "fib_table": sid.fib_table, "vlan_index": sid.vlan_index,
            "xconnect_nh_addr": address_fields(hop),
            # VPP reads the lookup table of End.T/DT4/DT6 from a field it never set: table 0.
            "xconnect_iface_or_vrf_table": 0 if sid.behavior in LOOKUP_TABLE else
            sid.sw_if_index}))
    return result


@handles("sr_policy_add_v2")
def sr_policy_add_v2(ctx: HandlerContext, msg: Any) -> Result:
    ctx.dataplane.srv6.add_policy(
        IP6(bytes(msg.bsid_addr)), _segments(msg.sids), IP6(bytes(msg.encap_src)),
        msg.sids.weight, int(msg.type), msg.fib_table, bool(msg.is_encap))
    return {}


@handles("sr_policy_mod_v2")
def sr_policy_mod_v2(ctx: HandlerContext, msg: Any) -> Result:
    ctx.dataplane.srv6.mod_policy(IP6(bytes(msg.bsid_addr)), msg.sr_policy_index,
                                  int(msg.operation), msg.sl_index, msg.sids.weight,
                                  _segments(msg.sids))
    return {}


@handles("sr_policy_del")
def sr_policy_del(ctx: HandlerContext, msg: Any) -> Result:
    ctx.dataplane.srv6.del_policy(IP6(bytes(msg.bsid_addr)), msg.sr_policy_index)
    return {}


@handles("sr_set_encap_source")
def sr_set_encap_source(ctx: HandlerContext, msg: Any) -> Result:
    ctx.dataplane.srv6.encap_source = IP6(bytes(msg.encaps_source))
    return {}


@handles("sr_policies_v2_dump")
def sr_policies_v2_dump(ctx: HandlerContext, msg: Any) -> Result:
    result: Details = []
    for p in sorted(ctx.dataplane.srv6.policies.values(), key=lambda p: p.index):
        lists = [{"num_sids": len(sl.segments), "weight": sl.weight,
                  "sids": [s.packed for s in sl.segments] + [bytes(16)] * (
                      MAX_SIDS - len(sl.segments))} for sl in p.lists]
        result.append(("sr_policies_v2_details", {
            "context": ctx.context, "bsid": p.bsid.packed, "encap_src": p.encap_src.packed,
            "type": p.policy_type, "is_encap": p.is_encap, "fib_table": p.fib_table,
            "num_sid_lists": len(lists), "sid_lists": lists}))
    return result


@handles("sr_steering_add_del")
def sr_steering_add_del(ctx: HandlerContext, msg: Any) -> Result:
    traffic_type = int(msg.traffic_type)
    if traffic_type == 2:
        ctx.dataplane.interface(msg.sw_if_index)  # VALIDATE_SW_IF_INDEX
    address = decode_address(msg.prefix.address)
    prefix = ipaddress.ip_network((address, min(msg.prefix.len, address.max_prefixlen)),
                                  strict=False)
    ctx.dataplane.srv6.steer(bool(msg.is_del), IP6(bytes(msg.bsid_addr)), traffic_type,
                             msg.table_id, prefix, msg.sw_if_index)
    return {}


@handles("sr_steering_pol_dump")
def sr_steering_pol_dump(ctx: HandlerContext, msg: Any) -> Result:
    srv6 = ctx.dataplane.srv6
    result: Details = []
    for s in srv6.steerings.values():
        address, length, table, sw_if_index = srv6.steering_union_fields(s)
        result.append(("sr_steering_pol_details", {
            "context": ctx.context, "traffic_type": s.traffic_type, "fib_table": table,
            "prefix": {"address": address_fields(address), "len": length},
            "sw_if_index": sw_if_index, "bsid": s.bsid.packed}))
    return result

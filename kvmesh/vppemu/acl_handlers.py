"""Handlers of the acl plugin's messages (state in `kvmesh.vppemu.acl`)."""

from __future__ import annotations

import ipaddress
from typing import Any

from kvmesh.vppemu import errors as E
from kvmesh.vppemu.acl import AclRule, Network
from kvmesh.vppemu.errors import ApiError
from kvmesh.vppemu.handlers import Details, HandlerContext, Result, handles, prefix_fields

ANY_INDEX = 0xFFFFFFFF


def _network(prefix: Any, retval: int) -> Network:
    """A rule's prefix; host bits set or a bad family/length refuse as VPP's ip_prefix_decode2."""
    af = int(prefix.address.af)
    if af not in (0, 1):
        raise ApiError(retval, f"invalid address family {af}")
    packed = bytes(prefix.address.un.ip6 if af == 1 else prefix.address.un.ip4)
    address = ipaddress.ip_address(packed[:16] if af == 1 else packed[:4])
    try:
        return ipaddress.ip_network((address, prefix.len))
    except ValueError as exc:
        raise ApiError(retval, f"invalid prefix {address}/{prefix.len}") from exc


def _rule(raw: Any) -> AclRule:
    return AclRule(
        action=int(raw.is_permit),
        src=_network(raw.src_prefix, E.INVALID_SRC_ADDRESS),
        dst=_network(raw.dst_prefix, E.INVALID_DST_ADDRESS),
        proto=int(raw.proto),
        sport=(raw.srcport_or_icmptype_first, raw.srcport_or_icmptype_last),
        dport=(raw.dstport_or_icmpcode_first, raw.dstport_or_icmpcode_last),
        tcp_flags_mask=raw.tcp_flags_mask,
        tcp_flags_value=raw.tcp_flags_value,
    )


def _rule_fields(rule: AclRule) -> dict[str, Any]:
    return {
        "is_permit": rule.action,
        "src_prefix": prefix_fields(rule.src.network_address, rule.src.prefixlen),
        "dst_prefix": prefix_fields(rule.dst.network_address, rule.dst.prefixlen),
        "proto": rule.proto,
        "srcport_or_icmptype_first": rule.sport[0],
        "srcport_or_icmptype_last": rule.sport[1],
        "dstport_or_icmpcode_first": rule.dport[0],
        "dstport_or_icmpcode_last": rule.dport[1],
        "tcp_flags_mask": rule.tcp_flags_mask,
        "tcp_flags_value": rule.tcp_flags_value,
    }


@handles("acl_add_replace")
def acl_add_replace(ctx: HandlerContext, msg: Any) -> Result:
    rules = [_rule(raw) for raw in msg.r]
    index = ctx.dataplane.acl.add_replace(msg.acl_index, msg.tag, rules)
    return {"acl_index": index}


@handles("acl_del")
def acl_del(ctx: HandlerContext, msg: Any) -> Result:
    ctx.dataplane.acl.delete(msg.acl_index)
    return {}


@handles("acl_interface_set_acl_list")
def acl_interface_set_acl_list(ctx: HandlerContext, msg: Any) -> Result:
    ctx.dataplane.interface(msg.sw_if_index)
    acls = list(msg.acls)
    n_input = min(msg.n_input, len(acls))
    ctx.dataplane.acl.set_interface_lists(msg.sw_if_index, acls[:n_input], acls[n_input:])
    return {}


@handles("acl_dump")
def acl_dump(ctx: HandlerContext, msg: Any) -> Result:
    table = ctx.dataplane.acl
    indexes = sorted(table.acls) if msg.acl_index == ANY_INDEX else (
        [msg.acl_index] if msg.acl_index in table.acls else [])
    result: Details = []
    for index in indexes:
        acl = table.acls[index]
        rules = [_rule_fields(rule) for rule in acl.rules]
        result.append(("acl_details", {"context": ctx.context, "acl_index": index,
                                       "tag": acl.tag, "count": len(rules), "r": rules}))
    return result


@handles("acl_interface_list_dump")
def acl_interface_list_dump(ctx: HandlerContext, msg: Any) -> Result:
    """Every interface (with empty lists too) or the one asked for, as VPP does."""
    dp = ctx.dataplane
    if msg.sw_if_index == ANY_INDEX:
        indexes = sorted(dp.interfaces)
    else:
        indexes = [msg.sw_if_index] if msg.sw_if_index in dp.interfaces else []
    result: Details = []
    for sw_if_index in indexes:
        lists = dp.acl.interface_lists(sw_if_index)
        acls = [*lists.ingress, *lists.egress]
        result.append(("acl_interface_list_details", {
            "context": ctx.context, "sw_if_index": sw_if_index, "count": len(acls),
            "n_input": len(lists.ingress), "acls": acls}))
    return result

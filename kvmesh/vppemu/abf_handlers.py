"""Handlers of abf.api (state in `kvmesh.vppemu.abf`)."""

from __future__ import annotations

import ipaddress
from typing import Any

from kvmesh.vppemu import errors as E
from kvmesh.vppemu.abf import NO_INTERFACE, FibPath
from kvmesh.vppemu.errors import ApiError
from kvmesh.vppemu.handlers import HandlerContext, Result, address_fields, handles
from kvmesh.vppemu.plane import check_path_target

PATH_NORMAL = 0  # fib_path_type
PROTO_IP4, PROTO_IP6 = 0, 1  # fib_path_nh_proto
KNOWN_PROTOS = range(6)  # ip4, ip6, mpls, ethernet, bier, nsh
ABF_VERSION = (1, 0)


def decode_path(ctx: HandlerContext, raw: Any) -> FibPath:
    """fib_api_path_decode for the IP paths ABF forwards on: an interface that does not exist
    is NO_MATCHING_INTERFACE, a next hop looked up in a table that does not exist NO_SUCH_FIB;
    a weight of 0 is 1."""
    proto = int(raw.proto)
    if proto not in KNOWN_PROTOS:
        raise ApiError(E.UNSPECIFIED, f"unknown next-hop protocol {proto}")
    if proto not in (PROTO_IP4, PROTO_IP6) or int(raw.type) != PATH_NORMAL or raw.n_labels:
        raise ApiError(E.UNIMPLEMENTED, "only IP paths of type normal, without labels")
    is_ip6 = proto == PROTO_IP6
    packed = bytes(raw.nh.address.ip6 if is_ip6 else raw.nh.address.ip4)
    next_hop = ipaddress.ip_address(packed[:16] if is_ip6 else packed[:4])
    check_path_target(ctx.dataplane, raw.sw_if_index, raw.table_id, is_ip6)
    table_id = raw.table_id if raw.sw_if_index == NO_INTERFACE else 0
    return FibPath(next_hop, raw.sw_if_index, table_id, raw.weight or 1, raw.preference)


def path_fields(path: FibPath) -> dict[str, Any]:
    """fib_api_path_encode: what a dump shows of a path (no rpf id, no labels)."""
    return {
        "sw_if_index": path.sw_if_index, "table_id": path.table_id, "rpf_id": 0,
        "weight": path.weight, "preference": path.preference, "type": PATH_NORMAL, "flags": 0,
        "proto": PROTO_IP6 if path.next_hop.version == 6 else PROTO_IP4,
        "nh": {"address": address_fields(path.next_hop)["un"], "via_label": 0, "obj_id": 0,
               "classify_table_index": 0},
        "n_labels": 0,
        "label_stack": [{}] * 16,  # vpp_papi packs fixed-size arrays only when given in full
    }


@handles("abf_plugin_get_version")
def abf_plugin_get_version(ctx: HandlerContext, msg: Any) -> Result:
    return {"major": ABF_VERSION[0], "minor": ABF_VERSION[1]}


@handles("abf_policy_add_del")
def abf_policy_add_del(ctx: HandlerContext, msg: Any) -> Result:
    p = msg.policy
    if p.n_paths == 0:
        raise ApiError(E.INVALID_VALUE, "no paths")
    paths = [decode_path(ctx, raw) for raw in p.paths[:p.n_paths]]
    if msg.is_add:
        ctx.dataplane.abf.policy_update(p.policy_id, p.acl_index, paths)
    else:
        ctx.dataplane.abf.policy_delete(p.policy_id, paths)
    return {}


@handles("abf_policy_dump")
def abf_policy_dump(ctx: HandlerContext, msg: Any) -> Result:
    return [("abf_policy_details", {"context": ctx.context, "policy": {
        "policy_id": p.policy_id, "acl_index": p.acl_index, "n_paths": len(p.paths),
        "paths": [path_fields(path) for path in p.paths]}})
        for p in ctx.dataplane.abf.policies_in_order()]


@handles("abf_itf_attach_add_del")
def abf_itf_attach_add_del(ctx: HandlerContext, msg: Any) -> Result:
    a = msg.attach
    if msg.is_add:
        ctx.dataplane.abf.attach(a.policy_id, a.sw_if_index, a.priority, bool(a.is_ipv6))
    else:
        ctx.dataplane.abf.detach(a.policy_id, a.sw_if_index, bool(a.is_ipv6))
    return {}


@handles("abf_itf_attach_dump")
def abf_itf_attach_dump(ctx: HandlerContext, msg: Any) -> Result:
    return [("abf_itf_attach_details", {"context": ctx.context, "attach": {
        "policy_id": a.policy_id, "sw_if_index": a.sw_if_index, "priority": a.priority,
        "is_ipv6": a.is_ipv6}}) for a in ctx.dataplane.abf.attachments_in_order()]

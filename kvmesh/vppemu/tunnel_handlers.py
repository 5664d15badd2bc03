"""Handlers of gre.api and ipip.api (state in `kvmesh.vppemu.tunnels`)."""

from __future__ import annotations

from typing import Any

from kvmesh.vppemu.handlers import Details, HandlerContext, Result, address_fields, handles
from kvmesh.vppemu.tunnels import INVALID_INDEX, Tunnel, parse_address


def _gre(msg: Any) -> Tunnel:
    t = msg.tunnel
    return Tunnel("gre", parse_address(t.src.af, t.src.un), parse_address(t.dst.af, t.dst.un),
                  t.outer_table_id, int(t.mode), gre_type=int(t.type), session_id=t.session_id,
                  flags=int(t.flags), instance=t.instance)


@handles("gre_tunnel_add_del")
def gre_tunnel_add_del(ctx: HandlerContext, msg: Any) -> Result:
    dp = ctx.dataplane
    tunnel = _gre(msg)
    if msg.is_add:
        return {"sw_if_index": dp.tunnels.add(tunnel)}
    sw_if_index = dp.tunnels.gre_index(tunnel)
    dp.delete_tunnel(sw_if_index)
    return {"sw_if_index": sw_if_index}


@handles("gre_tunnel_dump")
def gre_tunnel_dump(ctx: HandlerContext, msg: Any) -> Result:
    result: Details = []
    for sw_if_index, t in sorted(ctx.dataplane.tunnels.by_index.items()):
        if t.kind != "gre" or msg.sw_if_index not in (INVALID_INDEX, sw_if_index):
            continue
        result.append(("gre_tunnel_details", {"context": ctx.context, "tunnel": {
            "type": t.gre_type, "mode": t.mode, "flags": t.flags, "session_id": t.session_id,
            "instance": t.instance, "outer_table_id": t.table_id, "sw_if_index": sw_if_index,
            "src": address_fields(t.src), "dst": address_fields(t.dst)}}))
    return result


@handles("ipip_add_tunnel")
def ipip_add_tunnel(ctx: HandlerContext, msg: Any) -> Result:
    t = msg.tunnel
    tunnel = Tunnel("ipip", parse_address(t.src.af, t.src.un),
                    parse_address(t.dst.af, t.dst.un), t.table_id, int(t.mode),
                    flags=int(t.flags), dscp=int(t.dscp), instance=t.instance)
    return {"sw_if_index": ctx.dataplane.tunnels.add(tunnel)}


@handles("ipip_del_tunnel")
def ipip_del_tunnel(ctx: HandlerContext, msg: Any) -> Result:
    dp = ctx.dataplane
    dp.delete_tunnel(dp.tunnels.ipip_index(msg.sw_if_index))
    return {}


@handles("ipip_tunnel_dump")
def ipip_tunnel_dump(ctx: HandlerContext, msg: Any) -> Result:
    result: Details = []
    for sw_if_index, t in sorted(ctx.dataplane.tunnels.by_index.items()):
        if t.kind != "ipip" or msg.sw_if_index not in (INVALID_INDEX, sw_if_index):
            continue
        result.append(("ipip_tunnel_details", {"context": ctx.context, "tunnel": {
            "instance": t.instance, "src": address_fields(t.src), "dst": address_fields(t.dst),
            "sw_if_index": sw_if_index, "table_id": t.table_id, "flags": t.flags,
            "mode": t.mode, "dscp": t.dscp}}))
    return result

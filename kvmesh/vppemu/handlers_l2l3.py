"""Handlers of the messages issue 19 added: neighbors, sub-interfaces, L2 cross-connects, static
L2 FIB entries, VXLAN tunnels and memif (registered in `handlers.HANDLERS` on import).

Same conventions as `handlers`: a handler returns its reply's fields or a list of details, and
raises `ApiError` (from the dataplane) for a refusal with VPP's retval.
"""

from __future__ import annotations

from typing import Any

from kvmesh.vppemu import state as S
from kvmesh.vppemu.handlers import (
    Details,
    HandlerContext,
    Result,
    _ip,
    _mac,
    address_fields,
    handles,
)


# ---------------------------------------------------------------------- neighbors
@handles("ip_neighbor_add_del")
def ip_neighbor_add_del(ctx: HandlerContext, msg: Any) -> Result:
    n = msg.neighbor
    ip = _ip(n.ip_address.af, n.ip_address.un)
    if msg.is_add:
        ctx.dataplane.neighbor_add(n.sw_if_index, ip, _mac(n.mac_address), int(n.flags))
    else:
        ctx.dataplane.neighbor_del(n.sw_if_index, ip)
    return {"stats_index": 0}


@handles("ip_neighbor_dump")
def ip_neighbor_dump(ctx: HandlerContext, msg: Any) -> Result:
    version = 6 if int(msg.af) == 1 else 4
    return [
        (
            "ip_neighbor_details",
            {
                "context": ctx.context,
                "age": 0.0,
                "neighbor": {
                    "sw_if_index": n.sw_if_index,
                    "flags": n.flags,
                    "mac_address": n.mac,
                    "ip_address": address_fields(n.ip),
                },
            },
        )
        for n in ctx.dataplane.neighbors.values()
        if n.ip.version == version and msg.sw_if_index in (S.INVALID_INDEX, n.sw_if_index)
    ]


# ---------------------------------------------------------------------- sub-interfaces
@handles("create_vlan_subif")
def create_vlan_subif(ctx: HandlerContext, msg: Any) -> Result:
    flags = S.SUB_ONE_TAG | S.SUB_EXACT_MATCH
    sw_if_index = ctx.dataplane.create_subif(
        msg.sw_if_index, msg.vlan_id, flags, msg.vlan_id, 0, vlan_api=True
    )
    return {"sw_if_index": sw_if_index}


@handles("create_subif")
def create_subif(ctx: HandlerContext, msg: Any) -> Result:
    sw_if_index = ctx.dataplane.create_subif(
        msg.sw_if_index, msg.sub_id, int(msg.sub_if_flags), msg.outer_vlan_id, msg.inner_vlan_id
    )
    return {"sw_if_index": sw_if_index}


@handles("delete_subif")
def delete_subif(ctx: HandlerContext, msg: Any) -> Result:
    ctx.dataplane.delete_subif(msg.sw_if_index)
    return {}


# ---------------------------------------------------------------------- L2
@handles("sw_interface_set_l2_xconnect")
def set_l2_xconnect(ctx: HandlerContext, msg: Any) -> Result:
    ctx.dataplane.set_l2_xconnect(msg.rx_sw_if_index, msg.tx_sw_if_index, bool(msg.enable))
    return {}


@handles("l2_xconnect_dump")
def l2_xconnect_dump(ctx: HandlerContext, _msg: Any) -> Result:
    return [
        (
            "l2_xconnect_details",
            {"context": ctx.context, "rx_sw_if_index": rx, "tx_sw_if_index": tx},
        )
        for rx, tx in sorted(ctx.dataplane.xconnects.items())
    ]


@handles("l2fib_add_del")
def l2fib_add_del(ctx: HandlerContext, msg: Any) -> Result:
    ctx.dataplane.l2fib_add_del(
        msg.bd_id, _mac(msg.mac), msg.sw_if_index, bool(msg.is_add), bool(msg.static_mac),
        bool(msg.bvi_mac),
    )
    return {}


@handles("l2_fib_table_dump")
def l2_fib_table_dump(ctx: HandlerContext, msg: Any) -> Result:
    result: Details = []
    for (bd_id, mac), (sw_if_index, static, bvi) in sorted(ctx.dataplane.l2fib.items()):
        if msg.bd_id not in (S.INVALID_INDEX, bd_id):
            continue
        result.append((
            "l2_fib_table_details",
            {
                "context": ctx.context,
                "bd_id": bd_id,
                "mac": mac,
                "sw_if_index": sw_if_index,
                "static_mac": static,
                "filter_mac": False,
                "bvi_mac": bvi,
            },
        ))
    return result


# ---------------------------------------------------------------------- VXLAN
@handles("vxlan_add_del_tunnel_v3")
def vxlan_add_del_tunnel(ctx: HandlerContext, msg: Any) -> Result:
    info = S.VxlanInfo(
        instance=msg.instance,
        src=_ip(msg.src_address.af, msg.src_address.un),
        dst=_ip(msg.dst_address.af, msg.dst_address.un),
        # VPP's defaults for unset ports: the IANA VXLAN port on both sides.
        src_port=msg.src_port or S.VXLAN_PORT,
        dst_port=msg.dst_port or S.VXLAN_PORT,
        vni=msg.vni,
        encap_vrf=msg.encap_vrf_id,
        mcast_sw_if_index=msg.mcast_sw_if_index,
        decap_next_index=msg.decap_next_index,
    )
    return {"sw_if_index": ctx.dataplane.vxlan_add_del(info, bool(msg.is_add))}


@handles("vxlan_tunnel_v2_dump")
def vxlan_tunnel_dump(ctx: HandlerContext, msg: Any) -> Result:
    result: Details = []
    for iface in ctx.dataplane.interfaces.values():
        t = iface.vxlan
        if t is None or msg.sw_if_index not in (S.INVALID_INDEX, iface.sw_if_index):
            continue
        result.append((
            "vxlan_tunnel_v2_details",
            {
                "context": ctx.context,
                "sw_if_index": iface.sw_if_index,
                "instance": t.instance,
                "src_address": address_fields(t.src),
                "dst_address": address_fields(t.dst),
                "src_port": t.src_port,
                "dst_port": t.dst_port,
                "mcast_sw_if_index": t.mcast_sw_if_index,
                "encap_vrf_id": t.encap_vrf,
                "decap_next_index": t.decap_next_index,
                "vni": t.vni,
            },
        ))
    return result


# ---------------------------------------------------------------------- memif
@handles("memif_socket_filename_add_del_v2")
def memif_socket_add_del(ctx: HandlerContext, msg: Any) -> Result:
    socket_id = ctx.dataplane.memif_socket_add_del(
        bool(msg.is_add), msg.socket_id, msg.socket_filename
    )
    return {"socket_id": socket_id}


@handles("memif_socket_filename_dump")
def memif_socket_dump(ctx: HandlerContext, _msg: Any) -> Result:
    return [
        (
            "memif_socket_filename_details",
            {"context": ctx.context, "socket_id": socket_id, "socket_filename": filename},
        )
        for socket_id, filename in sorted(ctx.dataplane.memif_sockets.items())
    ]


@handles("memif_create_v2")
def memif_create(ctx: HandlerContext, msg: Any) -> Result:
    info = S.MemifInfo(
        socket_id=msg.socket_id,
        memif_id=msg.id,
        role=int(msg.role),
        mode=int(msg.mode),
        ring_size=msg.ring_size or S.MEMIF_DEFAULT_RING,
        buffer_size=msg.buffer_size or S.MEMIF_DEFAULT_BUFFER,
        zero_copy=not msg.no_zero_copy,
        secret=msg.secret,
    )
    return {"sw_if_index": ctx.dataplane.memif_create(info, _mac(msg.hw_addr))}


@handles("memif_delete")
def memif_delete(ctx: HandlerContext, msg: Any) -> Result:
    ctx.dataplane.memif_delete(msg.sw_if_index)
    return {}


@handles("memif_dump")
def memif_dump(ctx: HandlerContext, _msg: Any) -> Result:
    dp = ctx.dataplane
    return [
        (
            "memif_details",
            {
                "context": ctx.context,
                "sw_if_index": i.sw_if_index,
                "hw_addr": i.mac,
                "id": i.memif.memif_id,
                "role": i.memif.role,
                "mode": i.memif.mode,
                "zero_copy": i.memif.zero_copy,
                "socket_id": i.memif.socket_id,
                "ring_size": i.memif.ring_size,
                "buffer_size": i.memif.buffer_size,
                "flags": dp.interface_flags(i),
                "if_name": i.name,
            },
        )
        for i in dp.interfaces.values()
        if i.memif is not None
    ]


@handles("l2_interface_vlan_tag_rewrite")
def vlan_tag_rewrite(ctx: HandlerContext, msg: Any) -> Result:
    ctx.dataplane.set_vlan_tag_rewrite(
        msg.sw_if_index, (int(msg.vtr_op), int(msg.push_dot1q), int(msg.tag1), int(msg.tag2))
    )
    return {}

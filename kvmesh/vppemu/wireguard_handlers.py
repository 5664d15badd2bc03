"""Handlers of wireguard.api (state in `kvmesh.vppemu.wireguard`)."""

from __future__ import annotations

from typing import Any

from kvmesh.vppemu.handlers import (
    Details,
    HandlerContext,
    Result,
    address_fields,
    decode_address,
    handles,
    prefix_fields,
)
from kvmesh.vppemu.wireguard import INVALID_INDEX, WgPeer


@handles("wireguard_interface_create")
def wireguard_interface_create(ctx: HandlerContext, msg: Any) -> Result:
    i = msg.interface
    private_key = None if msg.generate_key else bytes(i.private_key)
    sw_if_index = ctx.dataplane.wireguard.create(i.user_instance, private_key, i.port,
                                                 decode_address(i.src_ip))
    return {"sw_if_index": sw_if_index}


@handles("wireguard_interface_delete")
def wireguard_interface_delete(ctx: HandlerContext, msg: Any) -> Result:
    ctx.dataplane.delete_wireguard(msg.sw_if_index)
    return {}


@handles("wireguard_interface_dump")
def wireguard_interface_dump(ctx: HandlerContext, msg: Any) -> Result:
    result: Details = []
    for sw_if_index, wg in sorted(ctx.dataplane.wireguard.interfaces.items(),
                                  key=lambda item: item[1].index):
        if msg.sw_if_index not in (INVALID_INDEX, sw_if_index):
            continue
        result.append(("wireguard_interface_details", {"context": ctx.context, "interface": {
            "user_instance": wg.instance, "sw_if_index": sw_if_index,
            "private_key": wg.private_key if msg.show_private_key else bytes(32),
            "public_key": wg.public_key, "port": wg.port, "src_ip": address_fields(wg.src)}}))
    return result


@handles("wireguard_peer_add")
def wireguard_peer_add(ctx: HandlerContext, msg: Any) -> Result:
    p = msg.peer
    allowed = []
    for prefix in list(p.allowed_ips)[:p.n_allowed_ips]:
        address = decode_address(prefix.address)
        allowed.append((address, prefix.len))
    index = ctx.dataplane.wireguard.add_peer(WgPeer(
        0, bytes(p.public_key), p.sw_if_index, p.table_id, decode_address(p.endpoint), p.port,
        p.persistent_keepalive, allowed))
    return {"peer_index": index}


@handles("wireguard_peer_remove")
def wireguard_peer_remove(ctx: HandlerContext, msg: Any) -> Result:
    ctx.dataplane.wireguard.remove_peer(msg.peer_index)
    return {}


@handles("wireguard_peers_dump")
def wireguard_peers_dump(ctx: HandlerContext, msg: Any) -> Result:
    result: Details = []
    for index, p in sorted(ctx.dataplane.wireguard.peers.items()):
        if msg.peer_index not in (INVALID_INDEX, index):
            continue
        result.append(("wireguard_peers_details", {"context": ctx.context, "peer": {
            "peer_index": index, "public_key": p.public_key, "port": p.port,
            "persistent_keepalive": p.persistent_keepalive, "table_id": p.table_id,
            "endpoint": address_fields(p.endpoint), "sw_if_index": p.sw_if_index,
            "flags": p.flags, "n_allowed_ips": len(p.allowed_ips),
            "allowed_ips": [prefix_fields(a, n) for a, n in p.allowed_ips]}}))
    return result



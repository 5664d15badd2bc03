"""Handlers of bond.api (state in `kvmesh.vppemu.bond`)."""

from __future__ import annotations

from typing import Any

from kvmesh.vppemu.bond import INVALID_INDEX
from kvmesh.vppemu.handlers import Details, HandlerContext, Result, handles


@handles("bond_create2")
def bond_create2(ctx: HandlerContext, msg: Any) -> Result:
    mac = bytes(msg.mac_address) if msg.use_custom_mac else None
    sw_if_index = ctx.dataplane.bonds.create(int(msg.mode), int(msg.lb), bool(msg.numa_only),
                                             bool(msg.enable_gso), mac, msg.id)
    return {"sw_if_index": sw_if_index}


@handles("bond_delete")
def bond_delete(ctx: HandlerContext, msg: Any) -> Result:
    ctx.dataplane.delete_bond(msg.sw_if_index)
    return {}


@handles("bond_add_member")
def bond_add_member(ctx: HandlerContext, msg: Any) -> Result:
    ctx.dataplane.bonds.add_member(msg.sw_if_index, msg.bond_sw_if_index,
                                   bool(msg.is_passive), bool(msg.is_long_timeout))
    return {}


@handles("bond_detach_member")
def bond_detach_member(ctx: HandlerContext, msg: Any) -> Result:
    ctx.dataplane.bonds.detach_member(msg.sw_if_index)
    return {}


@handles("sw_bond_interface_dump")
def sw_bond_interface_dump(ctx: HandlerContext, msg: Any) -> Result:
    dp = ctx.dataplane
    if msg.sw_if_index != INVALID_INDEX and msg.sw_if_index not in dp.interfaces:
        return []  # VALIDATE_SW_IF_INDEX on a dump: no details
    result: Details = []
    for sw_if_index, bond in sorted(dp.bonds.bonds.items()):
        if msg.sw_if_index not in (INVALID_INDEX, sw_if_index):
            continue
        result.append(("sw_bond_interface_details", {
            "context": ctx.context, "sw_if_index": sw_if_index, "id": bond.bond_id,
            "mode": bond.mode, "lb": bond.lb, "numa_only": bond.numa_only,
            "active_members": dp.bonds.active_members(bond), "members": len(bond.members),
            "interface_name": dp.interfaces[sw_if_index].name,
        }))
    return result


@handles("sw_member_interface_dump")
def sw_member_interface_dump(ctx: HandlerContext, msg: Any) -> Result:
    dp = ctx.dataplane
    bond = dp.bonds.bonds.get(msg.sw_if_index)
    if bond is None:
        return []  # bond_dump_member_ifs fails: no details
    return [("sw_member_interface_details", {
        "context": ctx.context, "sw_if_index": member,
        "interface_name": dp.interfaces[member].name,
        "is_passive": dp.bonds.members[member].passive,
        "is_long_timeout": dp.bonds.members[member].long_timeout,
        "is_local_numa": True, "weight": 1,
    }) for member in bond.members]

"""Handlers of ipsec.api (state in `kvmesh.vppemu.ipsec`)."""

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
from kvmesh.vppemu.ipsec import (
    FLAG_UDP_ENCAP,
    FLAG_USE_ANTI_REPLAY,
    Policy,
    SecurityAssociation,
    Tunnel,
)

ANY = 0xFFFFFFFF
KEY_DATA = 128


def _key(raw: Any) -> bytes:
    return bytes(raw.data)[:min(int(raw.length), KEY_DATA)]


@handles("ipsec_sad_entry_add_v2")
def ipsec_sad_entry_add_v2(ctx: HandlerContext, msg: Any) -> Result:
    e = msg.entry
    t = e.tunnel
    tunnel = Tunnel(decode_address(t.src), decode_address(t.dst), int(t.table_id),
                    int(t.encap_decap_flags), int(t.mode), int(t.flags), int(t.dscp),
                    int(t.hop_limit))
    sa = SecurityAssociation(
        sa_id=e.sad_id, spi=e.spi, protocol=int(e.protocol), crypto_alg=int(e.crypto_algorithm),
        crypto_key=_key(e.crypto_key), integ_alg=int(e.integrity_algorithm),
        integ_key=_key(e.integrity_key), flags=int(e.flags), tunnel=tunnel, salt=e.salt,
        udp_src_port=e.udp_src_port, udp_dst_port=e.udp_dst_port,
        anti_replay_window=e.anti_replay_window_size)
    return {"stat_index": ctx.dataplane.ipsec.add_sa(sa)}


@handles("ipsec_sad_entry_del")
def ipsec_sad_entry_del(ctx: HandlerContext, msg: Any) -> Result:
    ctx.dataplane.ipsec.del_sa(msg.id)
    return {}


def _key_fields(key: bytes) -> dict[str, Any]:
    return {"length": len(key), "data": key.ljust(KEY_DATA, b"\0")}


ZERO = ipaddress.IPv4Address(0)


def _sa_details(ctx: HandlerContext, sa: SecurityAssociation) -> dict[str, Any]:
    """send_ipsec_sa_v5_details: the tunnel, UDP ports and replay window only when in use."""
    t = sa.tunnel
    tunnel = {"instance": 0, "src": address_fields(t.src if t else ZERO),
              "dst": address_fields(t.dst if t else ZERO), "sw_if_index": 0,
              "table_id": t.table_id if t else 0,
              "encap_decap_flags": t.encap_decap_flags if t else 0, "mode": t.mode if t else 0,
              "flags": t.flags if t else 0, "dscp": t.dscp if t else 0,
              "hop_limit": t.hop_limit if t else 0}
    udp = sa.flags & FLAG_UDP_ENCAP
    replay = sa.flags & FLAG_USE_ANTI_REPLAY
    protected = ctx.dataplane.ipsec.protected_interface(sa)
    return {
        "context": ctx.context,
        "entry": {
            "sad_id": sa.sa_id, "spi": sa.spi, "protocol": sa.protocol,
            "crypto_algorithm": sa.crypto_alg, "crypto_key": _key_fields(sa.crypto_key),
            "integrity_algorithm": sa.integ_alg, "integrity_key": _key_fields(sa.integ_key),
            "flags": sa.flags, "tunnel": tunnel, "salt": sa.salt,
            "udp_src_port": sa.udp_src_port if udp else 0,
            "udp_dst_port": sa.udp_dst_port if udp else 0,
            "anti_replay_window_size": sa.anti_replay_window if replay else 0,
        },
        "sw_if_index": ANY if protected is None else protected, "seq_outbound": 0,
        "last_seq_inbound": 0, "replay_window": 0,
        "thread_index": 0, "stat_index": sa.stat_index,
    }


@handles("ipsec_sa_v5_dump")
def ipsec_sa_v5_dump(ctx: HandlerContext, msg: Any) -> Result:
    """Every SA, in pool order (VPP 24.06 ignores the request's sa_id)."""
    sas = sorted(ctx.dataplane.ipsec.sas.values(), key=lambda sa: sa.stat_index)
    return [("ipsec_sa_v5_details", _sa_details(ctx, sa)) for sa in sas]


@handles("ipsec_spd_add_del")
def ipsec_spd_add_del(ctx: HandlerContext, msg: Any) -> Result:
    ctx.dataplane.ipsec.add_del_spd(msg.spd_id, bool(msg.is_add))
    return {}


@handles("ipsec_interface_add_del_spd")
def ipsec_interface_add_del_spd(ctx: HandlerContext, msg: Any) -> Result:
    ctx.dataplane.interface(msg.sw_if_index)  # VALIDATE_SW_IF_INDEX
    ctx.dataplane.ipsec.interface_spd(msg.sw_if_index, msg.spd_id, bool(msg.is_add))
    return {}


@handles("ipsec_spd_entry_add_del_v2")
def ipsec_spd_entry_add_del_v2(ctx: HandlerContext, msg: Any) -> Result:
    e = msg.entry
    policy = Policy(
        spd_id=e.spd_id, priority=e.priority, is_outbound=bool(e.is_outbound), sa_id=e.sa_id,
        action=int(e.policy), protocol=e.protocol,
        remote=(decode_address(e.remote_address_start), decode_address(e.remote_address_stop)),
        local=(decode_address(e.local_address_start), decode_address(e.local_address_stop)),
        remote_ports=(e.remote_port_start, e.remote_port_stop),
        local_ports=(e.local_port_start, e.local_port_stop))
    return {"stat_index": ctx.dataplane.ipsec.add_del_policy(policy, bool(msg.is_add))}


@handles("ipsec_spds_dump")
def ipsec_spds_dump(ctx: HandlerContext, msg: Any) -> Result:
    spds = sorted(ctx.dataplane.ipsec.spds.values(), key=lambda spd: spd.index)
    return [("ipsec_spds_details", {"context": ctx.context, "spd_id": spd.spd_id,
                                    "npolicies": len(spd.all_policies())}) for spd in spds]


@handles("ipsec_spd_dump")
def ipsec_spd_dump(ctx: HandlerContext, msg: Any) -> Result:
    spd = ctx.dataplane.ipsec.spds.get(msg.spd_id)
    if spd is None:
        return []
    result: Details = []
    for p in spd.all_policies():
        if msg.sa_id != ANY and msg.sa_id != p.sa_id:
            continue
        result.append(("ipsec_spd_details", {"context": ctx.context, "entry": {
            "spd_id": p.spd_id, "priority": p.priority, "is_outbound": p.is_outbound,
            "sa_id": p.sa_id, "policy": p.action, "protocol": p.protocol,
            "remote_address_start": address_fields(p.remote[0]),
            "remote_address_stop": address_fields(p.remote[1]),
            "local_address_start": address_fields(p.local[0]),
            "local_address_stop": address_fields(p.local[1]),
            "remote_port_start": p.remote_ports[0], "remote_port_stop": p.remote_ports[1],
            "local_port_start": p.local_ports[0], "local_port_stop": p.local_ports[1]}}))
    return result


@handles("ipsec_spd_interface_dump")
def ipsec_spd_interface_dump(ctx: HandlerContext, msg: Any) -> Result:
    """The SPD is named by its pool index, as VPP does."""
    bound = sorted(ctx.dataplane.ipsec.interfaces.items())
    return [("ipsec_spd_interface_details", {"context": ctx.context, "spd_index": index,
                                             "sw_if_index": sw_if_index})
            for sw_if_index, index in bound
            if not msg.spd_index_valid or index == msg.spd_index]



@handles("ipsec_tunnel_protect_update")
def ipsec_tunnel_protect_update(ctx: HandlerContext, msg: Any) -> Result:
    t = msg.tunnel
    ctx.dataplane.interface(t.sw_if_index)  # VALIDATE_SW_IF_INDEX
    sa_in = list(t.sa_in)[:t.n_sa_in]
    ctx.dataplane.ipsec.protect(t.sw_if_index, decode_address(t.nh), t.sa_out, sa_in)
    return {}


@handles("ipsec_tunnel_protect_del")
def ipsec_tunnel_protect_del(ctx: HandlerContext, msg: Any) -> Result:
    ctx.dataplane.interface(msg.sw_if_index)  # VALIDATE_SW_IF_INDEX
    ctx.dataplane.ipsec.unprotect(msg.sw_if_index, decode_address(msg.nh))
    return {}


@handles("ipsec_tunnel_protect_dump")
def ipsec_tunnel_protect_dump(ctx: HandlerContext, msg: Any) -> Result:
    """Every protection in pool order, or those of one interface."""
    wanted = None if msg.sw_if_index == ANY else msg.sw_if_index
    return [("ipsec_tunnel_protect_details", {"context": ctx.context, "tun": {
        "sw_if_index": p.sw_if_index, "nh": address_fields(p.next_hop), "sa_out": p.sa_out,
        "n_sa_in": len(p.sa_in), "sa_in": p.sa_in}})
        for p in ctx.dataplane.ipsec.protections_in_order(wanted)]

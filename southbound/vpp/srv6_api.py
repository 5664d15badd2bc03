"""The VPP calls of the SRv6 models (sr.api of VPP 24.06), in the models' canonical form.

Local SIDs: `sr_localsid_add_del`, read back by `sr_localsids_dump`; policies:
`sr_policy_add_v2` (the first segment list) + `sr_policy_mod_v2` (each further one),
`sr_policy_del`, read back by `sr_policies_v2_dump`; steering: `sr_steering_add_del`, read back
by `sr_steering_pol_dump`.
"""

from __future__ import annotations

import ipaddress
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from southbound.vpp.connection import VppConnection

ANY = 0xFFFFFFFF
ZERO6 = "::"
MAX_SIDS = 16
BEHAVIORS = {"end": 1, "end.x": 2, "end.t": 3, "end.dx2": 5, "end.dx6": 6, "end.dx4": 7,
             "end.dt6": 8, "end.dt4": 9}
POLICY_TYPES = {"default": 0, "spray": 1, "tef": 2}
STEER_L2, STEER_IPV4, STEER_IPV6 = 2, 4, 6
OP_ADD = 1


def _name(table: dict[str, int], number: int) -> str:
    return next((name for name, value in table.items() if value == number), str(number))


def sid_list(segments: list[str], weight: int) -> dict[str, Any]:
    return {"num_sids": len(segments), "weight": weight,
            "sids": list(segments) + [ZERO6] * (MAX_SIDS - len(segments))}


class Srv6Api:
    def __init__(self, conn: VppConnection) -> None:
        self.conn = conn

    # ------------------------------------------------------------------ local SIDs
    def localsid(self, sid: str, value: dict[str, Any], sw_if_index: int, is_del: bool) -> None:
        """`sw_if_index`: the interface (End.X, End.DX*), or the lookup table (End.T/DT*), as
        VPP takes it."""
        self.conn.call("sr_localsid_add_del", is_del=is_del, localsid=sid,
                       end_psp=value["end_psp"], behavior=BEHAVIORS[value["behavior"]],
                       sw_if_index=sw_if_index, vlan_index=value["vlan"],
                       fib_table=value["fib_table"],
                       nh_addr=value["next_hop"] or "0.0.0.0")

    def localsids(self) -> list[dict[str, Any]]:
        """The local SIDs as VPP shows them: `xconnect` is the interface's sw_if_index (End.X,
        End.DX*), else VPP's table field (0 for End.T/DT*: VPP does not show it)."""
        result = []
        for d in self.conn.dump("sr_localsids_dump"):
            hop = str(d.xconnect_nh_addr)
            result.append({"sid": str(d.addr), "behavior": _name(BEHAVIORS, int(d.behavior)),
                           "end_psp": bool(d.end_psp), "fib_table": d.fib_table,
                           "vlan": d.vlan_index, "xconnect": d.xconnect_iface_or_vrf_table,
                           "next_hop": None if ipaddress.ip_address(hop).packed == bytes(4)
                           else hop})
        return result

    # ------------------------------------------------------------------ policies
    def add_policy(self, bsid: str, value: dict[str, Any]) -> None:
        first, *others = value["segment_lists"]
        encap_src = value["encap_src"] or ZERO6
        self.conn.call("sr_policy_add_v2", bsid_addr=bsid, weight=first["weight"],
                       is_encap=value["encap"], type=POLICY_TYPES[value["type"]],
                       fib_table=value["fib_table"],
                       sids=sid_list(first["segments"], first["weight"]), encap_src=encap_src)
        for sl in others:
            self.conn.call("sr_policy_mod_v2", bsid_addr=bsid, sr_policy_index=0,
                           fib_table=value["fib_table"], operation=OP_ADD, sl_index=0,
                           weight=sl["weight"], sids=sid_list(sl["segments"], sl["weight"]),
                           encap_src=encap_src)

    def del_policy(self, bsid: str) -> None:
        self.conn.call("sr_policy_del", bsid_addr=bsid, sr_policy_index=0)

    def policies(self) -> dict[str, dict[str, Any]]:
        result = {}
        for d in self.conn.dump("sr_policies_v2_dump"):
            result[str(d.bsid)] = {
                "segment_lists": [{"segments": [str(s) for s in sl.sids[:sl.num_sids]],
                                   "weight": sl.weight} for sl in d.sid_lists],
                "encap": bool(d.is_encap), "type": _name(POLICY_TYPES, int(d.type)),
                "fib_table": d.fib_table,
                "encap_src": str(d.encap_src) if d.is_encap else None}
        return result

    # ------------------------------------------------------------------ steering
    def steer(self, value: dict[str, Any], sw_if_index: int, is_del: bool) -> None:
        prefix = value["prefix"]
        if prefix is None:
            traffic_type, prefix = STEER_L2, "0.0.0.0/0"
        else:
            traffic_type = STEER_IPV6 if ":" in prefix else STEER_IPV4
        self.conn.call("sr_steering_add_del", is_del=is_del, bsid_addr=value["bsid"],
                       sr_policy_index=0, table_id=value["table"], prefix=prefix,
                       sw_if_index=sw_if_index, traffic_type=traffic_type)

    def steerings(self) -> list[tuple[str, str | None, int, int | None]]:
        """(bsid, prefix, table, sw_if_index) per steering: the prefix of an L3 one, the
        interface of an L2 one (VPP keeps both in one union: only one means something)."""
        result: list[tuple[str, str | None, int, int | None]] = []
        for d in self.conn.dump("sr_steering_pol_dump"):
            if int(d.traffic_type) == STEER_L2:
                result.append((str(d.bsid), None, 0, d.sw_if_index))
            else:
                result.append((str(d.bsid), str(d.prefix), d.fib_table, None))
        return result

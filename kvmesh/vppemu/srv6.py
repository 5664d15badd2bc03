"""SRv6 local SIDs, policies and steering, as VPP 24.06 keeps them (src/vnet/srv6/sr_localsid.c,
sr_policy_rewrite.c, sr_steering.c, sr_api.c); no I/O.

VPP's SRv6 code answers with its own small negative numbers, not `vnet/error.h` codes:
- local SID: one that exists `-1`; deleting a missing one `-2`; its table (`fib_table`, IPv6)
  missing `-3`; a FIB entry for the SID in that table (an address of an interface there, a
  route) `-4`. End.X, End.DX2/DX4/DX6 need an existing interface (INVALID_SW_IF_INDEX, `-2`
  too). End.T/DT4/DT6 take their lookup table in `sw_if_index` and VPP accepts a missing one; its
  dump then reports table 0 for them (it reads the table of a field it never set).
- policy: a BSID taken (or with a FIB entry) `-12`, a missing table `-13`; deleting or
  modifying an unknown BSID `-1`; removing the last segment list `-21`, an unknown list `-22`,
  re-weighting an unknown list `-32`. A weight of ~0 is 1. An encapsulation source of `::` is the
  one `sr_set_encap_source` set. Segment lists are numbered from one pool (`sl_index`).
- steering: L2 on a missing or non-hardware interface `-3`, an unknown traffic type `-1`, an
  unknown BSID `-2`, removing a steering that is not there `-4`, L2 or IPv4 steered into a
  policy that does not encapsulate `-5`. Adding one that exists re-points it.
  VPP keeps an L3 key and an L2 key in one union: the dump's `sw_if_index` of an L3 steering is
  the first four bytes of its prefix (0 for IPv4), and an L2 steering's prefix the interface
  index (as VPP shows it on little-endian machines).
Simplification: local SIDs, BSIDs and steered prefixes add no entries to `ip_route_dump`.
"""

from __future__ import annotations

import ipaddress
import struct
from dataclasses import dataclass, field
from typing import Any

from kvmesh.vppemu.errors import ApiError
from kvmesh.vppemu.plane import Plane

END, X, T, D_FIRST, DX2, DX6, DX4, DT6, DT4, LAST = range(1, 11)
STEER_L2, STEER_IPV4, STEER_IPV6 = 2, 4, 6
TYPE_SPRAY = 1
OP_ADD, OP_DEL, OP_MOD = 1, 2, 3
NEEDS_INTERFACE = (X, DX6, DX4, DX2)
LOOKUP_TABLE = (T, DT6, DT4)
ANY = 0xFFFFFFFF
IP6 = ipaddress.IPv6Address
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


@dataclass
class LocalSid:
    sid: IP6
    end_psp: bool
    behavior: int
    sw_if_index: int
    vlan_index: int
    fib_table: int
    next_hop: Address | None


@dataclass
class SegmentList:
    index: int
    weight: int
    segments: list[IP6]


@dataclass
class Policy:
    bsid: IP6
    index: int
    policy_type: int
    is_encap: bool
    fib_table: int
    encap_src: IP6
    lists: list[SegmentList] = field(default_factory=list)


@dataclass
class Steering:
    traffic_type: int
    bsid: IP6
    prefix: ipaddress.IPv4Network | ipaddress.IPv6Network | None
    table_id: int
    sw_if_index: int


class Srv6:
    def __init__(self, dataplane: Plane) -> None:
        self._dp = dataplane
        self.localsids: dict[IP6, LocalSid] = {}
        self.policies: dict[IP6, Policy] = {}
        self.steerings: dict[tuple[Any, ...], Steering] = {}
        self.encap_source = IP6("::")
        self._next_policy = 0
        self._next_list = 0

    def _fib_entry_exists(self, table_id: int, address: IP6) -> bool:
        host = ipaddress.ip_network(address)
        return any(entry.prefix == host for entry in self._dp.route_entries(True, table_id))

    # ------------------------------------------------------------------ local SIDs
    def add_del_localsid(self, is_del: bool, sid: LocalSid) -> None:
        if sid.behavior in NEEDS_INTERFACE:
            self._dp.interface(sid.sw_if_index)  # VALIDATE_SW_IF_INDEX
        found = self.localsids.get(sid.sid)
        if is_del:
            if found is None:
                raise ApiError(-2, f"no local SID {sid.sid}")
            del self.localsids[sid.sid]
            return
        if found is not None:
            raise ApiError(-1, f"local SID {sid.sid} exists")
        if (True, sid.fib_table) not in self._dp.tables:
            raise ApiError(-3, f"no ip6 table {sid.fib_table}")
        if self._fib_entry_exists(sid.fib_table, sid.sid):
            raise ApiError(-4, f"a FIB entry for {sid.sid} exists")
        self.localsids[sid.sid] = sid

    # ------------------------------------------------------------------ policies
    def _segment_list(self, weight: int, segments: list[IP6]) -> SegmentList:
        self._next_list += 1
        return SegmentList(self._next_list - 1, 1 if weight == ANY else weight, segments)

    def add_policy(self, bsid: IP6, segments: list[IP6], encap_src: IP6, weight: int,
                   policy_type: int, fib_table: int, is_encap: bool) -> None:
        if bsid in self.policies:
            raise ApiError(-12, f"BSID {bsid} exists")
        table = 0 if fib_table == ANY else fib_table
        if (True, table) not in self._dp.tables:
            raise ApiError(-13, f"no ip6 table {table}")
        if self._fib_entry_exists(table, bsid):
            raise ApiError(-12, f"a FIB entry for {bsid} exists")
        source = self.encap_source if encap_src == IP6("::") else encap_src
        policy = Policy(bsid, self._next_policy, policy_type, is_encap, table, source)
        self._next_policy += 1
        policy.lists.append(self._segment_list(weight, segments))
        self.policies[bsid] = policy

    def _policy(self, bsid: IP6, index: int) -> Policy:
        if bsid != IP6("::"):
            found = self.policies.get(bsid)
        else:
            found = next((p for p in self.policies.values() if p.index == index), None)
        if found is None:
            raise ApiError(-1, f"no policy {bsid}")
        return found

    def mod_policy(self, bsid: IP6, index: int, operation: int, sl_index: int, weight: int,
                   segments: list[IP6]) -> None:
        policy = self._policy(bsid, index)
        if operation == OP_ADD:
            policy.lists.append(self._segment_list(weight, segments))
            return
        found = next((sl for sl in policy.lists if sl.index == sl_index), None)
        if operation == OP_DEL:
            if len(policy.lists) == 1:
                raise ApiError(-21, "the last segment list")
            if found is None:
                raise ApiError(-22, f"no segment list {sl_index}")
            policy.lists.remove(found)
        elif operation == OP_MOD:
            if found is None:
                raise ApiError(-32, f"no segment list {sl_index}")
            found.weight = weight
        else:
            raise ApiError(-1, f"operation {operation}")

    def del_policy(self, bsid: IP6, index: int) -> None:
        policy = self._policy(bsid, index)
        del self.policies[policy.bsid]

    # ------------------------------------------------------------------ steering
    def steer(self, is_del: bool, bsid: IP6, traffic_type: int, table_id: int,
              prefix: ipaddress.IPv4Network | ipaddress.IPv6Network, sw_if_index: int) -> None:
        table = 0 if table_id == ANY else table_id
        key: tuple[Any, ...]
        if traffic_type in (STEER_IPV4, STEER_IPV6):
            key = (traffic_type, prefix.network_address, prefix.prefixlen, table)
        elif traffic_type == STEER_L2:
            iface = self._dp.interfaces.get(sw_if_index)
            if iface is None or iface.sub is not None:
                raise ApiError(-3, f"sw_if_index {sw_if_index} is no hardware interface")
            key = (traffic_type, sw_if_index)
        else:
            raise ApiError(-1, f"traffic type {traffic_type}")
        existing = self.steerings.get(key)
        if is_del:
            if existing is None:
                raise ApiError(-4, "no such steering")
            del self.steerings[key]
            return
        policy = self.policies.get(bsid)
        if policy is None:
            raise ApiError(-2, f"no policy {bsid}")
        if existing is not None:
            existing.bsid = bsid
            return
        if traffic_type in (STEER_L2, STEER_IPV4) and not policy.is_encap:
            raise ApiError(-5, "the policy does not encapsulate")
        self.steerings[key] = Steering(
            traffic_type, bsid, prefix if traffic_type != STEER_L2 else None, table, sw_if_index)

    def steering_union_fields(self, s: Steering) -> tuple[Address, int, int, int]:
        """(prefix address, prefix length, table, sw_if_index) as VPP's union shows them."""
        if s.prefix is None:  # L2: the index in the prefix's first bytes
            raw = struct.pack("<I", s.sw_if_index) + bytes(12)
            address: Address = ipaddress.IPv4Address(0) if s.sw_if_index == 0 else IP6(raw)
            return address, 0, 0, s.sw_if_index
        if s.prefix.version == 4:
            return s.prefix.network_address, s.prefix.prefixlen, s.table_id, 0
        first = struct.unpack("<I", s.prefix.network_address.packed[:4])[0]
        return s.prefix.network_address, s.prefix.prefixlen, s.table_id, first

    def forget_interface(self, sw_if_index: int) -> None:
        """Simplification: what used a deleted interface goes with it."""
        for key in [k for k, s in self.steerings.items()
                    if s.prefix is None and s.sw_if_index == sw_if_index]:
            del self.steerings[key]

    def snapshot(self) -> dict[str, Any]:
        return {
            "localsids": sorted(str(s) for s in self.localsids),
            "policies": {str(b): [[str(s) for s in sl.segments] for sl in p.lists]
                         for b, p in sorted(self.policies.items())},
            "steerings": len(self.steerings),
            "encap_source": str(self.encap_source),
        }

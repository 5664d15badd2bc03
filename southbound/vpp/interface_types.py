"""The interface types issue 19 added to `vpp/interface/<name>`: sub-interfaces, VXLAN tunnels
and memif - what the interface descriptor does differently for each of them.

- sub_interface: `create_vlan_subif` when VPP's VLAN call says exactly what is wanted (one tag,
  `sub_id` equal to the tag, exact match), else `create_subif`; `delete_subif`. Depends on its
  parent. VPP deletes the sub-interfaces of an interface with it; the scheduler removes them
  first anyway (they depend on the parent), and a sub-interface already gone counts as deleted.
- vxlan: `vxlan_add_del_tunnel_v3` (deleted by the same parameters); depends on the encap VRF's
  table (table 0 is built in).
- memif: `memif_create_v2` / `memif_delete` on a socket file registered with
  `memif_socket_filename_add_del_v2`. One socket id per path, shared by the memifs on it: the
  first memif on a path registers it (VPP chooses the id), the last one removes it (see
  docs/vpp.md for why this is not a scheduler value); a path VPP already knows is reused and,
  not being kvmesh's, never removed.
- gre, ipip: `gre_tunnel_add_del` (deleted by the same parameters) and `ipip_add_tunnel` /
  `ipip_del_tunnel`; depend on the outer VRF's table. An unset instance matches any.
- wireguard: `wireguard_interface_create` / `wireguard_interface_delete` (VPP removes its peers
  with it; kvmesh removes them first, as they depend on it), read back with its private key by
  `wireguard_interface_dump` (southbound/vpp/wireguard_api.py). An unset instance matches any.
- bond: `bond_create2` / `bond_delete` (VPP detaches its members); members are values of their
  own (`vpp/bond/<bond>/member/<interface>`, southbound/vpp/models/bond_member.py). VPP does not
  report a bond's GSO setting, and round-robin, active-backup and broadcast bonds have a
  load-balance of their own: those are not compared with what VPP reports (`same_section`).
"""

from __future__ import annotations

import contextlib
from typing import Any

from scheduler import Dependency
from southbound.vpp import keys
from southbound.vpp.binapi import (
    SUB_IF_EXACT_MATCH,
    SUB_IF_ONE_TAG,
    SUB_IF_TWO_TAGS,
    BondDetails,
    InterfaceDetails,
    MemifDetails,
    TunnelSpec,
    VxlanDetails,
)
from southbound.vpp.context import Context, MemifSocket
from southbound.vpp.errors import INVALID_SW_IF_INDEX, NO_SUCH_ENTRY, VppApiError, VppError
from southbound.vpp.models import BOND_LOAD_BALANCE, BOND_MODES
from southbound.vpp.models.vrf import vrf_dependencies
from southbound.vpp.wireguard_api import WireguardApi

TYPES = ("sub_interface", "vxlan", "memif", "bond", "gre", "ipip", "wireguard")
TUNNEL_MODES = ("p2p", "mp")
GRE_TYPES = ("l3", "teb", "erspan")
BOND_MODE_IDS = {name: number for number, name in enumerate(BOND_MODES, start=1)}
BOND_LB_IDS = {name: number for number, name in enumerate(BOND_LOAD_BALANCE)}
HASHED_BOND_MODES = ("xor", "lacp")  # the modes whose load_balance VPP keeps


def type_dependencies(v: dict[str, Any]) -> list[Dependency]:
    if v["type"] == "sub_interface":
        parent = v["sub_interface"]["parent"]
        return [Dependency(label=f"parent interface {parent}", key=keys.interface_key(parent))]
    if v["type"] == "vxlan":
        tunnel = v["vxlan"]
        return list(vrf_dependencies(tunnel["encap_vrf"], (":" in tunnel["src"],)))
    if v["type"] in ("gre", "ipip"):
        tunnel = v[v["type"]]
        return list(vrf_dependencies(tunnel["outer_vrf"], (":" in tunnel["src"],)))
    return []


def make(ctx: Context, name: str, v: dict[str, Any]) -> int:
    api = ctx.api
    if v["type"] == "sub_interface":
        sub = v["sub_interface"]
        parent = ctx.sw_if_index(sub["parent"])
        one_tag = sub["inner_vlan"] is None
        if one_tag and sub["exact_match"] and sub["sub_id"] == sub["outer_vlan"]:
            return api.create_vlan_subif(parent, sub["outer_vlan"])
        flags = (SUB_IF_ONE_TAG if one_tag else SUB_IF_TWO_TAGS) | \
            (SUB_IF_EXACT_MATCH if sub["exact_match"] else 0)
        return api.create_subif(parent, sub["sub_id"], flags, sub["outer_vlan"],
                                sub["inner_vlan"] or 0)
    if v["type"] == "vxlan":
        t = v["vxlan"]
        return api.vxlan_add_del(t["src"], t["dst"], t["vni"], t["encap_vrf"], True)
    if v["type"] == "gre":
        return api.gre_add_del(_tunnel_spec(v), True)
    if v["type"] == "ipip":
        return api.ipip_add(_tunnel_spec(v))
    if v["type"] == "wireguard":
        return WireguardApi(api.conn).create_interface(v["wireguard"])
    if v["type"] == "bond":
        b = v["bond"]
        return api.bond_create(b["id"], BOND_MODE_IDS[b["mode"]], BOND_LB_IDS[b["load_balance"]],
                               b["numa_only"], b["gso"], v["mac"])
    memif = v["memif"]
    socket = _take_socket(ctx, name, memif["socket"])
    try:
        return api.memif_create(socket.socket_id, memif["id"], memif["master"], v["mac"])
    except VppError:
        _release_socket(ctx, name, memif["socket"])
        raise


def unmake(ctx: Context, name: str, v: dict[str, Any], sw_if_index: int) -> None:
    """Delete; what is already gone (VPP restarted, or deleted with its parent) is deleted."""
    api = ctx.api
    try:
        if v["type"] == "sub_interface":
            api.delete_subif(sw_if_index)
        elif v["type"] == "vxlan":
            t = v["vxlan"]
            api.vxlan_add_del(t["src"], t["dst"], t["vni"], t["encap_vrf"], False)
        elif v["type"] == "bond":
            api.bond_delete(sw_if_index)
        elif v["type"] == "gre":
            api.gre_add_del(_tunnel_spec(v), False)
        elif v["type"] == "ipip":
            api.ipip_delete(sw_if_index)
        elif v["type"] == "wireguard":
            WireguardApi(api.conn).delete_interface(sw_if_index)
        else:
            api.memif_delete(sw_if_index)
    except VppApiError as exc:
        if exc.retval not in (INVALID_SW_IF_INDEX, NO_SUCH_ENTRY):
            raise
    if v["type"] == "memif":
        _release_socket(ctx, name, v["memif"]["socket"])


def _tunnel_spec(v: dict[str, Any]) -> TunnelSpec:
    t = v[v["type"]]
    return TunnelSpec(t["src"], t["dst"], t["outer_vrf"], TUNNEL_MODES.index(t["mode"]),
                      t["instance"], GRE_TYPES.index(t.get("type", "l3")),
                      t.get("session_id", 0))


def is_l3_tunnel(if_type: str, section: dict[str, Any] | None) -> bool:
    """An IPIP, WireGuard or GRE-l3 tunnel: no MAC, no MTU of its own to set."""
    return if_type in ("ipip", "wireguard") or (if_type == "gre" and section is not None
                                 and section["type"] == "l3")


def _tunnel_section(kind: str, t: TunnelSpec) -> dict[str, Any]:
    section: dict[str, Any] = {"src": t.src, "dst": t.dst, "outer_vrf": t.outer_vrf,
                               "mode": TUNNEL_MODES[t.mode], "instance": t.instance}
    if kind == "gre":
        section.update(type=GRE_TYPES[t.kind_type], session_id=t.session_id)
    return section


def _take_socket(ctx: Context, name: str, path: str) -> MemifSocket:
    socket = ctx.memif_sockets.get(path)
    if socket is None:
        known = {p: i for i, p in ctx.api.memif_sockets().items()}
        if path in known:
            socket = MemifSocket(known[path], set(), owned=False)
        else:
            socket = MemifSocket(ctx.api.memif_socket_add(path), set(), owned=True)
        ctx.memif_sockets[path] = socket
    socket.users.add(name)
    return socket


def _release_socket(ctx: Context, name: str, path: str) -> None:
    socket = ctx.memif_sockets.get(path)
    if socket is None:
        return
    socket.users.discard(name)
    if socket.users:
        return
    del ctx.memif_sockets[path]
    if socket.owned:
        # Gone already (VPP restarted) is fine; anything else leaves a socket id unused.
        with contextlib.suppress(VppApiError):
            ctx.api.memif_socket_delete(socket.socket_id)


def recreate(o: dict[str, Any], n: dict[str, Any]) -> bool:
    """Any change of a type's section means a new interface."""
    return bool(n["type"] in TYPES and o[n["type"]] != n[n["type"]])


def same_section(x: dict[str, Any], y: dict[str, Any], section: str) -> bool:
    """Whether two values' sections agree as far as VPP reports them (drift detection): a
    bond's GSO is not reported, the load-balance of a round-robin, active-backup or broadcast
    bond is VPP's own, and an unset id matches any."""
    left, right = x[section], y[section]
    if left is None or right is None:
        return bool(left == right)
    if section in ("gre", "ipip", "wireguard"):
        ignored_tunnel = {"instance"} if left["instance"] is None or \
            right["instance"] is None else set()
        return all(left[k] == right[k] for k in left if k not in ignored_tunnel)
    if section != "bond":
        return bool(left == right)
    ignored = {"gso"}
    if left["mode"] not in HASHED_BOND_MODES:
        ignored.add("load_balance")
    if left["id"] is None or right["id"] is None:
        ignored.add("id")
    return all(left[k] == right[k] for k in left if k not in ignored)


class Retrieved:
    """The dumps of the added types, read once per Retrieve."""

    def __init__(self, ctx: Context, details: list[InterfaceDetails]) -> None:
        self.ctx = ctx
        self.vxlans: dict[int, VxlanDetails] = {}
        self.memifs: dict[int, MemifDetails] = {}
        self.bonds: dict[int, BondDetails] = {}
        self.wireguards: dict[int, dict[str, Any]] = {}
        if any(d.dev_type == "Wireguard Tunnel" for d in details):
            self.wireguards = WireguardApi(ctx.api.conn).interfaces()
        self.tunnels: dict[str, dict[int, TunnelSpec]] = {}
        if any(d.dev_type == "GRE tunnel device" for d in details):
            self.tunnels["gre"] = ctx.api.gre_tunnels()
        if any(d.dev_type == "IPIP tunnel device" for d in details):
            self.tunnels["ipip"] = ctx.api.ipip_tunnels()
        self.socket_paths: dict[int, str] = {}
        if any(d.dev_type == "VXLAN" for d in details):
            self.vxlans = ctx.api.vxlan_tunnels()
        if any(d.dev_type == "bond" for d in details):
            self.bonds = ctx.api.bonds()
        if any(d.dev_type == "memif" for d in details):
            self.memifs = ctx.api.memifs()
            self.socket_paths = ctx.api.memif_sockets()

    def type_of(self, d: InterfaceDetails) -> str | None:
        if d.sub is not None:
            return "sub_interface"
        if d.sw_if_index in self.vxlans:
            return "vxlan"
        if d.sw_if_index in self.memifs:
            return "memif"
        if d.sw_if_index in self.bonds:
            return "bond"
        if d.sw_if_index in self.wireguards:
            return "wireguard"
        for kind, tunnels in self.tunnels.items():
            if d.sw_if_index in tunnels:
                return kind
        return None

    def section(self, d: InterfaceDetails, names: dict[int, str]) -> dict[str, Any] | None:
        """The type's section in model form (None: a sub-interface of a parent kvmesh does
        not own, which no kvmesh value can describe)."""
        if d.sub is not None:
            parent = names.get(d.sub.parent)
            if parent is None:
                return None
            return {
                "parent": parent,
                "sub_id": d.sub.sub_id,
                "outer_vlan": d.sub.outer_vlan,
                "inner_vlan": d.sub.inner_vlan if d.sub.tags == 2 else None,
                "exact_match": d.sub.exact_match,
            }
        if d.sw_if_index in self.vxlans:
            t = self.vxlans[d.sw_if_index]
            return {"src": t.src, "dst": t.dst, "vni": t.vni, "encap_vrf": t.encap_vrf}
        for kind, tunnels in self.tunnels.items():
            if d.sw_if_index in tunnels:
                return _tunnel_section(kind, tunnels[d.sw_if_index])
        if d.sw_if_index in self.wireguards:
            return dict(self.wireguards[d.sw_if_index])
        if d.sw_if_index in self.bonds:
            b = self.bonds[d.sw_if_index]
            mode = BOND_MODES[b.mode - 1]
            hashed = mode in HASHED_BOND_MODES and b.lb < len(BOND_LOAD_BALANCE)
            return {"id": b.bond_id, "mode": mode,
                    "load_balance": BOND_LOAD_BALANCE[b.lb] if hashed else "l2",
                    "numa_only": b.numa_only, "gso": False}
        m = self.memifs[d.sw_if_index]
        return {"socket": self.socket_paths.get(m.socket_id, ""), "id": m.memif_id,
                "master": m.master, "mode": "ethernet"}

    def adopt_sockets(self, memif_names: dict[int, str]) -> None:
        """Rebuild the socket users from what VPP has (after a restart: nothing)."""
        sockets: dict[str, MemifSocket] = {}
        for idx, m in self.memifs.items():
            path = self.socket_paths.get(m.socket_id)
            name = memif_names.get(idx)
            if path is None or name is None:
                continue
            known = self.ctx.memif_sockets.get(path)
            owned = known.owned if known is not None else False  # unknown: not ours
            socket = sockets.setdefault(path, MemifSocket(m.socket_id, set(), owned))
            socket.users.add(name)
        self.ctx.memif_sockets = sockets

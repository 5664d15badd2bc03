"""`vpp/interface/<name>`: loopback, tap (v2) and af_packet interfaces.

Create makes the interface, tags it `kvmesh:<name>` (how Retrieve recognises what kvmesh owns),
and applies VRF, MTU and admin state; if a step fails, the half-made interface is removed again.
Addresses and unnumbered are derived values with their own descriptors, so the comparator ignores
them here. A changed type, VRF, tap ring size or host interface needs re-creation.

The metadata (`InterfaceMeta`, with the sw_if_index) is the `vpp-interface` metadata map by name,
which the address, unnumbered, bridge-domain and route descriptors use.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from typing import Any

from scheduler import Dependency, Descriptor, InvalidValueError, ValueOrigin
from southbound.vpp import interface_types, keys
from southbound.vpp.binapi import InterfaceDetails
from southbound.vpp.context import (
    INTERFACE_DESCRIPTOR,
    Context,
    InterfaceMeta,
    owned_name,
    owner_tag,
)
from southbound.vpp.errors import (
    INVALID_SW_IF_INDEX,
    SYSCALL_ERROR_1,
    VppApiError,
    VppError,
)
from southbound.vpp.interface_types import type_dependencies
from southbound.vpp.models import (
    address_sort_key,
    interface_conflicts,
    model_descriptor,
    normalize_interface,
    parse_interface_address,
)
from southbound.vpp.models.vrf import vrf_dependencies
from southbound.vpp.wireguard_api import redact_private_key

log = logging.getLogger("southbound.vpp.interface")

# Fields handled by derived values (their own descriptors), ignored when comparing interfaces.
DERIVED_FIELDS = ("addresses", "unnumbered")


def _name(key: str) -> str:
    name = keys.interface_name(key)
    assert name is not None, key
    return name


def _dependencies(v: dict[str, Any]) -> Sequence[Dependency]:
    # Its VRF's tables: IPv4 always, IPv6 when it has IPv6 addresses.
    deps = list(vrf_dependencies(v["vrf"], (False, True) if _has_ip6(v) else (False,)))
    deps.extend(type_dependencies(v))
    if v["type"] != "af_packet":
        return deps
    host = v["af_packet"]["host_if_name"]
    wanted = (keys.linux_host_key(host), keys.linux_interface_key(host))
    deps.append(
        Dependency(
            label=f"host interface {host}",
            any_of=lambda k, wanted=wanted: k in wanted,  # type: ignore[misc]
            key_prefixes=wanted,
        ),
    )
    return deps


def _agree(x: dict[str, Any], y: dict[str, Any]) -> bool:
    """Equal for the fields this descriptor applies; None (unspecified) matches anything."""
    for field in ("type", "enabled", "vrf", "af_packet"):
        if x[field] != y[field]:
            return False
    for section in interface_types.TYPES:
        if not interface_types.same_section(x, y, section):
            return False
    for field in ("mtu", "mac"):
        if x[field] is not None and y[field] is not None and x[field] != y[field]:
            return False
    if x["tap"] is not None and y["tap"] is not None:
        for field, left in x["tap"].items():
            right = y["tap"][field]
            if left is not None and right is not None and left != right:
                return False
    return True


class InterfaceDescriptor:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.api = ctx.api

    def descriptor(self) -> Descriptor:
        return model_descriptor(
            INTERFACE_DESCRIPTOR, normalize_interface, keys.is_interface_key,
            depends_on=_dependencies,
            agree=_agree,
            key_label=_name,
            create=self.create,
            delete=self.delete,
            update=self.update,
            update_with_recreate=self.update_with_recreate,
            retrieve=self.retrieve,
            derived_values=self.derived_values,
            with_metadata=True,
            conflicts=interface_conflicts,
            redact=redact_private_key,
        )

    # ------------------------------------------------------------------ CRUD
    def create(self, key: str, value: Any) -> InterfaceMeta:
        v = normalize_interface(key, value)
        sw_if_index = self._make(v, _name(key))
        # Known by name before it is configured: VPP's events for it (e.g. admin up) may be
        # dispatched before this create returns.
        self.ctx.names_by_index[sw_if_index] = _name(key)
        try:
            self.api.set_tag(sw_if_index, owner_tag(_name(key)))
            if v["vrf"]:
                self.api.set_vrf(sw_if_index, v["vrf"], _has_ip6(v))
            if v["mtu"] is not None:
                self.api.set_mtu(sw_if_index, v["mtu"])
            if v["enabled"]:
                self.api.set_admin_up(sw_if_index, True)
        except VppError:
            # Leave nothing half-made behind: the scheduler sees a clean failed create.
            self.ctx.names_by_index.pop(sw_if_index, None)
            with contextlib.suppress(VppError):
                self._unmake(v, sw_if_index, _name(key))
            raise
        return InterfaceMeta(sw_if_index, v["type"])

    def _make(self, v: dict[str, Any], name: str) -> int:
        if v["type"] in interface_types.TYPES:
            return interface_types.make(self.ctx, name, v)
        if v["type"] == "loopback":
            return self.api.create_loopback(v["mac"])
        if v["type"] == "tap":
            tap = v["tap"]
            return self.api.create_tap(
                v["mac"], tap["host_if_name"], tap["rx_ring_size"], tap["tx_ring_size"]
            )
        return self.api.create_af_packet(v["af_packet"]["host_if_name"], v["mac"])

    def _unmake(self, v: dict[str, Any], sw_if_index: int, name: str) -> None:
        if v["type"] in interface_types.TYPES:
            interface_types.unmake(self.ctx, name, v, sw_if_index)
        elif v["type"] == "loopback":
            self.api.delete_loopback(sw_if_index)
        elif v["type"] == "tap":
            self.api.delete_tap(sw_if_index)
        else:
            self.api.delete_af_packet(v["af_packet"]["host_if_name"])

    def delete(self, key: str, value: Any, metadata: InterfaceMeta | None) -> None:
        v = normalize_interface(key, value)
        sw_if_index = metadata.sw_if_index if metadata is not None else None
        if sw_if_index is not None:
            self.ctx.names_by_index.pop(sw_if_index, None)
        if sw_if_index is None and v["type"] not in ("af_packet", "vxlan"):
            return  # never created (or VPP restarted): nothing to delete
        try:
            self._unmake(v, sw_if_index if sw_if_index is not None else -1, _name(key))
        except VppApiError as exc:
            # Already gone (deleted behind our back, or VPP restarted): the goal is reached.
            if exc.retval not in (INVALID_SW_IF_INDEX, SYSCALL_ERROR_1):
                raise

    def update(self, key: str, old: Any, new: Any, metadata: InterfaceMeta) -> InterfaceMeta:
        o, n = normalize_interface(key, old), normalize_interface(key, new)
        idx = metadata.sw_if_index
        if n["mac"] is not None and n["mac"] != o["mac"]:
            self.api.set_mac(idx, n["mac"])
        if n["mtu"] is not None and n["mtu"] != o["mtu"]:
            self.api.set_mtu(idx, n["mtu"])
        if n["enabled"] != o["enabled"]:
            self.api.set_admin_up(idx, n["enabled"])
        return metadata

    def update_with_recreate(self, key: str, old: Any, new: Any, metadata: Any) -> bool:
        o, n = normalize_interface(key, old), normalize_interface(key, new)
        if (o["type"], o["vrf"]) != (n["type"], n["vrf"]):
            return True
        if n["vrf"] and _has_ip6(o) != _has_ip6(n):
            return True  # the IPv6 binding to the VRF is made at creation
        if interface_types.recreate(o, n):
            return True
        if n["type"] == "tap":
            ot, nt = o["tap"], n["tap"]
            if (ot["rx_ring_size"], ot["tx_ring_size"]) != (nt["rx_ring_size"], nt["tx_ring_size"]):
                return True
            return nt["host_if_name"] is not None and nt["host_if_name"] != ot["host_if_name"]
        if n["type"] == "af_packet":
            return bool(n["af_packet"] != o["af_packet"])
        return False

    # ------------------------------------------------------------------ relations
    def derived_values(self, key: str, value: Any) -> list[tuple[str, Any]]:
        try:
            v = normalize_interface(key, value)
        except InvalidValueError:
            return []
        name = _name(key)
        derived: list[tuple[str, Any]] = [
            (keys.address_key(name, cidr), {"interface": name, "address": cidr})
            for cidr in v["addresses"]
        ]
        if v["unnumbered"] is not None:
            derived.append(
                (
                    keys.unnumbered_key(name),
                    {"interface": name, **v["unnumbered"]},
                )
            )
        return derived

    # ------------------------------------------------------------------ retrieve
    def retrieve(self, correlate: list[tuple[str, Any, Any]]) -> list[tuple[str, Any, Any, Any]]:
        """Every interface tagged `kvmesh:<name>`, in model form, read back from VPP's dumps."""
        details = self.api.interfaces()
        owned = {d.sw_if_index: (name, d) for d in details if (name := owned_name(d.tag))}
        if not owned:
            self.ctx.names_by_index = {}
            self.ctx.memif_sockets = {}  # VPP restarted (or nothing is kvmesh's)
            return []
        taps = self.api.taps()
        af_packets = self.api.af_packets()
        borrowed = self.api.unnumbered()
        added = interface_types.Retrieved(self.ctx, [d for _name, d in owned.values()])
        names = {idx: name for idx, (name, _d) in owned.items()}
        self.ctx.names_by_index = dict(names)
        added.adopt_sockets(names)
        result = []
        for idx, (name, d) in owned.items():
            if_type = added.type_of(d) or _type_of(d, taps, af_packets)
            if if_type is None:
                log.warning("interface %s (%s) has an unknown type %r", name, d.name, d.dev_type)
                continue
            section = added.section(d, names) if if_type in interface_types.TYPES else None
            if if_type in interface_types.TYPES and section is None:
                log.warning("sub-interface %s (%s) of an interface kvmesh does not own",
                            name, d.name)
                continue
            addresses = sorted(
                (parse_interface_address(a) for a in self.api.addresses(idx)), key=address_sort_key
            )
            value: dict[str, Any] = {
                "type": if_type,
                "enabled": d.admin_up,
                "mtu": d.mtu,
                "mac": d.mac.lower(),
                "vrf": self.api.vrf(idx),
                "addresses": [str(a) for a in addresses],
                "unnumbered": None,
                "tap": None,
                "af_packet": None,
                **{t: None for t in interface_types.TYPES},
            }
            if if_type == "sub_interface" or interface_types.is_l3_tunnel(if_type, section):
                value["mtu"] = value["mac"] = None  # its parent's; an L3 tunnel has none
            if section is not None:
                value[if_type] = section
            if idx in borrowed and borrowed[idx] in names:
                value["unnumbered"] = {"interface_with_ip": names[borrowed[idx]]}
            if if_type == "tap":
                tap = taps[idx]
                value["tap"] = {
                    "host_if_name": tap.host_if_name,
                    "rx_ring_size": tap.rx_ring_size,
                    "tx_ring_size": tap.tx_ring_size,
                }
            elif if_type == "af_packet":
                value["af_packet"] = {"host_if_name": af_packets[idx]}
            result.append(
                (keys.interface_key(name), value, InterfaceMeta(idx, if_type), ValueOrigin.FROM_NB)
            )
        return result


def _has_ip6(v: dict[str, Any]) -> bool:
    return any(":" in cidr for cidr in v["addresses"])


def _type_of(d: InterfaceDetails, taps: dict[int, Any], af_packets: dict[int, str]) -> str | None:
    if d.sw_if_index in taps:
        return "tap"
    if d.sw_if_index in af_packets:
        return "af_packet"
    if d.dev_type == "Loopback" or d.name.startswith("loop"):
        return "loopback"
    return None

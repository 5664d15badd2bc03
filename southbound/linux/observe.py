"""Kernel state -> model values: what Retrieve and the watcher report.

``interface_value`` reports a kvmesh-owned link in the exact canonical shape of the interface
model (``InterfaceSpec.to_value``), projected on what the desired value manages: a field the
desired value leaves unset (``mtu``, ``mac``) is reported unset, and IPv6 link-local addresses the
kernel adds by itself are hidden unless desired. So an unchanged, correctly applied value compares
equal and drift in a managed field does not.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from typing import Any

from southbound.linux.interface_model import (
    InterfaceSpec,
    MacvlanSpec,
    VethSpec,
    VxlanSpec,
)
from southbound.linux.models import sort_addresses
from southbound.linux.records import Link

_UNKNOWN_PEER = "?"
_LINK_LOCAL_STARTS = frozenset({"fe8", "fe9", "fea", "feb"})


def is_auto_link_local(cidr: str) -> bool:
    """IPv6 link-local addresses (fe80::/10) are added by the kernel when a link comes up.

    ``cidr`` is canonical text (lower case, as decoded from the kernel), so the first three hex
    digits decide: fe8, fe9, fea, feb."""
    return cidr[:3] in _LINK_LOCAL_STARTS and ":" in cidr[:5]


def model_type(link: Link) -> str | None:
    """The interface model type of a link, or None when the model has no such type."""
    if link.kind in ("veth", "bridge", "vxlan", "macvlan"):
        return link.kind
    if link.kind == "tun" and link.tap:
        return "tap"
    return None


def interface_spec(link: Link, addresses: Iterable[str], names: Mapping[int, str],
                   desired: InterfaceSpec | None) -> InterfaceSpec | None:
    """The kernel's version of a kvmesh interface, shaped like ``desired`` (see module doc)."""
    kind = model_type(link)
    if kind is None:
        return None
    wanted_addresses = set(desired.addresses) if desired is not None else set()
    reported = [a for a in addresses if not is_auto_link_local(a) or a in wanted_addresses]
    veth = vxlan = macvlan = None
    if kind == "veth":
        peer = names.get(link.link, _UNKNOWN_PEER) if link.link is not None else _UNKNOWN_PEER
        veth = VethSpec(peer=peer)
    elif kind == "vxlan" and link.vxlan is not None:
        info = link.vxlan
        vxlan = VxlanSpec(
            vni=info.vni or 0,
            local=str(ipaddress.ip_address(info.local)) if info.local else None,
            remote=str(ipaddress.ip_address(info.remote)) if info.remote else None,
            port=info.port or 0,
            device=names.get(info.device_index) if info.device_index else None,
        )
    elif kind == "macvlan":
        parent = names.get(link.link, _UNKNOWN_PEER) if link.link is not None else _UNKNOWN_PEER
        macvlan = MacvlanSpec(parent=parent, mode=link.macvlan_mode or "bridge")
    manages_mtu = desired is None or desired.mtu is not None
    manages_mac = desired is None or desired.mac is not None
    return InterfaceSpec(
        name=link.name,
        type=kind,
        enabled=link.up,
        mtu=link.mtu if manages_mtu else None,
        mac=link.mac.lower() if manages_mac and link.mac else None,
        addresses=tuple(sort_addresses(reported)),
        master=names.get(link.master) if link.master is not None else None,
        veth=veth,
        vxlan=vxlan,
        macvlan=macvlan,
    )


def host_type(link: Link) -> str:
    if link.kind is None:
        return "loopback" if link.name == "lo" else "device"
    if link.kind == "tun":
        return "tap" if link.tap else "tun"
    return link.kind


def host_value(link: Link, addresses: Iterable[str]) -> dict[str, Any]:
    """The OBTAINED value of a host link (identical from the watcher and from Retrieve)."""
    return {
        "name": link.name,
        "index": link.index,
        "type": host_type(link),
        "enabled": link.up,
        "mtu": link.mtu,
        "mac": link.mac.lower() if link.mac else None,
        "addresses": sort_addresses(addresses),
    }

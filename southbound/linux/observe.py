"""Kernel state -> the OBTAINED value of a host link: what the host descriptor's Retrieve and
the watcher report (identical from both). kvmesh's own links are observed by their model
(``southbound/linux/models/interface.py``: ``interface_spec``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from southbound.linux.fields import sort_addresses
from southbound.linux.records import Link


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

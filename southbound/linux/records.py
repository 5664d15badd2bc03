"""Immutable records of kernel objects, as decoded from rtnetlink messages."""

from __future__ import annotations

import socket
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class VxlanInfo:
    vni: int | None
    local: str | None
    remote: str | None
    port: int | None
    device_index: int | None


@dataclass(frozen=True, slots=True)
class Link:
    """A link as the kernel reports it."""

    index: int
    name: str
    kind: str | None  # "veth", "bridge", "tun", "vxlan", "macvlan"; None for physical / loopback
    group: int
    mtu: int
    mac: str | None
    up: bool
    master: int | None  # ifindex of the bridge it is enslaved to
    link: int | None  # veth peer / macvlan parent ifindex (IFLA_LINK)
    macvlan_mode: str | None = None
    vxlan: VxlanInfo | None = None
    tap: bool = False


@dataclass(frozen=True, slots=True)
class Address:
    index: int
    cidr: str  # "10.0.0.1/24", normalised
    scope: int


@dataclass(frozen=True, slots=True)
class Route:
    table: int
    dst: str  # network, normalised ("10.1.0.0/16")
    oif: int | None
    gateway: str | None
    metric: int
    scope: int
    proto: int

    @property
    def family(self) -> int:
        return socket.AF_INET6 if ":" in self.dst else socket.AF_INET

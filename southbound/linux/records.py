"""Immutable records of kernel objects, as decoded from rtnetlink messages."""

from __future__ import annotations

import socket
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class CreatedLink:
    """What the kernel echoed of a link it created."""

    index: int
    peer: int | None  # the veth peer's ifindex


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
    proto: int = 0  # IFA_PROTO: who added it (kvmesh marks its own, see context.Ownership)


@dataclass(frozen=True, slots=True)
class NextHop:
    """One next hop of a multipath route."""

    oif: int
    gateway: str | None
    weight: int  # 1..256 (the kernel's rtnh_hops + 1)


RTN_UNICAST = 1


@dataclass(frozen=True, slots=True)
class Route:
    table: int
    dst: str  # network, normalised ("10.1.0.0/16")
    oif: int | None
    gateway: str | None
    metric: int
    scope: int
    proto: int
    type: int = RTN_UNICAST  # RTN_* (rtnetlink.h): unicast, blackhole, unreachable, prohibit
    src: str | None = None  # preferred source (RTA_PREFSRC)
    nexthops: tuple[NextHop, ...] = ()  # multipath (RTA_MULTIPATH), sorted by (oif, gateway)

    @property
    def family(self) -> int:
        return socket.AF_INET6 if ":" in self.dst else socket.AF_INET


def sorted_nexthops(nexthops: Iterable[NextHop]) -> tuple[NextHop, ...]:
    """The one order of next hops, whether built by kvmesh or decoded from the kernel."""
    return tuple(sorted(nexthops, key=lambda hop: (hop.oif, hop.gateway or "", hop.weight)))


@dataclass(frozen=True, slots=True)
class Neighbor:
    """A neighbor (ARP/NDP) entry: ``state`` is the kernel's NUD bit set, ``proto`` its
    NDA_PROTOCOL (0 when none: learned by the kernel or added without one)."""

    index: int
    ip: str  # canonical
    mac: str | None  # lower case; None for an entry without link-layer address (incomplete)
    state: int
    proto: int

    @property
    def family(self) -> int:
        return socket.AF_INET6 if ":" in self.ip else socket.AF_INET


@dataclass(frozen=True, slots=True)
class Rule:
    """A policy routing rule (``ip rule``); networks are canonical CIDRs or None (any)."""

    family: int
    priority: int
    src: str | None
    dst: str | None
    iif: str | None
    oif: str | None
    fwmark: int | None
    fwmask: int | None
    table: int  # 0 for the actions that look up no table
    action: int  # FR_ACT_*
    proto: int

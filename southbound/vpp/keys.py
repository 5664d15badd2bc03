"""The key space of the VPP southbound: building and parsing keys.

    vpp/interface/<name>                          interface (NB)
    vpp/interface/<name>/address/<cidr>           derived: one per interface address
    vpp/interface/<name>/unnumbered               derived: borrowing the addresses of another one
    vpp/bd/<name>                                 bridge domain (NB)
    vpp/bd/<name>/interface/<iface>               derived: one binding per member interface
    vpp/route/<vrf>/<dst cidr>/<next hop>         route (NB)

Names never contain "/", so the component after the prefix is the name. CIDRs contain exactly one
"/", which the parsers account for. A route without a next hop uses the unspecified address of
its family (`0.0.0.0` or `::`) as the last component.
"""

from __future__ import annotations

import ipaddress
from typing import NamedTuple

INTERFACE_PREFIX = "vpp/interface/"
BD_PREFIX = "vpp/bd/"
ROUTE_PREFIX = "vpp/route/"
ADDRESS = "address"
UNNUMBERED = "unnumbered"
BD_MEMBER = "interface"

LINUX_HOST_PREFIX = "linux/interface/host/"
LINUX_INTERFACE_PREFIX = "linux/interface/"


def interface_key(name: str) -> str:
    return f"{INTERFACE_PREFIX}{name}"


def address_prefix(name: str) -> str:
    return f"{INTERFACE_PREFIX}{name}/{ADDRESS}/"


def address_key(name: str, cidr: str) -> str:
    return f"{address_prefix(name)}{cidr}"


def unnumbered_key(name: str) -> str:
    return f"{INTERFACE_PREFIX}{name}/{UNNUMBERED}"


def bd_key(name: str) -> str:
    return f"{BD_PREFIX}{name}"


def bd_member_key(bd: str, iface: str) -> str:
    return f"{BD_PREFIX}{bd}/{BD_MEMBER}/{iface}"


def route_key(vrf: int, dst: str, next_hop: str) -> str:
    return f"{ROUTE_PREFIX}{vrf}/{dst}/{next_hop}"


def linux_host_key(name: str) -> str:
    return f"{LINUX_HOST_PREFIX}{name}"


def linux_interface_key(name: str) -> str:
    return f"{LINUX_INTERFACE_PREFIX}{name}"


def _tail(key: str, prefix: str) -> list[str] | None:
    if not key.startswith(prefix):
        return None
    parts = key[len(prefix) :].split("/")
    return parts if parts[0] else None


def key_parts(key: str, prefix: str, count: int) -> tuple[str, ...] | None:
    """The `count` non-empty '/'-separated parts of a key after `prefix`, or None."""
    parts = _tail(key, prefix)
    if parts is None or len(parts) != count or not all(parts):
        return None
    return tuple(parts)


def ip6_key_tail(key: str, prefix: str) -> str | None:
    """The IPv6 address ending a key (`vpp/srv6/policy/<bsid>`), if written canonically."""
    if not key.startswith(prefix):
        return None
    tail = key[len(prefix) :]
    try:
        return tail if str(ipaddress.IPv6Address(tail)) == tail else None
    except ValueError:
        return None


U32_MAX = 0xFFFFFFFF


def u32_key_tail(key: str, prefix: str) -> int | None:
    """The u32 ending a key (`vpp/ipsec/sa/<id>`), if written canonically (no leading 0)."""
    if not key.startswith(prefix):
        return None
    tail = key[len(prefix) :]
    if not tail.isdigit() or (len(tail) > 1 and tail[0] == "0") or int(tail) > U32_MAX:
        return None
    return int(tail)


def interface_name(key: str) -> str | None:
    """The name of an interface key (`vpp/interface/<name>`), else None."""
    if not key.startswith(INTERFACE_PREFIX) or key.count("/") != 2:
        return None
    return key[len(INTERFACE_PREFIX) :] or None


def is_interface_key(key: str) -> bool:
    # Cheap: the scheduler asks every descriptor's key selector about every key.
    return key.startswith(INTERFACE_PREFIX) and key.count("/") == 2 and len(key) > 14


def is_address_key(key: str) -> bool:
    return key.startswith(INTERFACE_PREFIX) and "/address/" in key and key.count("/") == 5


def is_route_key(key: str) -> bool:
    return key.startswith(ROUTE_PREFIX) and key.count("/") == 5


def parse_address_key(key: str) -> tuple[str, str] | None:
    """(interface, cidr) of `vpp/interface/<name>/address/<ip>/<len>`, else None."""
    parts = _tail(key, INTERFACE_PREFIX)
    if parts is None or len(parts) != 4 or parts[1] != ADDRESS or not parts[2] or not parts[3]:
        return None
    return parts[0], f"{parts[2]}/{parts[3]}"


def unnumbered_interface(key: str) -> str | None:
    parts = _tail(key, INTERFACE_PREFIX)
    if parts is None or len(parts) != 2 or parts[1] != UNNUMBERED:
        return None
    return parts[0]


def bd_name(key: str) -> str | None:
    parts = _tail(key, BD_PREFIX)
    return parts[0] if parts is not None and len(parts) == 1 else None


def parse_bd_member_key(key: str) -> tuple[str, str] | None:
    parts = _tail(key, BD_PREFIX)
    if parts is None or len(parts) != 3 or parts[1] != BD_MEMBER or not parts[2]:
        return None
    return parts[0], parts[2]


class RouteKey(NamedTuple):
    vrf: str
    dst: str
    next_hop: str


def parse_route_key(key: str) -> RouteKey | None:
    """`vpp/route/<vrf>/<ip>/<len>/<next hop>` split into its parts (unvalidated), else None."""
    parts = _tail(key, ROUTE_PREFIX)
    if parts is None or len(parts) != 4 or not all(parts):
        return None
    return RouteKey(parts[0], f"{parts[1]}/{parts[2]}", parts[3])


# ---------------------------------------------------------------------- issue 19 additions
#   vpp/vrf/<ipv4|ipv6>/<id>                      VRF (FIB) table (NB; table 0 is VPP's own)
#   vpp/neighbor/<interface>/<ip>                 static neighbor (NB)
#   vpp/xconnect/<rx interface>                   L2 cross-connect (NB)
#   vpp/bd/<bd>/fib/<mac>                         static L2 FIB entry (NB)
VRF_PREFIX = "vpp/vrf/"
NEIGHBOR_PREFIX = "vpp/neighbor/"
XCONNECT_PREFIX = "vpp/xconnect/"
L2FIB = "fib"
VRF_PROTOCOLS = ("ipv4", "ipv6")


def vrf_key(protocol: str, table_id: int) -> str:
    return f"{VRF_PREFIX}{protocol}/{table_id}"


def vrf_protocol(is_ip6: bool) -> str:
    return VRF_PROTOCOLS[1] if is_ip6 else VRF_PROTOCOLS[0]


def parse_vrf_key(key: str) -> tuple[str, str] | None:
    """(protocol, id) of `vpp/vrf/<protocol>/<id>` (unvalidated), else None."""
    parts = _tail(key, VRF_PREFIX)
    if parts is None or len(parts) != 2 or not parts[1]:
        return None
    return parts[0], parts[1]


def neighbor_key(interface: str, ip: str) -> str:
    return f"{NEIGHBOR_PREFIX}{interface}/{ip}"


def parse_neighbor_key(key: str) -> tuple[str, str] | None:
    parts = _tail(key, NEIGHBOR_PREFIX)
    if parts is None or len(parts) != 2 or not parts[1]:
        return None
    return parts[0], parts[1]


def xconnect_key(rx: str) -> str:
    return f"{XCONNECT_PREFIX}{rx}"


def xconnect_interface(key: str) -> str | None:
    parts = _tail(key, XCONNECT_PREFIX)
    return parts[0] if parts is not None and len(parts) == 1 else None


def l2fib_key(bd: str, mac: str) -> str:
    return f"{BD_PREFIX}{bd}/{L2FIB}/{mac}"


def parse_l2fib_key(key: str) -> tuple[str, str] | None:
    """(bridge domain, mac) of `vpp/bd/<bd>/fib/<mac>`, else None."""
    parts = _tail(key, BD_PREFIX)
    if parts is None or len(parts) != 3 or parts[1] != L2FIB or not parts[2]:
        return None
    return parts[0], parts[2]



def single_name(key: str, prefix: str) -> str | None:
    """The one component after `prefix` (`vpp/ip6-nd/<interface>`), else None."""
    parts = _tail(key, prefix)
    return parts[0] if parts is not None and len(parts) == 1 else None

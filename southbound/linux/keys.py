"""The key space of the Linux southbound: building and parsing keys.

    linux/interface/<name>                        interface (NB)
    linux/interface/<name>/address/<cidr>         derived: one per address of an interface
    linux/interface/<name>/master                 derived: enslaving the interface to its bridge
    linux/interface/host/<name>                   OBTAINED: a link kvmesh does not own
    linux/interface/host/<name>/address/<cidr>    derived from a host link: one per address
    linux/route/<table>/<dst cidr>/<dev>          route (NB); table: main/local/default/number;
                                                  dev "-": no single device (typed, multipath)

Interface names never contain "/" (the kernel forbids it), so the first component after
``linux/interface/`` is always the name. The name ``host`` is reserved for the host-link subtree.
CIDRs contain exactly one "/", which the parsers account for.
"""

from __future__ import annotations

from typing import NamedTuple

PREFIX = "linux/"
INTERFACE_PREFIX = "linux/interface/"
HOST_PREFIX = "linux/interface/host/"
ROUTE_PREFIX = "linux/route/"
HOST_NAME = "host"  # reserved: kvmesh interfaces may not use it
NO_DEVICE = "-"  # the device of a route that has none (blackhole...) or several (multipath)


def interface_key(name: str) -> str:
    return f"{INTERFACE_PREFIX}{name}"


def address_key(name: str, cidr: str) -> str:
    return f"{INTERFACE_PREFIX}{name}/address/{cidr}"


def address_prefix(name: str) -> str:
    return f"{INTERFACE_PREFIX}{name}/address/"


def master_key(name: str) -> str:
    return f"{INTERFACE_PREFIX}{name}/master"


def host_key(name: str) -> str:
    return f"{HOST_PREFIX}{name}"


def host_address_key(name: str, cidr: str) -> str:
    return f"{HOST_PREFIX}{name}/address/{cidr}"


def host_address_prefix(name: str) -> str:
    return f"{HOST_PREFIX}{name}/address/"


# Tables with a well-known name are written by name in keys ("linux/route/main/..."), so the
# key of a route is the same whether an operator wrote it or Retrieve read it from the kernel.
TABLE_NAMES = {"default": 253, "main": 254, "local": 255}


def table_in_key(table: int) -> str:
    """How a table is written in a key: its name when it has one, else its number."""
    for name, number in TABLE_NAMES.items():
        if number == table:
            return name
    return str(table)


def route_key(table: int, dst: str, dev: str) -> str:
    return f"{ROUTE_PREFIX}{table_in_key(table)}/{dst}/{dev}"


def _interface_parts(key: str) -> list[str] | None:
    if not key.startswith(INTERFACE_PREFIX):
        return None
    return key[len(INTERFACE_PREFIX) :].split("/")


def parse_interface_key(key: str) -> str | None:
    """Name of an NB interface key, or None. ``linux/interface/host`` parses (and is rejected
    by validation), so that a user mistake gets a clear message instead of "no descriptor"."""
    parts = _interface_parts(key)
    if parts is None or len(parts) != 1 or not parts[0]:
        return None
    return parts[0]


def parse_address_key(key: str) -> tuple[str, str] | None:
    """(interface name, cidr) of a derived address key of a kvmesh interface, or None."""
    parts = _interface_parts(key)
    if parts is None or len(parts) != 4 or parts[0] == HOST_NAME or parts[1] != "address":
        return None
    return parts[0], f"{parts[2]}/{parts[3]}"


def parse_master_key(key: str) -> str | None:
    """Interface name of a derived master-binding key, or None."""
    parts = _interface_parts(key)
    if parts is None or len(parts) != 2 or parts[0] == HOST_NAME or parts[1] != "master":
        return None
    return parts[0]


def parse_host_key(key: str) -> str | None:
    """Link name of an OBTAINED host-interface key, or None."""
    if not key.startswith(HOST_PREFIX):
        return None
    name = key[len(HOST_PREFIX) :]
    if not name or "/" in name:
        return None
    return name


def parse_host_address_key(key: str) -> tuple[str, str] | None:
    """(link name, cidr) of an address derived from a host link, or None."""
    if not key.startswith(HOST_PREFIX):
        return None
    parts = key[len(HOST_PREFIX) :].split("/")
    if len(parts) != 4 or parts[1] != "address":
        return None
    return parts[0], f"{parts[2]}/{parts[3]}"


class RouteKey(NamedTuple):
    table: str  # as written in the key: a table name (main, local, default) or a number
    dst: str
    dev: str


def parse_route_key(key: str) -> RouteKey | None:
    """Components of a route key, or None when the key does not have the route shape."""
    if not key.startswith(ROUTE_PREFIX):
        return None
    parts = key[len(ROUTE_PREFIX) :].split("/")
    if len(parts) != 4 or not all(parts):
        return None
    return RouteKey(parts[0], f"{parts[1]}/{parts[2]}", parts[3])

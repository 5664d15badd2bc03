"""Field types shared by the Linux models (``southbound/linux/models/*.py``): interface names,
MAC and IP addresses, CIDRs, networks, routing tables, as pydantic annotated types with their
one-line errors and JSON Schema. Each model module builds its pydantic model from these.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    Field,
    PlainValidator,
    WithJsonSchema,
)

from southbound.linux import keys
from southbound.linux.addr import parse_address, parse_cidr, parse_network
from southbound.validation import FieldProblems

IFNAMSIZ = 16  # the kernel's limit, including the terminating NUL: names are at most 15 chars
U32_MAX = 2**32 - 1
_MAC_RE = re.compile(r"^[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}$")
_BAD_NAME_CHARACTER = re.compile(r"[/:\s]")


def interface_name_problem(name: object) -> str | None:
    """What is wrong with a Linux interface name, or None (the kernel's dev_valid_name rules)."""
    if not isinstance(name, str) or not name:
        return "must be a non-empty string"
    if len(name) >= IFNAMSIZ:
        return f"must be at most {IFNAMSIZ - 1} characters (got {len(name)})"
    if name in (".", ".."):
        return "must not be '.' or '..'"
    if _BAD_NAME_CHARACTER.search(name):
        return "must not contain '/', ':' or whitespace"
    if not name.isprintable():
        return "must contain printable characters only"
    return None


def _interface_name(name: str) -> str:
    problem = interface_name_problem(name)
    if problem:
        raise ValueError(f"interface name {problem}")
    return name


def _mac(text: str) -> str:
    if not _MAC_RE.match(text):
        raise ValueError(f"must be a MAC address like '02:00:00:00:00:01', got {text!r}")
    mac = text.lower()
    if int(mac[:2], 16) & 1:
        raise ValueError("must be a unicast MAC address (first octet even)")
    if mac == "00:00:00:00:00:00":
        raise ValueError("must not be all zeros")
    return mac


def _ip(text: str) -> str:
    try:
        return parse_address(text)[2]
    except ValueError:
        raise ValueError(f"must be an IPv4 or IPv6 address, got {text!r}") from None


def _interface_address(text: str) -> str:
    try:
        return parse_cidr(text).text
    except ValueError:
        raise ValueError(f"must be an address in CIDR notation, e.g. '10.0.0.1/24', "
                         f"got {text!r}") from None


def _network(text: str) -> str:
    try:
        return parse_network(text).text
    except ValueError:
        raise ValueError("must be a network in CIDR notation with host bits zero, "
                         f"e.g. '10.1.0.0/16', got {text!r}") from None


def _addresses(addresses: list[str]) -> list[str]:
    seen: dict[str, int] = {}
    for position, cidr in enumerate(addresses):
        if cidr in seen:
            raise FieldProblems({f"[{position}]": f"duplicate address {cidr}"})
        seen[cidr] = position
    return sort_addresses(addresses)


def sort_addresses(addresses: Iterable[str]) -> list[str]:
    """Deterministic address order (IPv4 first, numeric): the same list from NB and from kernel."""
    return sorted(addresses, key=lambda cidr: parse_cidr(cidr).sort_key)


def _table(raw: Any) -> int | str:
    if isinstance(raw, str) and raw in keys.TABLE_NAMES:
        return raw
    if isinstance(raw, int) and not isinstance(raw, bool) and 1 <= raw <= U32_MAX:
        return raw
    raise ValueError(f"must be one of {', '.join(keys.TABLE_NAMES)} or an integer "
                     f"1..{U32_MAX}, got {raw!r}")


InterfaceName = Annotated[str, AfterValidator(_interface_name), Field(
    min_length=1, max_length=IFNAMSIZ - 1, pattern=r"^[^/:\s]+$",
    description="a Linux interface name (1..15 characters, no '/', ':' or whitespace)")]
Mac = Annotated[str, AfterValidator(_mac), Field(
    pattern=_MAC_RE.pattern, description="a unicast MAC address, e.g. 02:00:00:00:00:01")]
IPAddress = Annotated[str, AfterValidator(_ip), Field(description="an IPv4 or IPv6 address")]
InterfaceAddress = Annotated[str, AfterValidator(_interface_address), Field(
    description="an address with its prefix length, e.g. 10.0.0.1/24")]
Network = Annotated[str, AfterValidator(_network), Field(
    description="a network in CIDR notation with host bits zero, e.g. 10.1.0.0/16")]
InterfaceAddresses = Annotated[list[InterfaceAddress], AfterValidator(_addresses)]
Table = Annotated[int | str, PlainValidator(_table), WithJsonSchema({
    "oneOf": [{"enum": list(keys.TABLE_NAMES)},
              {"type": "integer", "minimum": 1, "maximum": U32_MAX}]})]



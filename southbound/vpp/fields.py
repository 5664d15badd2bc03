"""Field checks shared by the models: each records a field-level message instead of raising, so
a value reports every bad field at once."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from typing import Any

from scheduler import InvalidValueError

# VPP tags (string[64]) carry "kvmesh:<name>", so names stay within 63 - len("kvmesh:") chars.
OWNER_TAG = "kvmesh:"
NAME_MAX = 63 - len(OWNER_TAG)
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]*$")
LINUX_IFNAME_RE = re.compile(r"^[^/\s:]{1,15}$")
MAC_RE = re.compile(r"^[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}$")
_MISSING = object()


class Problems:
    """Collects `field -> problem`; `raise_for(key)` raises one InvalidValueError naming all."""

    def __init__(self) -> None:
        self.fields: dict[str, str] = {}

    def add(self, field: str, problem: str) -> None:
        self.fields.setdefault(field, problem)

    def raise_for(self, key: str) -> None:
        if self.fields:
            detail = "; ".join(f"field '{f}': {p}" for f, p in self.fields.items())
            raise InvalidValueError(f"{key}: {detail}", fields=list(self.fields))


def check_mapping(value: Any, key: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise InvalidValueError(f"{key}: value must be an object, got {type(value).__name__}")
    return value


def unknown_fields(
    value: Mapping[str, Any], allowed: set[str], p: Problems, prefix: str = ""
) -> None:
    for name in value:
        if name not in allowed:
            p.add(f"{prefix}{name}", f"unknown field (allowed: {', '.join(sorted(allowed))})")


def name_problem(name: Any, what: str = "name") -> str | None:
    if not isinstance(name, str) or not name:
        return f"{what} must be a non-empty string"
    if len(name) > NAME_MAX:
        return f"{what} is longer than {NAME_MAX} characters"
    if not NAME_RE.match(name):
        return f"{what} {name!r} may only use letters, digits and _ . : - (no '/')"
    return None


def get_bool(value: Mapping[str, Any], field: str, default: bool, p: Problems) -> bool:
    raw = value.get(field, _MISSING)
    if raw is _MISSING or raw is None:
        return default
    if not isinstance(raw, bool):
        p.add(field, f"must be true or false, got {raw!r}")
        return default
    return raw


def get_int(
    value: Mapping[str, Any],
    field: str,
    default: int | None,
    low: int,
    high: int,
    p: Problems,
    label: str | None = None,
) -> int | None:
    raw = value.get(field, _MISSING)
    if raw is _MISSING or raw is None:
        return default
    if not isinstance(raw, int) or isinstance(raw, bool) or not low <= raw <= high:
        p.add(label or field, f"must be an integer {low}..{high}, got {raw!r}")
        return default
    return raw


def get_mac(value: Mapping[str, Any], field: str, p: Problems) -> str | None:
    raw = value.get(field)
    if raw is None:
        return None
    if not isinstance(raw, str) or not MAC_RE.match(raw):
        p.add(field, f"must be a MAC address like 02:00:00:00:00:01, got {raw!r}")
        return None
    if int(raw[:2], 16) & 1:
        p.add(field, f"must be a unicast MAC address, got {raw!r}")
        return None
    return raw.lower()


def get_linux_ifname(value: Mapping[str, Any], field: str, p: Problems, label: str) -> str | None:
    raw = value.get(field)
    if raw is None:
        return None
    if not isinstance(raw, str) or not LINUX_IFNAME_RE.match(raw):
        p.add(label, f"must be a Linux interface name (1..15 characters, no '/'), got {raw!r}")
        return None
    return raw


def parse_interface_address(raw: Any) -> ipaddress.IPv4Interface | ipaddress.IPv6Interface:
    """An address with its prefix length, e.g. 10.0.0.1/24 (raises ValueError)."""
    if not isinstance(raw, str) or "/" not in raw:
        raise ValueError(f"must be an address with a prefix length like 10.0.0.1/24, got {raw!r}")
    return ipaddress.ip_interface(raw)


def address_sort_key(
    addr: ipaddress.IPv4Interface | ipaddress.IPv6Interface,
) -> tuple[int, int, int]:
    return addr.version, int(addr.ip), addr.network.prefixlen

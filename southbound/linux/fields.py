"""Field-level checks shared by the models.

A ``FieldChecker`` collects every problem of one value (instead of stopping at the first), so the
user sees all of them in one INVALID message: ``linux/interface/v0: field 'mtu': must be an
integer 68..65535; field 'mac': ...``. Each ``take_*`` method returns the normalised field value,
or None when the field is absent or bad (the error is recorded).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping
from typing import Any

from southbound.linux.addr import Cidr, parse_cidr, parse_network
from southbound.linux.errors import InvalidValueError

IFNAMSIZ = 16  # the kernel's limit, including the terminating NUL: names are at most 15 chars
_MAC_RE = re.compile(r"^[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}$")
_BAD_NAME_CHARACTER = re.compile(r"[/:\s]")
_ABSENT: Any = object()

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


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


def normalise_cidr(text: str) -> str:
    """Canonical text of an interface address: compressed, lower case (used in keys). The
    "/len" is mandatory (no silent /32)."""
    return parse_cidr(text).text


class FieldChecker:
    """Collects field errors of one value and raises them together."""

    def __init__(self, key: str, value: object) -> None:
        self.key = key
        self.errors: dict[str, str] = {}
        if isinstance(value, Mapping):
            self.value: Mapping[str, Any] = value
        else:
            self.value = {}
            self.fail("(value)", f"must be a JSON object (got {type(value).__name__})")

    def fail(self, field: str, problem: str) -> None:
        self.errors.setdefault(field, problem)

    def raise_if_any(self) -> None:
        if self.errors:
            raise InvalidValueError(self.key, self.errors)

    def reject_unknown(self, allowed: Iterable[str], where: Mapping[str, Any] | None = None,
                       prefix: str = "") -> None:
        source = self.value if where is None else where
        allowed_set = set(allowed)
        for name in source:
            if name not in allowed_set:
                allowed_text = ", ".join(sorted(allowed_set)) or "none"
                self.fail(f"{prefix}{name}", f"unknown field (allowed: {allowed_text})")

    @staticmethod
    def _get(source: Mapping[str, Any], name: str) -> Any:
        value = source.get(name, _ABSENT)
        return _ABSENT if value is None else value

    def take_int(self, name: str, low: int, high: int, *, source: Mapping[str, Any] | None = None,
                 field: str | None = None) -> int | None:
        raw = self._get(self.value if source is None else source, name)
        if raw is _ABSENT:
            return None
        if isinstance(raw, bool) or not isinstance(raw, int) or not low <= raw <= high:
            self.fail(field or name, f"must be an integer {low}..{high}")
            return None
        return raw

    def take_bool(self, name: str, default: bool) -> bool:
        raw = self._get(self.value, name)
        if raw is _ABSENT:
            return default
        if not isinstance(raw, bool):
            self.fail(name, "must be true or false")
            return default
        return raw

    def take_choice(self, name: str, choices: Iterable[str], *,
                    source: Mapping[str, Any] | None = None,
                    field: str | None = None) -> str | None:
        raw = self._get(self.value if source is None else source, name)
        if raw is _ABSENT:
            return None
        options = list(choices)
        if raw not in options:
            self.fail(field or name, f"must be one of {', '.join(repr(c) for c in options)}")
            return None
        return str(raw)

    def take_name(self, name: str, *, source: Mapping[str, Any] | None = None,
                  field: str | None = None) -> str | None:
        raw = self._get(self.value if source is None else source, name)
        if raw is _ABSENT:
            return None
        problem = interface_name_problem(raw)
        if problem:
            self.fail(field or name, f"interface name {problem}")
            return None
        return str(raw)

    def take_mac(self, name: str) -> str | None:
        raw = self._get(self.value, name)
        if raw is _ABSENT:
            return None
        if not isinstance(raw, str) or not _MAC_RE.match(raw):
            self.fail(name, "must be a MAC address like '02:00:00:00:00:01'")
            return None
        mac = raw.lower()
        if int(mac[:2], 16) & 1:
            self.fail(name, "must be a unicast MAC address (first octet even)")
            return None
        if mac == "00:00:00:00:00:00":
            self.fail(name, "must not be all zeros")
            return None
        return mac

    def take_ip(self, name: str, *, source: Mapping[str, Any] | None = None,
                field: str | None = None) -> IPAddress | None:
        raw = self._get(self.value if source is None else source, name)
        if raw is _ABSENT:
            return None
        try:
            if not isinstance(raw, str):
                raise ValueError
            return ipaddress.ip_address(raw)
        except ValueError:
            self.fail(field or name, "must be an IPv4 or IPv6 address")
            return None

    def take_network(self, name: str) -> Cidr | None:
        raw = self._get(self.value, name)
        if raw is _ABSENT:
            return None
        try:
            if not isinstance(raw, str):
                raise ValueError("not a CIDR")
            return parse_network(raw)
        except ValueError:
            self.fail(name, "must be a network in CIDR notation with host bits zero, "
                            "e.g. '10.1.0.0/16'")
            return None

    def take_addresses(self, name: str) -> list[str]:
        raw = self._get(self.value, name)
        if raw is _ABSENT:
            return []
        if not isinstance(raw, list):
            self.fail(name, "must be a list of addresses in CIDR notation")
            return []
        result: list[str] = []
        for position, item in enumerate(raw):
            try:
                if not isinstance(item, str):
                    raise ValueError
                cidr = normalise_cidr(item)
            except ValueError:
                self.fail(f"{name}[{position}]",
                          "must be an address in CIDR notation, e.g. '10.0.0.1/24'")
                continue
            if cidr in result:
                self.fail(f"{name}[{position}]", f"duplicate address {cidr}")
                continue
            result.append(cidr)
        return sorted(result, key=_address_sort_key)

    def take_mapping(self, name: str) -> Mapping[str, Any] | None:
        raw = self._get(self.value, name)
        if raw is _ABSENT:
            return None
        if not isinstance(raw, Mapping):
            self.fail(name, "must be a JSON object")
            return None
        return raw


def _address_sort_key(cidr: str) -> tuple[int, bytes, int]:
    return parse_cidr(cidr).sort_key


def sort_addresses(addresses: Iterable[str]) -> list[str]:
    """Deterministic address order (IPv4 first, numeric): the same list from NB and from kernel."""
    return sorted(addresses, key=_address_sort_key)

"""The Linux configuration models, defined once: ``linux/interface/<name>`` and
``linux/route/<table>/<dst cidr>/<dev>`` values as pydantic models (types, ranges, defaults,
documentation). Validation, the CLI's checks and the JSON Schema all come from here;
``interface_model``/``route_model`` turn a validated value into the descriptors' canonical spec.

The key carries what the value does not repeat (an interface's name; a route's table, destination
and device): the validators get it through the validation context (``name``; ``table``,
``network``, ``dev``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    Field,
    PlainValidator,
    ValidationInfo,
    WithJsonSchema,
    model_validator,
)

from southbound.linux import keys
from southbound.linux.addr import Cidr, parse_address, parse_cidr, parse_network
from southbound.validation import FieldProblems, StrictModel

IFNAMSIZ = 16  # the kernel's limit, including the terminating NUL: names are at most 15 chars
INTERFACE_TYPES = ("veth", "bridge", "tap", "vxlan", "macvlan")
MACVLAN_MODES = ("private", "vepa", "bridge", "passthru", "source")
SCOPES = {"universe": 0, "site": 200, "link": 253, "host": 254, "nowhere": 255}
VXLAN_DEFAULT_PORT = 4789
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
Table = Annotated[int | str, PlainValidator(_table), WithJsonSchema({
    "oneOf": [{"enum": list(keys.TABLE_NAMES)},
              {"type": "integer", "minimum": 1, "maximum": U32_MAX}]})]


class VethSection(StrictModel):
    """The other end of a veth pair (configure it as its own ``linux/interface/<peer>``)."""

    peer: InterfaceName = Field(description="name of the other end")


class VxlanSection(StrictModel):
    """A VXLAN tunnel endpoint."""

    vni: int = Field(ge=0, le=2**24 - 1, description="VXLAN network identifier")
    local: IPAddress | None = Field(None, description="local unicast address (unset: any)")
    remote: IPAddress | None = Field(None, description="remote address; multicast needs device")
    port: int = Field(VXLAN_DEFAULT_PORT, ge=1, le=65535, description="UDP destination port")
    device: InterfaceName | None = Field(None, description="lower link the tunnel uses")

    @model_validator(mode="after")
    def _families(self) -> VxlanSection:
        problems = {}
        local = parse_address(self.local) if self.local else None
        remote = parse_address(self.remote) if self.remote else None
        if local is not None and remote is not None and local[0] != remote[0]:
            problems["remote"] = "must be of the same address family as vxlan.local"
        if remote is not None and _is_multicast(remote) and self.device is None:
            problems["device"] = "is required with a multicast vxlan.remote"
        if local is not None and (_is_multicast(local) or not any(local[1])):
            problems["local"] = "must be a unicast address"
        if problems:
            raise FieldProblems(problems)
        return self


def _is_multicast(address: tuple[int, bytes, str]) -> bool:
    version, packed, _text = address
    return (packed[0] & 0xF0) == 0xE0 if version == 4 else packed[0] == 0xFF


class MacvlanSection(StrictModel):
    """A macvlan link on a parent link."""

    parent: InterfaceName = Field(description="the parent link (kvmesh or host)")
    mode: Literal["private", "vepa", "bridge", "passthru", "source"] = Field(
        "bridge", description="macvlan mode")


class TapSection(StrictModel):
    """A tap device (no options yet)."""


class BridgeSection(StrictModel):
    """A Linux bridge (no options yet; members name it as their ``master``)."""


class LinuxInterface(StrictModel):
    """``linux/interface/<name>``: a Linux link kvmesh owns. ``mtu`` and ``mac`` unset (null)
    leave the kernel's choice alone; the section matching ``type`` carries its parameters."""

    type: Literal["veth", "bridge", "tap", "vxlan", "macvlan"] = Field(
        description="link type")
    enabled: bool = Field(True, description="administratively up")
    mtu: int | None = Field(None, ge=68, le=65535, description="MTU (unset: kernel's choice)")
    mac: Mac | None = Field(None, description="MAC address (unset: kernel's choice)")
    addresses: Annotated[list[InterfaceAddress], AfterValidator(_addresses)] = Field(
        default_factory=list, description="addresses with prefix length, e.g. 10.0.0.1/24")
    master: InterfaceName | None = Field(None, description="bridge this link is enslaved to")
    veth: VethSection | None = Field(None, description="required with type veth")
    bridge: BridgeSection | None = Field(None, description="optional with type bridge")
    tap: TapSection | None = Field(None, description="optional with type tap")
    vxlan: VxlanSection | None = Field(None, description="required with type vxlan")
    macvlan: MacvlanSection | None = Field(None, description="required with type macvlan")

    @classmethod
    def section_problems(cls, value: Mapping[str, Any]) -> dict[str, str]:
        return {other: f"only allowed with type '{other}'" for other in INTERFACE_TYPES
                if other != value.get("type") and value.get(other) is not None}

    @model_validator(mode="after")
    def _sections(self, info: ValidationInfo) -> LinuxInterface:
        name = (info.context or {}).get("name")
        problems: dict[str, str] = {}
        if self.master is not None and self.master == name:
            problems["master"] = "an interface cannot be its own master"
        problems.update(self.section_problems({"type": self.type, **{
            other: getattr(self, other) for other in INTERFACE_TYPES}}))
        if self.type == "veth":
            if self.veth is None:
                problems["veth"] = "is required for type 'veth': {\"peer\": \"<name>\"}"
            elif self.veth.peer == name:
                problems["veth.peer"] = "must differ from the interface name"
            elif self.veth.peer == keys.HOST_NAME:
                problems["veth.peer"] = f"interface name '{keys.HOST_NAME}' is reserved " \
                                        "for host links"
        if self.type == "vxlan" and self.vxlan is None:
            problems["vxlan"] = "is required for type 'vxlan': {\"vni\": <0..16777215>, ...}"
        if self.type == "macvlan":
            if self.macvlan is None:
                problems["macvlan"] = "is required for type 'macvlan': {\"parent\": \"<name>\"}"
            elif self.macvlan.parent == name:
                problems["macvlan.parent"] = "must differ from the interface name"
        if problems:
            raise FieldProblems(problems)
        return self


class LinuxRoute(StrictModel):
    """``linux/route/<table>/<dst cidr>/<dev>``: a route kvmesh owns. The key carries table,
    destination and device; the value may repeat them (they must then agree with the key).
    Defaults as the kernel's: metric 0 (IPv4) or 1024 (IPv6); scope ``link`` for an IPv4 route
    without gateway, else ``universe``."""

    dst: Network | None = Field(None, description="destination (as in the key)")
    dev: InterfaceName | None = Field(None, description="outgoing device (as in the key)")
    gateway: IPAddress | None = Field(None, description="next hop, same family as dst")
    metric: int | None = Field(None, ge=0, le=U32_MAX, description="route metric (priority)")
    table: Table | None = Field(None, description="routing table (as in the key)")
    scope: Literal["universe", "site", "link", "host", "nowhere"] | None = Field(
        None, description="route scope (IPv6: universe only)")

    @model_validator(mode="after")
    def _agrees_with_key(self, info: ValidationInfo) -> LinuxRoute:
        context = info.context or {}
        network: Cidr | None = context.get("network")
        table: int | None = context.get("table")
        problems: dict[str, str] = {}
        if table is not None and self.table is not None:
            expected: object = keys.table_in_key(table) if isinstance(self.table, str) else table
            if self.table != expected:
                problems["table"] = f"must match the key ({expected})"
        dev = context.get("dev")
        if dev is not None and self.dev is not None and self.dev != dev:
            problems["dev"] = f"must match the key ({dev})"
        if network is not None:
            if self.dst is not None and self.dst != network.text:
                problems["dst"] = f"must match the key ({network.text})"
            if self.gateway is not None and parse_address(self.gateway)[0] != network.version:
                problems["gateway"] = f"must be an IPv{network.version} address like the " \
                                      "destination"
            if network.version == 6 and self.scope not in (None, "universe"):
                problems["scope"] = "IPv6 routes only support 'universe'"
        if self.gateway is not None and self.scope in ("link", "host", "nowhere"):
            problems.setdefault("scope", "a route with a gateway must have scope 'universe' "
                                         "or 'site'")
        if problems:
            raise FieldProblems(problems)
        return self

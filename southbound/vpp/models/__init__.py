"""The configuration models of the VPP southbound, defined once as pydantic models
(`VppInterface`, `VppBridgeDomain`, `VppRoute`: types, ranges, defaults, documentation; the JSON
Schema is generated from them), and their normalisation.

`normalize_*` validates a value as the user wrote it and returns it in canonical form (defaults
filled in, addresses canonical and sorted, MACs lower-case); a bad value raises
`southbound.validation.FieldsInvalidError` (a scheduler `InvalidValueError`) naming every bad
field. Retrieve reports values in exactly this form, so the
scheduler's comparison with the desired state is exact.

Interface (`vpp/interface/<name>`)::

    {"type": "loopback" | "tap" | "af_packet" | "sub_interface" | "vxlan" | "memif",
     "enabled": true, "mtu": null, "mac": null, "vrf": 0,
     "addresses": ["10.0.0.1/24", "fd00::1/64"],
     "unnumbered": {"interface_with_ip": "<name>"},      # instead of addresses
     "tap": {"host_if_name": null, "rx_ring_size": 256, "tx_ring_size": 256},
     "af_packet": {"host_if_name": "<linux interface>"},
     "sub_interface": {"parent": "<name>", "sub_id": 10, "outer_vlan": 10,
                       "inner_vlan": null, "exact_match": true},
     "vxlan": {"src": "192.168.1.1", "dst": "192.168.1.2", "vni": 100, "encap_vrf": 0},
     "memif": {"socket": "/run/vpp/app.sock", "id": 0, "master": true, "mode": "ethernet"},
     "wireguard": {"private_key": "<base64>", "port": 51820, "src_addr": "192.0.2.1"}}

The VRF table, neighbor, cross-connect and L2 FIB models have one module each (`vrf`,
`neighbor`, `xconnect`, `l2fib`).

`null` (or an absent field) for mtu, mac and tap.host_if_name means "whatever VPP chooses".

Bridge domain (`vpp/bd/<name>`)::

    {"bd_id": 10, "flood": true, "forward": true, "learn": true,
     "unknown_unicast_flood": true, "arp_term": false,
     "interfaces": [{"name": "<interface>", "bvi": false}]}

Route (`vpp/route/<vrf>/<dst cidr>/<next hop>`)::

    {"dst": "10.1.0.0/16", "next_hop": "10.0.0.2", "outgoing_interface": "<name>",
     "vrf": 0, "weight": 1, "preference": 0}

Writing a model module: its descriptor is wired from its normaliser by ``model_descriptor``
(don't write validate / value comparator / dependencies / key selector by hand)::

    @memoized                                   # once per value (see memoized)
    def normalize_thing(key: str, value: Any) -> dict[str, Any]:
        ...                                     # validate(VppThing, key, value, ...) -> dict

    def descriptors(ctx: Context) -> list[Descriptor]:
        def create(key: str, value: Any) -> None:
            v = normalize_thing(key, value)     # the canonical form, from the memo
            ...

        return [model_descriptor(
            DESCRIPTOR, normalize_thing, KEY_RE,  # KEY_RE: the whole key must match
            depends_on=lambda v: (interface_dependency(v["interface"]),),
            create=create, delete=delete, retrieve=retrieve,   # any other Descriptor field
            retrieve_dependencies=(INTERFACE_DESCRIPTOR,))]

What it gives the descriptor:

- ``validate``: ``normalize_thing(key, value)`` (its ``FieldsInvalidError`` is the INVALID);
- ``value_comparator``: equivalent when the canonical forms are equal, or when
  ``agree(x, y)`` says so (``agree=``: e.g. an unset field matches whatever VPP reports); a
  value that does not validate compares as it is (``canonical_comparator(normalize, agree)``
  is the same comparator on its own, ``same_normalized`` the plain one as a function);
- ``dependencies``: ``depends_on(canonical value)``, none for a value that does not validate
  (omit ``depends_on`` for a model that depends on nothing, or that depends only on its key:
  then pass ``dependencies=`` yourself);
- ``key_selector``: ``selects``, a predicate or a compiled pattern matched in full;
- ``is_retriable_failure``: ``southbound.vpp.errors.is_retriable`` (unless given).
"""

from __future__ import annotations

import ipaddress
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, ValidationInfo, model_validator

from scheduler import Dependency, Descriptor, InvalidValueError
from southbound.validation import KEY_FIELD, FieldProblems, StrictModel, validate
from southbound.vpp import keys
from southbound.vpp.errors import is_retriable
from southbound.vpp.wireguard_api import WireguardKey

INTERFACE_TYPES = ("loopback", "tap", "af_packet", "sub_interface", "vxlan", "memif")
# The sections of the interface types that have one (each only allowed with its type).
TYPE_SECTIONS = ("tap", "af_packet", "sub_interface", "vxlan", "memif", "bond", "gre", "ipip",
                 "wireguard")
TUNNEL_TYPES = ("gre", "ipip")  # L3 tunnel interfaces (a GRE teb/erspan one is ethernet)
WG_MAX_INSTANCE = 16 * 1024 - 1  # WG_ITF_MAX_INSTANCE: instances below 16384
# Bond modes and load-balance algorithms by their VPP names (bond.api bond_mode, bond_lb_algo).
BOND_MODES = ("round-robin", "active-backup", "xor", "broadcast", "lacp")
BOND_LOAD_BALANCE = ("l2", "l34", "l23")
MAX_VLAN = 4095
MAX_VNI = 0xFFFFFF
MAX_U32 = 0xFFFFFFFF
SOCKET_PATH_MAX = 107  # sun_path
MIN_MTU = 64
MAX_MTU = 9216
MAX_VRF = 0xFFFFFFFE
MAX_BD_ID = 0xFFFFFF
MAX_RING = 32768
DEFAULT_RING = 256
# VPP tags (string[64]) carry "kvmesh:<name>", so names stay within 63 - len("kvmesh:") chars.
OWNER_TAG = "kvmesh:"
NAME_MAX = 63 - len(OWNER_TAG)
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]*$")
LINUX_IFNAME_RE = re.compile(r"^[^/\s:]{1,15}$")
MAC_RE = re.compile(r"^[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}$")


def name_problem(name: Any, what: str = "name") -> str | None:
    if not isinstance(name, str) or not name:
        return f"{what} must be a non-empty string"
    if len(name) > NAME_MAX:
        return f"{what} is longer than {NAME_MAX} characters"
    if not NAME_RE.match(name):
        return f"{what} {name!r} may only use letters, digits and _ . : - (no '/')"
    return None


def _vpp_name(name: str) -> str:
    problem = name_problem(name, "interface name")
    if problem:
        raise ValueError(problem)
    return name


def _linux_ifname(name: str) -> str:
    if not LINUX_IFNAME_RE.match(name):
        raise ValueError(f"must be a Linux interface name (1..15 characters, no '/'), "
                         f"got {name!r}")
    return name


def _mac(text: str) -> str:
    if not MAC_RE.match(text):
        raise ValueError(f"must be a MAC address like 02:00:00:00:00:01, got {text!r}")
    if int(text[:2], 16) & 1:
        raise ValueError(f"must be a unicast MAC address, got {text!r}")
    return text.lower()


def parse_interface_address(raw: Any) -> ipaddress.IPv4Interface | ipaddress.IPv6Interface:
    """An address with its prefix length, e.g. 10.0.0.1/24 (raises ValueError)."""
    if not isinstance(raw, str) or "/" not in raw:
        raise ValueError(f"must be an address with a prefix length like 10.0.0.1/24, got {raw!r}")
    return ipaddress.ip_interface(raw)


def address_sort_key(
    addr: ipaddress.IPv4Interface | ipaddress.IPv6Interface,
) -> tuple[int, int, int]:
    return addr.version, int(addr.ip), addr.network.prefixlen


def _address(text: str) -> str:
    return str(parse_interface_address(text))


def _addresses(addresses: list[str]) -> list[str]:
    parsed: dict[str, Any] = {}
    for position, text in enumerate(addresses):
        if text in parsed:
            raise FieldProblems({f"[{position}]": f"{text} is listed twice"})
        parsed[text] = ipaddress.ip_interface(text)
    return [str(a) for a in sorted(parsed.values(), key=address_sort_key)]


def _ring(size: int) -> int:
    if size & (size - 1):
        raise ValueError(f"must be a power of two up to {MAX_RING}, got {size}")
    return size


def _network(text: str) -> str:
    try:
        return str(ipaddress.ip_network(text))
    except ValueError as exc:
        raise ValueError(f"must be a network like 10.1.0.0/16: {exc}") from None


def _ip(text: str) -> str:
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        raise ValueError(f"must be an IP address, got {text!r}") from None


def listed_once(items: list[Any]) -> list[Any]:
    """A list whose order does not matter, sorted; an item listed twice is an error."""
    problems = {f"[{i}]": f"{item!r} is listed twice" for i, item in enumerate(items)
                if item in items[:i]}
    if problems:
        raise FieldProblems(problems)
    return sorted(items)


VppName = Annotated[str, AfterValidator(_vpp_name), Field(
    min_length=1, max_length=NAME_MAX, pattern=NAME_RE.pattern,
    description="a kvmesh VPP object name (letters, digits, _ . : -)")]
LinuxIfName = Annotated[str, AfterValidator(_linux_ifname), Field(
    pattern=LINUX_IFNAME_RE.pattern, description="a Linux interface name")]
Mac = Annotated[str, AfterValidator(_mac), Field(
    pattern=MAC_RE.pattern, description="a unicast MAC address, e.g. 02:00:00:00:00:01")]
InterfaceAddress = Annotated[str, AfterValidator(_address), Field(
    description="an address with its prefix length, e.g. 10.0.0.1/24")]
RingSize = Annotated[int, AfterValidator(_ring), Field(
    ge=1, le=MAX_RING, description=f"a power of two up to {MAX_RING}")]


class UnnumberedSection(StrictModel):
    """Borrow the addresses of another interface."""

    interface_with_ip: VppName = Field(description="the interface whose addresses are used")


class VppTapSection(StrictModel):
    """A tap interface (VPP end; the Linux end is created by VPP)."""

    host_if_name: LinuxIfName | None = Field(None, description="Linux name (unset: VPP's)")
    rx_ring_size: RingSize = DEFAULT_RING
    tx_ring_size: RingSize = DEFAULT_RING


class AfPacketSection(StrictModel):
    """An af_packet interface on a Linux link."""

    host_if_name: LinuxIfName = Field(description="the Linux interface to attach to")


class SubInterfaceSection(StrictModel):
    """A VLAN sub-interface of another vpp/interface (its parent): one tag (`outer_vlan`), or two
    (QinQ, with `inner_vlan`)."""

    parent: VppName = Field(description="the vpp/interface it is a sub-interface of")
    sub_id: int = Field(ge=0, le=MAX_U32, description="sub-interface id, unique on the parent")
    outer_vlan: int = Field(ge=1, le=MAX_VLAN, description="outer (or only) VLAN tag")
    inner_vlan: int | None = Field(None, ge=1, le=MAX_VLAN, description="inner tag (QinQ)")
    exact_match: bool = Field(True, description="match exactly these tags (needed for IP)")


class VxlanSection(StrictModel):
    """A VXLAN tunnel (an L2 interface: put it in a bridge domain or a cross-connect)."""

    src: Annotated[str, AfterValidator(_ip)] = Field(description="local tunnel address")
    dst: Annotated[str, AfterValidator(_ip)] = Field(description="remote tunnel address")
    vni: int = Field(ge=0, le=MAX_VNI, description="VXLAN network identifier (24 bits)")
    encap_vrf: int = Field(0, ge=0, le=MAX_VRF, description="table the tunnel packets use")

    @model_validator(mode="after")
    def _endpoints(self) -> VxlanSection:
        src, dst = ipaddress.ip_address(self.src), ipaddress.ip_address(self.dst)
        if src.version != dst.version:
            raise FieldProblems({"dst": "not of the source's address family"})
        if src == dst:
            raise FieldProblems({"dst": "the same as the source"})
        return self


def _socket_path(path: str) -> str:
    if not path.startswith("/") or len(path) > SOCKET_PATH_MAX or "\0" in path:
        raise ValueError(f"must be an absolute path of at most {SOCKET_PATH_MAX} characters, "
                         f"got {path!r}")
    return path


class MemifSection(StrictModel):
    """A memif (shared-memory) interface on a socket file; the socket is registered with VPP by
    its first memif and removed with its last."""

    socket: Annotated[str, AfterValidator(_socket_path)] = Field(
        description="the socket file's absolute path")
    id: int = Field(0, ge=0, le=MAX_U32, description="memif id, unique on its socket")
    master: bool = Field(True, description="master (listens on the socket) or slave")
    mode: Literal["ethernet"] = Field("ethernet", description="interface mode")


class TunnelSection(StrictModel):
    """The endpoints of an IP tunnel and the table its packets use."""

    src: Annotated[str, AfterValidator(_ip)] = Field(description="local tunnel address")
    dst: Annotated[str, AfterValidator(_ip)] = Field(
        description="remote tunnel address (the unspecified address for multipoint)")
    outer_vrf: int = Field(0, ge=0, le=MAX_VRF, description="table the tunnel packets use")
    mode: Literal["p2p", "mp"] = Field("p2p", description="point-to-point or multipoint")
    instance: int | None = Field(None, ge=0, le=MAX_U32 - 1,
                                 description="the interface's number (unset: VPP's)")

    @model_validator(mode="after")
    def _endpoints(self) -> TunnelSection:
        src, dst = ipaddress.ip_address(self.src), ipaddress.ip_address(self.dst)
        problems = {}
        if src.version != dst.version:
            problems["dst"] = "not of the source's address family"
        elif src == dst:
            problems["dst"] = "the same as the source"
        elif self.mode == "mp" and not dst.is_unspecified:
            problems["dst"] = "a multipoint tunnel has no destination (0.0.0.0 or ::)"
        if problems:
            raise FieldProblems(problems)
        return self


class GreSection(TunnelSection):
    """A GRE tunnel: `l3` carries IP (a routed interface), `teb` ethernet frames (an L2
    interface), `erspan` mirrored frames with a session id."""

    type: Literal["l3", "teb", "erspan"] = Field("l3", description="what the tunnel carries")
    session_id: int = Field(0, ge=0, le=1023, description="ERSPAN session id")


class IpipSection(TunnelSection):
    """An IP-in-IP tunnel (IPv4 or IPv6 in IPv4 or IPv6)."""


class BondSection(StrictModel):
    """A bond (link aggregation) of other interfaces: its members are
    `vpp/bond/<bond>/member/<interface>` values."""

    id: int | None = Field(None, ge=0, le=MAX_U32 - 1,
                           description="the bond's number, BondEthernet<id> (unset: VPP's)")
    mode: Literal["round-robin", "active-backup", "xor", "broadcast", "lacp"] = Field(
        description="how frames are spread over (or kept off) the members")
    load_balance: Literal["l2", "l34", "l23"] = Field(
        "l2", description="the hash of xor and lacp bonds (the other modes have their own)")
    numa_only: bool = Field(False, description="transmit on members of the local NUMA node")
    gso: bool = Field(False, description="generic segmentation offload (members must have it)")


class WireguardSection(StrictModel):
    """A WireGuard tunnel interface (L3): its private key (never shown back), the UDP port it
    listens on and the source address of its packets; its peers are
    `vpp/wireguard/peer/<name>` values."""

    private_key: WireguardKey
    port: int = Field(ge=1, le=65535, description="the UDP port it listens on")
    src_addr: Annotated[str, AfterValidator(_ip)] = Field(
        description="the source address of its packets")
    instance: int | None = Field(None, ge=0, le=WG_MAX_INSTANCE,
                                 description="the interface's number, wg<instance> (unset: VPP's)")


class VppInterface(StrictModel):
    """`vpp/interface/<name>`: a VPP interface kvmesh owns. `mtu` and `mac` unset (null) leave
    VPP's choice alone."""

    type: Literal["loopback", "tap", "af_packet", "sub_interface", "vxlan", "memif",
                  "bond", "gre", "ipip", "wireguard"] = Field(description="interface type")
    enabled: bool = Field(True, description="administratively up")
    mtu: int | None = Field(None, ge=MIN_MTU, le=MAX_MTU, description="MTU (unset: VPP's)")
    mac: Mac | None = Field(None, description="MAC address (unset: VPP's)")
    vrf: int = Field(0, ge=0, le=MAX_VRF, description="IP table the interface is bound to")
    addresses: Annotated[list[InterfaceAddress], AfterValidator(_addresses)] = Field(
        default_factory=list, description="addresses with prefix length, e.g. 10.0.0.1/24")
    unnumbered: UnnumberedSection | None = Field(None, description="instead of addresses")
    tap: VppTapSection | None = Field(None, description="only with type tap")
    af_packet: AfPacketSection | None = Field(None, description="required with type af_packet")
    sub_interface: SubInterfaceSection | None = Field(
        None, description="required with type sub_interface")
    vxlan: VxlanSection | None = Field(None, description="required with type vxlan")
    memif: MemifSection | None = Field(None, description="required with type memif")
    bond: BondSection | None = Field(None, description="required with type bond")
    gre: GreSection | None = Field(None, description="required with type gre")
    ipip: IpipSection | None = Field(None, description="required with type ipip")
    wireguard: WireguardSection | None = Field(None, description="required with type wireguard")

    @classmethod
    def section_problems(cls, value: Mapping[str, Any]) -> dict[str, str]:
        problems = {}
        for section in TYPE_SECTIONS:
            if value.get(section) is not None and value.get("type") != section:
                problems[section] = f"only allowed with type '{section}'"
        return problems

    @model_validator(mode="after")
    def _sections(self, info: ValidationInfo) -> VppInterface:
        name = (info.context or {}).get("name")
        problems: dict[str, str] = {}
        if self.unnumbered is not None:
            if self.unnumbered.interface_with_ip == name:
                problems["unnumbered.interface_with_ip"] = \
                    "an interface cannot borrow its own addresses"
            elif self.addresses:
                problems["unnumbered"] = "an unnumbered interface cannot have addresses of its own"
        problems.update(self.section_problems(self.model_dump(include={"type", *TYPE_SECTIONS})))
        if self.type == "af_packet" and self.af_packet is None:
            problems["af_packet"] = \
                "required with type 'af_packet': {'host_if_name': <linux interface>}"
        for section in ("sub_interface", "vxlan", "memif", "bond", "gre", "ipip", "wireguard"):
            if self.type == section and getattr(self, section) is None:
                problems[section] = f"required with type '{section}'"
        l3_tunnel = self.type in ("ipip", "wireguard") or (
            self.type == "gre" and self.gre is not None and self.gre.type == "l3")
        if l3_tunnel:
            for field in ("mtu", "mac"):
                if getattr(self, field) is not None:
                    problems[field] = "an L3 tunnel has none to set (leave it unset)"
        if self.type == "sub_interface":
            if self.sub_interface is not None and self.sub_interface.parent == name:
                problems["sub_interface.parent"] = "an interface cannot be its own parent"
            for field in ("mtu", "mac"):
                if getattr(self, field) is not None:
                    problems[field] = "a sub-interface has its parent's (leave it unset)"
        if problems:
            raise FieldProblems(problems)
        return self


class BridgeDomainMember(StrictModel):
    """An interface in a bridge domain."""

    name: VppName = Field(description="a vpp/interface name")
    bvi: bool = Field(False, description="the bridge's routed interface (at most one)")


def _members(members: list[BridgeDomainMember]) -> list[BridgeDomainMember]:
    problems: dict[str, str] = {}
    seen: set[str] = set()
    for position, member in enumerate(members):
        if member.name in seen:
            problems.setdefault(f"[{position}].name", f"interface {member.name!r} is listed twice")
        seen.add(member.name)
    if sum(member.bvi for member in members) > 1:
        problems[""] = "at most one interface can be the BVI"
    if problems:
        raise FieldProblems(problems)
    return sorted(members, key=lambda member: member.name)


class VppBridgeDomain(StrictModel):
    """`vpp/bd/<name>`: an L2 bridge domain and its member interfaces."""

    bd_id: int = Field(ge=1, le=MAX_BD_ID, description="bridge domain id")
    flood: bool = Field(True, description="flood broadcast")
    forward: bool = Field(True, description="forward unicast")
    learn: bool = Field(True, description="learn MAC addresses")
    unknown_unicast_flood: bool = Field(True, description="flood unknown unicast")
    arp_term: bool = Field(False, description="terminate ARP")
    interfaces: Annotated[list[BridgeDomainMember], AfterValidator(_members)] = Field(
        default_factory=list, description="member interfaces")


class VppRoute(StrictModel):
    """`vpp/route/<vrf>/<dst cidr>/<next hop>`: an IP route. The key carries vrf, destination
    and next hop (the value may repeat them; they must agree); next hop 0.0.0.0 or :: means an
    attached route, which needs `outgoing_interface`."""

    dst: Annotated[str, AfterValidator(_network)] | None = Field(
        None, description="destination network (as in the key)")
    next_hop: Annotated[str, AfterValidator(_ip)] | None = Field(
        None, description="next hop (as in the key; \"\" or unset: attached)")
    outgoing_interface: VppName | None = Field(None, description="a vpp/interface name")
    vrf: int | None = Field(None, ge=0, le=MAX_VRF, description="IP table (as in the key)")
    weight: int = Field(1, ge=1, le=255, description="ECMP weight")
    preference: int = Field(0, ge=0, le=255, description="route preference")

    @model_validator(mode="after")
    def _agrees_with_key(self, info: ValidationInfo) -> VppRoute:
        context = info.context or {}
        problems: dict[str, str] = {}
        key_dst, key_hop, key_vrf = context.get("dst"), context.get("next_hop"), \
            context.get("vrf")
        if self.dst is not None and self.dst != key_dst:
            problems["dst"] = f"{self.dst} does not match the key's {key_dst!r}"
        if self.next_hop is not None:
            hop = ipaddress.ip_address(self.next_hop)
            if self.dst is not None and hop.version != ipaddress.ip_network(self.dst).version:
                problems["next_hop"] = f"{hop} is not of the destination's address family"
            elif self.next_hop != key_hop:
                problems["next_hop"] = f"{hop} does not match the key's {key_hop!r}"
            if hop.is_unspecified and self.outgoing_interface is None:
                problems["outgoing_interface"] = "required for a route without a next hop"
        if self.vrf is not None and key_vrf is not None and self.vrf != key_vrf:
            problems["vrf"] = f"{self.vrf} does not match the key's {key_vrf}"
        if problems:
            raise FieldProblems(problems)
        return self


Normalizer = Callable[[str, Any], dict[str, Any]]
MEMO_SIZE = 8192


Canonical = dict[str, Any]
# Whether two canonical forms of one key mean the same (e.g. an unset field matching whatever
# VPP reports).
Agreement = Callable[[Canonical, Canonical], bool]
Comparator = Callable[[str, Any, Any], bool]


def _agree(normalize: Normalizer, agree: Agreement | None, key: str, a: Any, b: Any) -> bool:
    try:
        x, y = normalize(key, a), normalize(key, b)
    except InvalidValueError:
        return bool(a == b)  # a value that does not validate compares as it is
    return bool(x == y) if agree is None else bool(agree(x, y))


def canonical_comparator(normalize: Normalizer, agree: Agreement | None = None) -> Comparator:
    """A value comparator: two values are equivalent when their canonical forms agree
    (``agree``; without it, when they are equal); a value that does not validate compares as
    it is."""
    return lambda key, a, b: _agree(normalize, agree, key, a, b)


def same_normalized(normalize: Normalizer, key: str, a: Any, b: Any) -> bool:
    """``canonical_comparator(normalize)(key, a, b)``, for modules that call it directly."""
    return _agree(normalize, None, key, a, b)


def interface_dependency(name: str) -> Dependency:
    """What a value on a VPP interface waits for: its `vpp/interface/<name>` value."""
    return Dependency(label=f"interface {name}", key=keys.interface_key(name))


def model_descriptor(
    name: str,
    normalize: Normalizer,
    selects: Callable[[str], bool] | re.Pattern[str],
    *,
    depends_on: Callable[[Canonical], Iterable[Dependency]] | None = None,
    agree: Agreement | None = None,
    **callbacks: Any,
) -> Descriptor:
    """The descriptor of a model, wired from its memoized normaliser (see the module
    docstring): ``validate`` normalises, ``value_comparator`` is ``canonical_comparator(
    normalize, agree)``, ``dependencies`` are ``depends_on(canonical value)`` (none for a value
    that does not validate), ``key_selector`` is ``selects`` (a predicate, or a pattern the
    whole key must match); ``callbacks`` are the rest of the ``Descriptor`` fields
    (``is_retriable_failure`` is VPP's ``southbound.vpp.errors.is_retriable`` unless given)."""

    def validate(key: str, value: Any) -> None:
        normalize(key, value)

    def dependencies(key: str, value: Any) -> Sequence[Dependency]:
        assert depends_on is not None
        try:
            canonical = normalize(key, value)
        except InvalidValueError:
            return ()
        return tuple(depends_on(canonical))

    if isinstance(selects, re.Pattern):
        pattern = selects
        selects = lambda key: pattern.fullmatch(key) is not None  # noqa: E731
    callbacks.setdefault("is_retriable_failure", is_retriable)
    if depends_on is not None:
        if "dependencies" in callbacks:
            raise TypeError(f"{name}: give depends_on or dependencies, not both")
        callbacks["dependencies"] = dependencies
    return Descriptor(
        name=name,
        key_selector=selects,
        validate=validate,
        value_comparator=canonical_comparator(normalize, agree),
        **callbacks,
    )


def memoized(fn: Normalizer) -> Normalizer:
    """Cache normalisation by (key, repr(value)), and by the value object itself.

    The scheduler hands the same value object to validate, create, the comparator, derived
    values and dependencies; normalising (address parsing above all) is then done once, and
    the calls after the first for that object cost a dictionary look-up (no repr, no lock: per
    key the last value object seen, held so its identity cannot be reused; values are never
    mutated in place, as the scheduler requires). Keyed by the value's repr otherwise, so an
    equal value hits and a changed one misses; results are shared and must not be mutated by
    callers.
    """
    cache: OrderedDict[tuple[str, str], dict[str, Any] | InvalidValueError] = OrderedDict()
    lock = threading.Lock()
    # key -> (the last value object normalised for it, its result): replaced as a whole, so a
    # reader in another thread sees an old pair or a new one, never a mix.
    last: dict[str, tuple[Any, dict[str, Any] | InvalidValueError]] = {}

    def normalize(key: str, value: Any) -> dict[str, Any]:
        hit: dict[str, Any] | InvalidValueError | None
        seen = last.get(key)
        if seen is not None and seen[0] is value:
            hit = seen[1]
        else:
            memo_key = (key, repr(value))
            with lock:
                hit = cache.get(memo_key)
            if hit is None:
                try:
                    hit = fn(key, value)
                except InvalidValueError as exc:
                    hit = exc
                with lock:
                    cache[memo_key] = hit
                    if len(cache) > MEMO_SIZE:
                        cache.popitem(last=False)
            if len(last) >= MEMO_SIZE:
                last.clear()
            last[key] = (value, hit)
        if isinstance(hit, InvalidValueError):
            raise hit
        return hit

    normalize.__doc__ = fn.__doc__
    normalize.__wrapped__ = fn  # type: ignore[attr-defined]
    return normalize


def _key_name(key: str, parse: Any, what: str) -> tuple[str, dict[str, str]]:
    name = parse(key)
    problem = name_problem(name, f"{what} name") if name is not None else "malformed key"
    return (str(name) if name is not None else ""), ({KEY_FIELD: problem} if problem else {})


@memoized
def normalize_interface(key: str, value: Any) -> dict[str, Any]:
    name, key_problems = _key_name(key, keys.interface_name, "interface")
    model = validate(VppInterface, key, value, key_problems=key_problems,
                     context={"name": name})
    result = model.model_dump()
    if model.type == "tap" and model.tap is None:
        result["tap"] = VppTapSection.model_validate({}).model_dump()
    return result


def interface_conflicts(values: Mapping[str, Any]) -> dict[str, str]:
    """Sub-interfaces VPP would refuse together: one sub-interface id twice on a parent
    (`VNET_API_ERROR_VLAN_ALREADY_EXISTS`), or the same tags and match twice on it ("vlan is
    already in use", `VNET_API_ERROR_UNSPECIFIED`: a frame goes to one sub-interface only).

    The first in key order wins, whatever order the values arrived in; each later one is
    refused with a reason naming the key it gives way to. Values that do not validate on their
    own are left to their own errors. The one rule of both the CLI's `plan` (``ModelSpec``) and
    the agent's scheduler (``Descriptor.conflicts``: run over every desired interface at each
    transaction that touches one, so it looks at sub-interfaces only)."""
    taken: dict[tuple[Any, ...], str] = {}
    found: dict[str, str] = {}
    subs = [key for key, value in values.items()
            if isinstance(value, Mapping) and value.get("type") == "sub_interface"]
    for key in sorted(subs):
        try:
            v = normalize_interface(key, values[key])
        except InvalidValueError:
            continue
        sub = v["sub_interface"]
        if v["type"] != "sub_interface" or sub is None:
            continue
        claims: list[tuple[Any, ...]] = [
            ("sub_id", sub["parent"], sub["sub_id"]),
            ("tags", sub["parent"], sub["outer_vlan"], sub["inner_vlan"], sub["exact_match"])]
        for claim in claims:
            other = taken.get(claim)
            if other is not None:
                what = (f"sub-interface id {sub['sub_id']}" if claim[0] == "sub_id"
                        else f"VLAN {sub['outer_vlan']}" + (f"/{sub['inner_vlan']}"
                                                           if sub["inner_vlan"] else ""))
                refusal = ("VNET_API_ERROR_VLAN_ALREADY_EXISTS" if claim[0] == "sub_id"
                           else "vlan is already in use")
                found[key] = (f"{what} on {sub['parent']} is {other} already (the first "
                              f"in key order wins): VPP refuses the second ({refusal})")
                break
            taken[claim] = key
    return found


@memoized
def normalize_bd(key: str, value: Any) -> dict[str, Any]:
    _name, key_problems = _key_name(key, keys.bd_name, "bridge domain")
    return validate(VppBridgeDomain, key, value, key_problems=key_problems).model_dump()


@memoized
def normalize_route(key: str, value: Any) -> dict[str, Any]:
    parts = keys.parse_route_key(key)
    if parts is None:
        raise validation_error(key, {KEY_FIELD: "malformed key (vpp/route/<vrf>/<dst cidr>/"
                                                "<next hop>)"})
    key_problems = {}
    key_vrf = int(parts.vrf) if parts.vrf.isdigit() and int(parts.vrf) <= MAX_VRF else None
    if key_vrf is None:
        key_problems["vrf"] = f"the key's vrf {parts.vrf!r} is not an integer 0..{MAX_VRF}"
    filled = dict(value) if isinstance(value, Mapping) else value
    if isinstance(filled, dict):
        # What the value leaves out, the key says (and is validated as if written here).
        if filled.get("dst") is None:
            filled["dst"] = parts.dst
        if filled.get("next_hop") is None:
            filled["next_hop"] = parts.next_hop
        elif filled["next_hop"] == "":
            filled["next_hop"] = "::" if ":" in str(filled["dst"]) else "0.0.0.0"
    model = validate(VppRoute, key, filled, key_problems=key_problems, context={
        "dst": parts.dst, "next_hop": parts.next_hop, "vrf": key_vrf})
    result = model.model_dump()
    result["vrf"] = key_vrf if model.vrf is None else model.vrf
    return result


def validation_error(key: str, problems: dict[str, str]) -> Exception:
    from southbound.validation import FieldsInvalidError

    return FieldsInvalidError(key, problems)


def route_key_for(value: Mapping[str, Any]) -> str:
    """The key of a normalized route value."""
    return keys.route_key(value["vrf"], value["dst"], value["next_hop"])

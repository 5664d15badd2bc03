"""The configuration models of the VPP southbound: validation and normalisation.

`normalize_*` checks a value as the user wrote it and returns it in canonical form (defaults
filled in, addresses canonical and sorted, MACs lower-case); a bad value raises the scheduler's
`InvalidValueError` naming every bad field. Retrieve reports values in exactly this form, so the
scheduler's comparison with the desired state is exact.

Interface (`vpp/interface/<name>`)::

    {"type": "loopback" | "tap" | "af_packet",
     "enabled": true, "mtu": null, "mac": null, "vrf": 0,
     "addresses": ["10.0.0.1/24", "fd00::1/64"],
     "unnumbered": {"interface_with_ip": "<name>"},      # instead of addresses
     "tap": {"host_if_name": null, "rx_ring_size": 256, "tx_ring_size": 256},
     "af_packet": {"host_if_name": "<linux interface>"}}

`null` (or an absent field) for mtu, mac and tap.host_if_name means "whatever VPP chooses".

Bridge domain (`vpp/bd/<name>`)::

    {"bd_id": 10, "flood": true, "forward": true, "learn": true,
     "unknown_unicast_flood": true, "arp_term": false,
     "interfaces": [{"name": "<interface>", "bvi": false}]}

Route (`vpp/route/<vrf>/<dst cidr>/<next hop>`)::

    {"dst": "10.1.0.0/16", "next_hop": "10.0.0.2", "outgoing_interface": "<name>",
     "vrf": 0, "weight": 1, "preference": 0}
"""

from __future__ import annotations

import ipaddress
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

from scheduler import InvalidValueError
from southbound.vpp import keys
from southbound.vpp.fields import (
    Problems,
    address_sort_key,
    check_mapping,
    get_bool,
    get_int,
    get_linux_ifname,
    get_mac,
    name_problem,
    parse_interface_address,
    unknown_fields,
)

INTERFACE_TYPES = ("loopback", "tap", "af_packet")
MIN_MTU = 64
MAX_MTU = 9216
MAX_VRF = 0xFFFFFFFE
MAX_BD_ID = 0xFFFFFF
MAX_RING = 32768
DEFAULT_RING = 256

INTERFACE_FIELDS = {
    "type",
    "enabled",
    "mtu",
    "mac",
    "addresses",
    "vrf",
    "unnumbered",
    "tap",
    "af_packet",
}
BD_FIELDS = {
    "bd_id",
    "flood",
    "forward",
    "learn",
    "unknown_unicast_flood",
    "arp_term",
    "interfaces",
}
ROUTE_FIELDS = {"dst", "next_hop", "outgoing_interface", "vrf", "weight", "preference"}


Normalizer = Callable[[str, Any], dict[str, Any]]
MEMO_SIZE = 8192


def memoized(fn: Normalizer) -> Normalizer:
    """Cache normalisation by (key, repr(value)).

    The scheduler hands the same value to validate, create, the comparator, derived values and
    dependencies; normalising (address parsing above all) is then done once. Keyed by the
    value's repr, so an equal value hits and a changed one misses; results are shared and must
    not be mutated by callers.
    """
    cache: OrderedDict[tuple[str, str], dict[str, Any] | InvalidValueError] = OrderedDict()
    lock = threading.Lock()

    def normalize(key: str, value: Any) -> dict[str, Any]:
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
        if isinstance(hit, InvalidValueError):
            raise InvalidValueError(str(hit), fields=hit.fields)
        return hit

    normalize.__doc__ = fn.__doc__
    normalize.__wrapped__ = fn  # type: ignore[attr-defined]
    return normalize


def _key_name(key: str, parse: Any, what: str) -> str:
    name = parse(key)
    problem = name_problem(name, f"{what} name") if name is not None else "malformed key"
    if problem:
        raise InvalidValueError(f"{key}: {problem}", fields=["key"])
    assert name is not None
    return str(name)


# ---------------------------------------------------------------------------------- interface
@memoized
def normalize_interface(key: str, value: Any) -> dict[str, Any]:
    name = _key_name(key, keys.interface_name, "interface")
    value = check_mapping(value, key)
    p = Problems()
    unknown_fields(value, INTERFACE_FIELDS, p)
    if_type = value.get("type")
    if if_type not in INTERFACE_TYPES:
        p.add("type", f"must be one of {', '.join(INTERFACE_TYPES)}, got {if_type!r}")
    result: dict[str, Any] = {
        "type": if_type,
        "enabled": get_bool(value, "enabled", True, p),
        "mtu": get_int(value, "mtu", None, MIN_MTU, MAX_MTU, p),
        "mac": get_mac(value, "mac", p),
        "vrf": get_int(value, "vrf", 0, 0, MAX_VRF, p),
        "addresses": _addresses(value.get("addresses"), p),
        "unnumbered": _unnumbered(name, value.get("unnumbered"), p),
        "tap": _tap(if_type, value.get("tap"), p),
        "af_packet": _af_packet(if_type, value.get("af_packet"), p),
    }
    if result["unnumbered"] is not None and result["addresses"]:
        p.add("unnumbered", "an unnumbered interface cannot have addresses of its own")
    p.raise_for(key)
    return result


def _addresses(raw: Any, p: Problems) -> list[str]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        p.add("addresses", f"must be a list of addresses like 10.0.0.1/24, got {raw!r}")
        return []
    parsed = {}
    for i, item in enumerate(raw):
        try:
            addr = parse_interface_address(item)
        except ValueError as exc:
            p.add(f"addresses[{i}]", str(exc))
            continue
        if str(addr) in parsed:
            p.add(f"addresses[{i}]", f"{addr} is listed twice")
        parsed[str(addr)] = addr
    return [str(a) for a in sorted(parsed.values(), key=address_sort_key)]


def _unnumbered(name: str, raw: Any, p: Problems) -> dict[str, str] | None:
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        p.add("unnumbered", f"must be an object {{'interface_with_ip': <name>}}, got {raw!r}")
        return None
    unknown_fields(raw, {"interface_with_ip"}, p, "unnumbered.")
    other = raw.get("interface_with_ip")
    problem = name_problem(other, "interface name")
    if problem:
        p.add("unnumbered.interface_with_ip", problem)
        return None
    if other == name:
        p.add("unnumbered.interface_with_ip", "an interface cannot borrow its own addresses")
        return None
    return {"interface_with_ip": str(other)}


def _tap(if_type: Any, raw: Any, p: Problems) -> dict[str, Any] | None:
    if if_type != "tap":
        if raw is not None:
            p.add("tap", "only allowed with type 'tap'")
        return None
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        p.add("tap", f"must be an object, got {raw!r}")
        return None
    unknown_fields(raw, {"host_if_name", "rx_ring_size", "tx_ring_size"}, p, "tap.")
    rings = {}
    for ring in ("rx_ring_size", "tx_ring_size"):
        size = get_int(raw, ring, DEFAULT_RING, 1, MAX_RING, p, label=f"tap.{ring}")
        if size is not None and size & (size - 1):
            p.add(f"tap.{ring}", f"must be a power of two up to {MAX_RING}, got {size}")
        rings[ring] = size
    return {
        "host_if_name": get_linux_ifname(raw, "host_if_name", p, "tap.host_if_name"),
        **rings,
    }


def _af_packet(if_type: Any, raw: Any, p: Problems) -> dict[str, Any] | None:
    if if_type != "af_packet":
        if raw is not None:
            p.add("af_packet", "only allowed with type 'af_packet'")
        return None
    if not isinstance(raw, Mapping):
        p.add("af_packet", "required with type 'af_packet': {'host_if_name': <linux interface>}")
        return None
    unknown_fields(raw, {"host_if_name"}, p, "af_packet.")
    host = get_linux_ifname(raw, "host_if_name", p, "af_packet.host_if_name")
    if host is None and "af_packet.host_if_name" not in p.fields:
        p.add("af_packet.host_if_name", "required")
    return {"host_if_name": host}


# ---------------------------------------------------------------------------------- bridge domain
@memoized
def normalize_bd(key: str, value: Any) -> dict[str, Any]:
    _key_name(key, keys.bd_name, "bridge domain")
    value = check_mapping(value, key)
    p = Problems()
    unknown_fields(value, BD_FIELDS, p)
    bd_id = get_int(value, "bd_id", None, 1, MAX_BD_ID, p)
    if bd_id is None and "bd_id" not in p.fields:
        p.add("bd_id", f"required: an integer 1..{MAX_BD_ID}")
    result: dict[str, Any] = {
        "bd_id": bd_id,
        "flood": get_bool(value, "flood", True, p),
        "forward": get_bool(value, "forward", True, p),
        "learn": get_bool(value, "learn", True, p),
        "unknown_unicast_flood": get_bool(value, "unknown_unicast_flood", True, p),
        "arp_term": get_bool(value, "arp_term", False, p),
        "interfaces": _bd_members(value.get("interfaces"), p),
    }
    p.raise_for(key)
    return result


def _bd_members(raw: Any, p: Problems) -> list[dict[str, Any]]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        p.add("interfaces", "must be a list of {'name': <interface>, 'bvi': false}")
        return []
    members: dict[str, dict[str, Any]] = {}
    for i, item in enumerate(raw):
        where = f"interfaces[{i}]"
        if not isinstance(item, Mapping):
            p.add(where, f"must be an object {{'name': ..., 'bvi': ...}}, got {item!r}")
            continue
        unknown_fields(item, {"name", "bvi"}, p, f"{where}.")
        problem = name_problem(item.get("name"), "interface name")
        if problem:
            p.add(f"{where}.name", problem)
            continue
        name = item["name"]
        if name in members:
            p.add(f"{where}.name", f"interface {name!r} is listed twice")
        members[name] = {"name": name, "bvi": get_bool(item, "bvi", False, p)}
    if sum(m["bvi"] for m in members.values()) > 1:
        p.add("interfaces", "at most one interface can be the BVI")
    return sorted(members.values(), key=lambda m: m["name"])


# ---------------------------------------------------------------------------------- route
@memoized
def normalize_route(key: str, value: Any) -> dict[str, Any]:
    parts = keys.parse_route_key(key)
    if parts is None:
        raise InvalidValueError(
            f"{key}: malformed key (vpp/route/<vrf>/<dst cidr>/<next hop>)", fields=["key"]
        )
    value = check_mapping(value, key)
    p = Problems()
    unknown_fields(value, ROUTE_FIELDS, p)

    vrf = get_int(value, "vrf", None, 0, MAX_VRF, p)
    if not parts.vrf.isdigit() or int(parts.vrf) > MAX_VRF:
        p.add("vrf", f"the key's vrf {parts.vrf!r} is not an integer 0..{MAX_VRF}")
    elif vrf is None:
        vrf = int(parts.vrf)
    elif vrf != int(parts.vrf):
        p.add("vrf", f"{vrf} does not match the key's {parts.vrf}")

    dst = _dst(value.get("dst", parts.dst), parts.dst, p)
    next_hop = _next_hop(value, parts.next_hop, dst, p)
    oif = value.get("outgoing_interface")
    if oif is not None:
        problem = name_problem(oif, "interface name")
        if problem:
            p.add("outgoing_interface", problem)
            oif = None
    attached = next_hop is not None and ipaddress.ip_address(next_hop).is_unspecified
    if attached and oif is None and "outgoing_interface" not in p.fields:
        p.add("outgoing_interface", "required for a route without a next hop")
    result = {
        "dst": dst,
        "next_hop": next_hop,
        "outgoing_interface": oif,
        "vrf": vrf,
        "weight": get_int(value, "weight", 1, 1, 255, p),
        "preference": get_int(value, "preference", 0, 0, 255, p),
    }
    p.raise_for(key)
    return result


def _dst(raw: Any, in_key: str, p: Problems) -> str | None:
    try:
        network = ipaddress.ip_network(raw) if isinstance(raw, str) else None
    except ValueError as exc:
        p.add("dst", f"must be a network like 10.1.0.0/16: {exc}")
        return None
    if network is None:
        p.add("dst", f"must be a network like 10.1.0.0/16, got {raw!r}")
        return None
    if str(network) != in_key:
        p.add("dst", f"{network} does not match the key's {in_key!r}")
    return str(network)


def _next_hop(value: Mapping[str, Any], in_key: str, dst: str | None, p: Problems) -> str | None:
    raw = value.get("next_hop", in_key)
    family = ipaddress.ip_network(dst).version if dst else None
    if raw in (None, ""):
        raw = "::" if family == 6 else "0.0.0.0"
    try:
        hop = ipaddress.ip_address(raw) if isinstance(raw, str) else None
    except ValueError:
        hop = None
    if hop is None:
        p.add("next_hop", f"must be an IP address, got {raw!r}")
        return None
    if family is not None and hop.version != family:
        p.add("next_hop", f"{hop} is not of the destination's address family")
    if str(hop) != in_key:
        p.add("next_hop", f"{hop} does not match the key's {in_key!r}")
    return str(hop)


def route_key_for(value: Mapping[str, Any]) -> str:
    """The key of a normalized route value."""
    return keys.route_key(value["vrf"], value["dst"], value["next_hop"])

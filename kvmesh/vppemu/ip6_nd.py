"""IPv6 links and their router advertisements, as VPP 24.06 keeps them (src/vnet/ip/ip6_link.c,
src/vnet/ip6-nd/ip6_ra.c, ip6_nd_api.c); no I/O.

IPv6 link: enabled on an interface by each IPv6 address and by `sw_interface_ip6_enable_disable`,
each holding one lock (enabling an enabled link answers VALUE_EXIST, -81, and still takes a lock;
disabling one that is not enabled is IP6_NOT_ENABLED, -62); the last lock gone disables it.

RA: an enabled link of an ethernet interface (or of a sub-interface of one; not local0 or an L3
tunnel) gets RA state with VPP's defaults; it goes with the link. `sw_interface_ip6nd_ra_config`
and `..._ra_prefix` need it (IP6_NOT_ENABLED). RA config applies flags that are set (with `is_no`:
restores them), leaves the others; refuses (INVALID_VALUE, -7) a non-zero router lifetime not
above the maximum interval, a minimum interval below 3 s or above 0.75 x the maximum, more than 3
initial advertisements or an initial interval above 16 s; clamps the lifetime to 9000 s. Prefixes
are keyed by their address as given: a different length for a known one is INVALID_VALUE_2 (-8),
removing an unknown one INVALID_VALUE. A lifetime of ~0 makes both lifetimes infinite.
VPP frees no RA record when a link is disabled: its walk (the dump of all interfaces) meets the
interface once more for each earlier enabling, and answers the current state each time.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

from kvmesh.vppemu import errors as E
from kvmesh.vppemu.errors import ApiError
from kvmesh.vppemu.plane import Plane

DEF_MAX_RADV_INTERVAL = 200
DEF_MIN_RADV_INTERVAL = 0.75 * DEF_MAX_RADV_INTERVAL
DEF_CURR_HOP_LIMIT = 64
DEF_DEF_RTR_LIFETIME = 3 * DEF_MAX_RADV_INTERVAL
MAX_DEF_RTR_LIFETIME = 9000
MAX_INITIAL_RTR_ADVERT_INTERVAL = 16
MAX_INITIAL_RTR_ADVERTISEMENTS = 3
DEF_ADV_VALID_LIFETIME = 2592000
DEF_ADV_PREF_LIFETIME = 604800
INFINITE = 0xFFFFFFFF
DEFAULT_MTU = 9000  # vnet_sw_interface_get_mtu when none is set


@dataclass
class RaPrefix:
    address: ipaddress.IPv6Address
    length: int
    onlink: bool = True
    autonomous: bool = True
    valid_lifetime: int = DEF_ADV_VALID_LIFETIME
    preferred_lifetime: int = DEF_ADV_PREF_LIFETIME
    enabled: bool = True
    decrement_lifetime: bool = True


@dataclass
class RaInfo:
    sw_if_index: int
    link_mtu: int
    send_radv: bool = False
    cease_radv: bool = False
    managed: bool = False
    other: bool = False
    send_unicast: bool = False
    link_layer_address: bool = True
    max_interval: float = DEF_MAX_RADV_INTERVAL
    min_interval: float = DEF_MIN_RADV_INTERVAL
    lifetime: int = DEF_DEF_RTR_LIFETIME
    initial_count: int = MAX_INITIAL_RTR_ADVERTISEMENTS
    initial_interval: float = MAX_INITIAL_RTR_ADVERT_INTERVAL
    prefixes: dict[ipaddress.IPv6Address, RaPrefix] = field(default_factory=dict)


@dataclass(frozen=True)
class RaConfig:
    """sw_interface_ip6nd_ra_config's arguments (flags as given: set or not)."""

    suppress: bool = False
    managed: bool = False
    other: bool = False
    ll_option: bool = False
    send_unicast: bool = False
    cease: bool = False
    is_no: bool = False
    default_router: bool = False
    max_interval: int = 0
    min_interval: int = 0
    lifetime: int = 0
    initial_count: int = 0
    initial_interval: int = 0


@dataclass(frozen=True)
class PrefixConfig:
    """sw_interface_ip6nd_ra_prefix's arguments."""

    address: ipaddress.IPv6Address
    length: int
    use_default: bool = False
    no_advertise: bool = False
    off_link: bool = False
    no_autoconfig: bool = False
    no_onlink: bool = False
    is_no: bool = False
    valid_lifetime: int = 0
    preferred_lifetime: int = 0


def _pick(given: bool, is_no: bool, on_no: bool, on_set: bool, current: bool) -> bool:
    """VPP's rule for an RA flag: a flag set restores (is_no) or sets it, else it stays."""
    if not given:
        return current
    return on_no if is_no else on_set


class Ip6Nd:
    def __init__(self, dataplane: Plane) -> None:
        self._dp = dataplane
        self.links: dict[int, int] = {}  # sw_if_index -> locks
        self.ra: dict[int, RaInfo] = {}
        self._ra_walk: list[int] = []  # VPP's RA pool, never freed

    # ------------------------------------------------------------------ IPv6 links
    def _is_ethernet(self, sw_if_index: int) -> bool:
        iface = self._dp.interfaces[sw_if_index]
        sup = self._dp.interfaces.get(iface.sub.parent, iface) if iface.sub else iface
        # Every ethernet interface has a MAC; local0 and L3 tunnels have none.
        return bool(sup.kind != "local" and any(sup.mac))

    def link_enable(self, sw_if_index: int) -> bool:
        """Take a lock on the interface's IPv6 link; True if this enabled it."""
        iface = self._dp.interface(sw_if_index)
        if sw_if_index in self.links:
            self.links[sw_if_index] += 1
            return False
        self.links[sw_if_index] = 1
        if self._is_ethernet(sw_if_index):
            mtu = iface.sw_mtu[2] or iface.sw_mtu[0] or DEFAULT_MTU
            self.ra[sw_if_index] = RaInfo(sw_if_index, mtu)
            self._ra_walk.append(sw_if_index)
        return True

    def link_disable(self, sw_if_index: int) -> None:
        if sw_if_index not in self.links:
            raise ApiError(E.IP6_NOT_ENABLED, f"IPv6 is not enabled on {sw_if_index}")
        self.links[sw_if_index] -= 1
        if not self.links[sw_if_index]:
            del self.links[sw_if_index]
            self.ra.pop(sw_if_index, None)

    def forget_interface(self, sw_if_index: int) -> None:
        self.links.pop(sw_if_index, None)
        self.ra.pop(sw_if_index, None)

    # ------------------------------------------------------------------ RA
    def _ra(self, sw_if_index: int) -> RaInfo:
        ra = self.ra.get(sw_if_index)
        if ra is None:
            raise ApiError(E.IP6_NOT_ENABLED, f"IPv6 (RA) is not enabled on {sw_if_index}")
        return ra

    def config(self, sw_if_index: int, c: RaConfig) -> None:
        ra = self._ra(sw_if_index)
        send_radv = True  # VPP starts off believing it will send RAs
        max_interval, min_interval = float(c.max_interval), float(c.min_interval)
        if max_interval and not min_interval:
            min_interval = float(int(0.75 * max_interval))  # stored in a u32 first
        max_interval = (DEF_MAX_RADV_INTERVAL if c.is_no else max_interval) if max_interval \
            else ra.max_interval
        min_interval = (DEF_MIN_RADV_INTERVAL if c.is_no else min_interval) if min_interval \
            else ra.min_interval
        lifetime = (DEF_DEF_RTR_LIFETIME if c.is_no else c.lifetime) if c.default_router \
            else ra.lifetime
        if lifetime:
            lifetime = min(lifetime, MAX_DEF_RTR_LIFETIME)
            if lifetime <= max_interval:
                raise ApiError(E.INVALID_VALUE, "router lifetime not above the max interval")
        if min_interval and (min_interval > 0.75 * max_interval or min_interval < 3):
            raise ApiError(E.INVALID_VALUE, "min interval outside 3 .. 0.75 x max interval")
        if c.initial_count > MAX_INITIAL_RTR_ADVERTISEMENTS or \
                c.initial_interval > MAX_INITIAL_RTR_ADVERT_INTERVAL:
            raise ApiError(E.INVALID_VALUE, "initial count or interval too large")
        ra.send_radv = _pick(c.suppress, c.is_no, True, False, send_radv)
        ra.managed = _pick(c.managed, c.is_no, False, True, ra.managed)
        ra.other = _pick(c.other, c.is_no, False, True, ra.other)
        ra.link_layer_address = _pick(c.ll_option, c.is_no, True, False, ra.link_layer_address)
        ra.send_unicast = _pick(c.send_unicast, c.is_no, False, True, ra.send_unicast)
        ra.cease_radv = _pick(c.cease, c.is_no, False, True, ra.cease_radv)
        ra.min_interval, ra.max_interval, ra.lifetime = min_interval, max_interval, int(lifetime)
        if c.initial_count:
            ra.initial_count = MAX_INITIAL_RTR_ADVERTISEMENTS if c.is_no else c.initial_count
        if c.initial_interval:
            ra.initial_interval = MAX_INITIAL_RTR_ADVERT_INTERVAL if c.is_no \
                else c.initial_interval
        if c.cease and c.is_no:
            ra.send_radv = True  # restart

    def prefix(self, sw_if_index: int, p: PrefixConfig) -> None:
        ra = self._ra(sw_if_index)
        found = ra.prefixes.get(p.address)
        if p.is_no:
            if found is None:
                raise ApiError(E.INVALID_VALUE, f"no RA prefix {p.address}")
            if found.length != p.length:
                raise ApiError(E.INVALID_VALUE_2, f"{p.address} has length {found.length}")
            del ra.prefixes[p.address]
            return
        if found is None:
            found = RaPrefix(p.address, p.length)
            ra.prefixes[p.address] = found
            if p.use_default:
                return
        elif found.length != p.length:
            raise ApiError(E.INVALID_VALUE_2, f"{p.address} has length {found.length}")
        if INFINITE in (p.valid_lifetime, p.preferred_lifetime):
            found.valid_lifetime = found.preferred_lifetime = INFINITE
            found.decrement_lifetime = False
        else:
            found.valid_lifetime, found.preferred_lifetime = p.valid_lifetime, \
                p.preferred_lifetime
        found.enabled = not p.no_advertise
        found.onlink = not (p.off_link or p.no_onlink)
        found.autonomous = not p.no_autoconfig

    def walk(self, sw_if_index: int) -> list[RaInfo]:
        """What the dump answers: one interface, or VPP's whole RA pool walk (~0)."""
        if sw_if_index != 0xFFFFFFFF:
            ra = self.ra.get(sw_if_index)
            return [ra] if ra is not None else []
        return [self.ra[i] for i in self._ra_walk if i in self.ra]

    def snapshot(self) -> dict[str, object]:
        return {"links": dict(sorted(self.links.items())),
                "ra": {i: {"send_radv": r.send_radv, "prefixes": len(r.prefixes)}
                       for i, r in sorted(self.ra.items())}}

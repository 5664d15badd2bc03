"""The nat44-ed plugin's state: enabled or not, pool addresses, interface roles, static mappings
(no I/O).

As VPP 24.06 (src/plugins/nat/nat44-ed/nat44_ed.c, nat44_ed_api.c) does it:
- enabling an enabled plugin, or disabling a disabled one, answers retval 1 (its
  `fail_if_enabled`/`fail_if_disabled`); the static-mapping-only and connection-tracking flags
  are UNSUPPORTED; `sessions` 0 means 63 * 1024; disabling removes every address, interface role
  and static mapping;
- while disabled, adding addresses, interface roles or static mappings is UNSUPPORTED;
- an address range is added address by address: one already in the pool stops it with
  VALUE_EXIST (those before it stay added, as in VPP); removing a missing one: NO_SUCH_ENTRY;
- an interface role added twice is accepted (nothing changes); removing a role of an interface
  NAT does not know: NO_SUCH_ENTRY;
- a static mapping whose external (address, port, protocol) or local (address, port, vrf,
  protocol) is taken: VALUE_EXIST; removing a missing one: NO_SUCH_ENTRY. A mapping on an
  external interface is a resolve record, plus a mapping on the interface's first IPv4 address
  when it has one (the dump lists both, as VPP does).

Simplification: interface address changes after a mapping is added are not followed.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from dataclasses import dataclass, field

from kvmesh.vppemu import errors as E
from kvmesh.vppemu.errors import ApiError

INVALID_INDEX = 0xFFFFFFFF
DEFAULT_SESSIONS = 63 * 1024
# nat44_config_flags
STATIC_MAPPING_ONLY = 2
CONNECTION_TRACKING = 4
# nat_config_flags
TWICE_NAT = 1
SELF_TWICE_NAT = 2
OUT2IN_ONLY = 4
ADDR_ONLY = 8
OUTSIDE = 16
INSIDE = 32

IPv4 = ipaddress.IPv4Address


@dataclass(frozen=True)
class PoolAddress:
    address: IPv4
    vrf_id: int  # ~0: no specific table
    twice_nat: bool


@dataclass(frozen=True)
class StaticMapping:
    local: IPv4
    external: IPv4
    local_port: int
    external_port: int
    protocol: int
    vrf_id: int
    flags: int
    tag: str
    external_sw_if_index: int = INVALID_INDEX  # set on resolve records only

    def external_key(self) -> tuple[IPv4, int, int]:
        return self.external, self.external_port, self.protocol

    def local_key(self) -> tuple[IPv4, int, int, int]:
        return self.local, self.local_port, self.vrf_id, self.protocol


@dataclass
class Nat44:
    first_address: Callable[[int], IPv4 | None] = lambda _idx: None
    enabled: bool = False
    sessions: int = 0
    inside_vrf: int = 0
    outside_vrf: int = 0
    addresses: list[PoolAddress] = field(default_factory=list)
    interfaces: dict[int, int] = field(default_factory=dict)  # sw_if_index -> INSIDE|OUTSIDE
    mappings: list[StaticMapping] = field(default_factory=list)
    resolve: list[StaticMapping] = field(default_factory=list)

    # ------------------------------------------------------------------ plugin
    def enable(self, sessions: int, inside_vrf: int, outside_vrf: int, flags: int) -> None:
        if flags & (STATIC_MAPPING_ONLY | CONNECTION_TRACKING):
            raise ApiError(E.UNSUPPORTED, "static-mapping-only and connection tracking")
        if self.enabled:
            raise ApiError(E.NAT_PLUGIN_STATE, "plugin enabled")
        self.enabled = True
        self.sessions = sessions or DEFAULT_SESSIONS
        self.inside_vrf, self.outside_vrf = inside_vrf, outside_vrf

    def disable(self) -> None:
        if not self.enabled:
            raise ApiError(E.NAT_PLUGIN_STATE, "plugin disabled")
        self.enabled, self.sessions, self.inside_vrf, self.outside_vrf = False, 0, 0, 0
        self.addresses, self.interfaces, self.mappings, self.resolve = [], {}, [], []

    def _require_enabled(self) -> None:
        if not self.enabled:
            raise ApiError(E.UNSUPPORTED, "nat44 is disabled")

    # ------------------------------------------------------------------ pool
    def add_addresses(self, first: IPv4, last: IPv4, vrf_id: int, twice_nat: bool) -> None:
        for number in range(int(first), int(last) + 1):
            self._require_enabled()
            address = IPv4(number)
            if any(a.address == address and a.twice_nat == twice_nat for a in self.addresses):
                raise ApiError(E.VALUE_EXIST, f"address {address} exists")
            self.addresses.append(PoolAddress(address, vrf_id, twice_nat))

    def del_addresses(self, first: IPv4, last: IPv4, twice_nat: bool) -> None:
        for number in range(int(first), int(last) + 1):
            address = IPv4(number)
            found = [a for a in self.addresses
                     if a.address == address and a.twice_nat == twice_nat]
            if not found:
                raise ApiError(E.NO_SUCH_ENTRY, f"no such address {address}")
            self.addresses.remove(found[0])

    # ------------------------------------------------------------------ interfaces
    def add_interface(self, sw_if_index: int, inside: bool) -> None:
        self._require_enabled()
        self.interfaces[sw_if_index] = self.interfaces.get(sw_if_index, 0) | (
            INSIDE if inside else OUTSIDE)

    def del_interface(self, sw_if_index: int, inside: bool) -> None:
        self._require_enabled()
        roles = self.interfaces.get(sw_if_index)
        if roles is None:
            raise ApiError(E.NO_SUCH_ENTRY, f"interface {sw_if_index} is not a NAT interface")
        if roles == INSIDE | OUTSIDE:
            self.interfaces[sw_if_index] = roles & ~(INSIDE if inside else OUTSIDE)
        else:  # as VPP: the interface goes whichever role is named
            del self.interfaces[sw_if_index]

    def forget_interface(self, sw_if_index: int) -> None:
        self.interfaces.pop(sw_if_index, None)

    # ------------------------------------------------------------------ static mappings
    def add_mapping(self, mapping: StaticMapping) -> None:
        self._require_enabled()
        if mapping.flags & (TWICE_NAT | SELF_TWICE_NAT) and mapping.flags & ADDR_ONLY:
            raise ApiError(E.UNSUPPORTED, "twice-nat with an address-only mapping")
        mapping = self._normalized(mapping)
        if mapping.external_sw_if_index != INVALID_INDEX:
            if any(self._same_record(r, mapping) for r in self.resolve):
                raise ApiError(E.VALUE_EXIST, "mapping on this interface exists")
            address = self.first_address(mapping.external_sw_if_index)
            if address is not None:
                self._add_resolved(_replace(mapping, address))
            self.resolve.append(mapping)
            return
        self._add_resolved(mapping)

    def _add_resolved(self, mapping: StaticMapping) -> None:
        if any(m.external_key() == mapping.external_key() for m in self.mappings):
            raise ApiError(E.VALUE_EXIST, "external address and port are mapped")
        if not mapping.flags & OUT2IN_ONLY and any(
                m.local_key() == mapping.local_key() for m in self.mappings):
            raise ApiError(E.VALUE_EXIST, "local address and port are mapped")
        self.mappings.append(mapping)

    def del_mapping(self, mapping: StaticMapping) -> None:
        self._require_enabled()
        mapping = self._normalized(mapping)
        if mapping.external_sw_if_index != INVALID_INDEX:
            records = [r for r in self.resolve if self._same_record(r, mapping)]
            if not records:
                raise ApiError(E.NO_SUCH_ENTRY, "no mapping on this interface")
            self.resolve.remove(records[0])
            address = self.first_address(mapping.external_sw_if_index)
            if address is None:
                return
            mapping = _replace(mapping, address)
        found = [m for m in self.mappings if m.external_key() == mapping.external_key()]
        if not found:
            raise ApiError(E.NO_SUCH_ENTRY, "no such static mapping")
        self.mappings.remove(found[0])

    def _normalized(self, mapping: StaticMapping) -> StaticMapping:
        ports = (0, 0, 0) if mapping.flags & ADDR_ONLY else (
            mapping.local_port, mapping.external_port, mapping.protocol)
        vrf = self.inside_vrf if mapping.vrf_id == INVALID_INDEX else mapping.vrf_id
        return StaticMapping(mapping.local, mapping.external, ports[0], ports[1], ports[2], vrf,
                             mapping.flags, mapping.tag, mapping.external_sw_if_index)

    @staticmethod
    def _same_record(a: StaticMapping, b: StaticMapping) -> bool:
        return (a.external_sw_if_index, a.vrf_id, a.local, a.local_port, a.external_port,
                a.protocol) == (b.external_sw_if_index, b.vrf_id, b.local, b.local_port,
                                b.external_port, b.protocol)

    def snapshot(self) -> dict[str, object]:
        return {
            "enabled": self.enabled,
            "sessions": self.sessions,
            "addresses": [str(a.address) for a in self.addresses],
            "interfaces": {str(idx): flags for idx, flags in sorted(self.interfaces.items())},
            "static_mappings": [m.tag for m in self.mappings],
            "unresolved": [r.tag for r in self.resolve],
        }


def _replace(mapping: StaticMapping, external: IPv4) -> StaticMapping:
    """The resolved mapping of a resolve record: on the address, not the interface."""
    return StaticMapping(mapping.local, external, mapping.local_port, mapping.external_port,
                         mapping.protocol, mapping.vrf_id, mapping.flags, mapping.tag)

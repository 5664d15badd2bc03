"""The nat44-ed plugin's messages as typed calls, and what the NAT44 models share.

Every NAT44 value depends on `vpp/nat44/global/enabled`, a value derived from `vpp/nat44/global`
only while it says `"enabled": true`: VPP refuses every NAT call while the plugin is disabled
(UNSUPPORTED), and disabling it removes all NAT configuration, so NAT values wait (PENDING) for
the plugin and are removed before it is disabled.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import TYPE_CHECKING

from scheduler import Dependency
from southbound.vpp.models import canonical_comparator

if TYPE_CHECKING:
    from southbound.vpp.connection import VppConnection

GLOBAL_KEY = "vpp/nat44/global"
ENABLED_KEY = "vpp/nat44/global/enabled"
ENABLED = Dependency(label="NAT44 enabled", key=ENABLED_KEY)
ANY_INDEX = 0xFFFFFFFF
PROTOCOLS = {"icmp": 1, "tcp": 6, "udp": 17}
# nat_config_flags
TWICE_NAT = 1
ADDR_ONLY = 8
OUTSIDE = 16
INSIDE = 32
# nat44-ed answers 1 (not a VNET error) to enabling an enabled plugin or disabling a disabled one
PLUGIN_ALREADY_THERE = 1


def ip4(text: str) -> str:
    """An IPv4 address in canonical form (pydantic validator: raises ValueError)."""
    try:
        return str(ipaddress.IPv4Address(text))
    except ValueError:
        raise ValueError(f"must be an IPv4 address, got {text!r}") from None


# The value comparator of the models, under the name model modules written before
# `southbound.vpp.models.model_descriptor` (which wires it by itself) import.
same_canonical = canonical_comparator


@dataclass(frozen=True)
class PoolAddress:
    address: ipaddress.IPv4Address
    vrf: int | None  # None: VPP's ~0 (no specific table)
    twice_nat: bool


@dataclass(frozen=True)
class StaticMappingDetails:
    tag: str
    local_ip: str
    external_ip: str
    external_sw_if_index: int | None
    protocol: int
    local_port: int
    external_port: int
    vrf: int
    addr_only: bool


class Nat44Api:
    def __init__(self, conn: VppConnection) -> None:
        self.conn = conn

    def enable(self, sessions: int) -> None:
        self.conn.call("nat44_ed_plugin_enable_disable", enable=True, sessions=sessions,
                       inside_vrf=0, outside_vrf=0, session_memory=0, flags=0)

    def disable(self) -> None:
        self.conn.call("nat44_ed_plugin_enable_disable", enable=False, sessions=0,
                       inside_vrf=0, outside_vrf=0, session_memory=0, flags=0)

    def sessions(self) -> int:
        """The configured sessions per thread; 0 while the plugin is disabled."""
        return int(self.conn.call("nat44_show_running_config").sessions)

    def address_range(self, first: str, last: str, vrf: int | None, twice_nat: bool,
                      is_add: bool) -> None:
        self.conn.call("nat44_add_del_address_range", first_ip_address=first,
                       last_ip_address=last, vrf_id=ANY_INDEX if vrf is None else vrf,
                       is_add=is_add, flags=TWICE_NAT if twice_nat else 0)

    def addresses(self) -> list[PoolAddress]:
        return [PoolAddress(ipaddress.IPv4Address(str(d.ip_address)),
                            None if d.vrf_id == ANY_INDEX else int(d.vrf_id),
                            bool(int(d.flags) & TWICE_NAT))
                for d in self.conn.dump("nat44_address_dump")]

    def interface_role(self, sw_if_index: int, inside: bool, is_add: bool) -> None:
        self.conn.call("nat44_interface_add_del_feature", is_add=is_add,
                       flags=INSIDE if inside else OUTSIDE, sw_if_index=sw_if_index)

    def interfaces(self) -> dict[int, tuple[bool, bool]]:
        """sw_if_index -> (inside, outside)."""
        return {d.sw_if_index: (bool(int(d.flags) & INSIDE), bool(int(d.flags) & OUTSIDE))
                for d in self.conn.dump("nat44_interface_dump")}

    def static_mapping(self, is_add: bool, tag: str, local_ip: str, external_ip: str | None,
                       external_sw_if_index: int | None, protocol: int | None,
                       local_port: int | None, external_port: int | None, vrf: int) -> None:
        # VPP 24.06's v2 handler takes any non-zero external_sw_if_index as "the address of
        # that interface": a mapping on an address sends 0.
        self.conn.call(
            "nat44_add_del_static_mapping_v2", is_add=is_add, match_pool=False,
            flags=ADDR_ONLY if local_port is None else 0, pool_ip_address="0.0.0.0",
            local_ip_address=local_ip, external_ip_address=external_ip or "0.0.0.0",
            protocol=protocol or 0, local_port=local_port or 0,
            external_port=external_port or 0,
            external_sw_if_index=0 if external_sw_if_index is None else external_sw_if_index,
            vrf_id=vrf, tag=tag)

    def static_mappings(self) -> list[StaticMappingDetails]:
        return [StaticMappingDetails(
            tag=d.tag, local_ip=str(d.local_ip_address), external_ip=str(d.external_ip_address),
            external_sw_if_index=None if d.external_sw_if_index == ANY_INDEX
            else int(d.external_sw_if_index),
            protocol=int(d.protocol), local_port=int(d.local_port),
            external_port=int(d.external_port), vrf=int(d.vrf_id),
            addr_only=bool(int(d.flags) & ADDR_ONLY),
        ) for d in self.conn.dump("nat44_static_mapping_dump")]

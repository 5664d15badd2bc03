"""What the dataplane's parts (bonds, tunnels, Linux-CP, SRv6: modules of their own) use of the
dataplane that holds them (`kvmesh.vppemu.state.Dataplane`): declared here, so that those
modules need not import `state`, which imports them."""

from __future__ import annotations

import ipaddress
from typing import Any, Protocol

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

ADMIN_UP = 1  # interface_types.api if_status_flags

# Sub-interface flags (interface_types.api sub_if_flags).
SUB_NO_TAGS = 1
SUB_ONE_TAG = 2
SUB_TWO_TAGS = 4
SUB_DOT1AD = 8
SUB_EXACT_MATCH = 16
SUB_OUTER_VLAN_ID_ANY = 64
SUB_INNER_VLAN_ID_ANY = 128


class Plane(Protocol):
    interfaces: dict[int, Any]
    tables: dict[tuple[bool, int], str]
    fib_indices: dict[tuple[bool, int], int]

    def interface(self, sw_if_index: int, retval: int = ...) -> Any: ...

    def add_ethernet_interface(self, kind: str, name: str, dev_type: str, mac: bytes | None,
                               instance: int = 0) -> Any: ...

    def add_l3_interface(self, kind: str, name: str, dev_type: str, mtu: int,
                         instance: int = 0) -> Any: ...

    def create_tap(self, tap_id: int, mac: bytes | None, rx_ring: int, tx_ring: int,
                   host_if_name: str, host_mtu: int | None, host_namespace: str = "",
                   host_bridge: str = "", flags: int = 0,
                   host_mac: bytes | None = None) -> int: ...

    def delete_tap(self, sw_if_index: int) -> None: ...

    def set_flags(self, sw_if_index: int, flags: int) -> None: ...

    def create_subif(self, sw_if_index: int, sub_id: int, flags: int, outer: int, inner: int, *,
                     vlan_api: bool = False) -> int: ...

    def delete_subif(self, sw_if_index: int) -> None: ...

    def route_entries(self, is_ip6: bool, table_id: int) -> Any: ...

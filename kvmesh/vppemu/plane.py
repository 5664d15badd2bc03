"""What the dataplane's parts (bonds, tunnels, Linux-CP, SRv6: modules of their own) use of the
dataplane that holds them (`kvmesh.vppemu.state.Dataplane`): declared here, so that those
modules need not import `state`, which imports them."""

from __future__ import annotations

import ipaddress
from typing import Any, Protocol

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


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

    def route_entries(self, is_ip6: bool, table_id: int) -> Any: ...

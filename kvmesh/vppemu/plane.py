"""What the dataplane's parts (bonds, tunnels, Linux-CP, SRv6: modules of their own) use of the
dataplane that holds them (`kvmesh.vppemu.state.Dataplane`): declared here, so that those
modules need not import `state`, which imports them."""

from __future__ import annotations

import ipaddress
from typing import Any, Protocol

from kvmesh.vppemu import errors as E
from kvmesh.vppemu.errors import ApiError

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


NO_INTERFACE = 0xFFFFFFFF


def check_path_target(plane: Plane, sw_if_index: int, table_id: int, is_ip6: bool) -> None:
    """fib_api_path_decode's checks of a normal IP path: one through an interface needs the
    interface (NO_MATCHING_INTERFACE), one without resolves its next hop in a table that must
    exist (NO_SUCH_FIB)."""
    if sw_if_index == NO_INTERFACE:
        if (is_ip6, table_id) not in plane.tables:
            raise ApiError(E.NO_SUCH_FIB, f"no table {table_id}")
    elif sw_if_index not in plane.interfaces:
        raise ApiError(E.NO_MATCHING_INTERFACE, f"no interface {sw_if_index}")

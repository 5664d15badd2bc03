"""What every VPP descriptor shares: the API wrappers and the interface metadata map."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from southbound.vpp.binapi import VppApi
from southbound.vpp.errors import MissingInterfaceError
from southbound.vpp.models import OWNER_TAG

INTERFACE_DESCRIPTOR = "vpp-interface"
ADDRESS_DESCRIPTOR = "vpp-interface-address"
UNNUMBERED_DESCRIPTOR = "vpp-unnumbered"
BD_DESCRIPTOR = "vpp-bd"
BD_MEMBER_DESCRIPTOR = "vpp-bd-interface"
ROUTE_DESCRIPTOR = "vpp-route"
VRF_DESCRIPTOR = "vpp-vrf"
NEIGHBOR_DESCRIPTOR = "vpp-neighbor"
XCONNECT_DESCRIPTOR = "vpp-xconnect"
L2FIB_DESCRIPTOR = "vpp-l2fib"


@dataclass(frozen=True)
class InterfaceMeta:
    """Metadata of a configured VPP interface (the `vpp-interface` metadata map, by name)."""

    sw_if_index: int
    type: str


def owner_tag(name: str) -> str:
    """The VPP tag marking an object as kvmesh's: interfaces and bridge domains carry it."""
    return f"{OWNER_TAG}{name}"


def owned_name(tag: str) -> str | None:
    """The kvmesh name in a tag, or None for objects kvmesh does not own."""
    if tag.startswith(OWNER_TAG) and len(tag) > len(OWNER_TAG):
        return tag[len(OWNER_TAG) :]
    return None


@dataclass
class MemifSocket:
    socket_id: int
    users: set[str]
    owned: bool


class Context:
    def __init__(self, api: VppApi) -> None:
        self.api = api
        self.interfaces: Mapping[str, InterfaceMeta] = {}
        # sw_if_index -> kvmesh name, kept by the interface descriptor (for events)
        self.names_by_index: dict[int, str] = {}
        # bridge domain name -> bd_id, kept by the bridge-domain descriptor (for L2 FIB entries)
        self.bd_ids: dict[str, int] = {}
        # interface -> what holds it in L2 mode ("bridge domain <name>" or "cross-connect to
        # <tx>"): an interface is in a bridge domain or a cross-connect, never both
        self.l2_users: dict[str, str] = {}
        # memif socket files by path: VPP's socket id, the kvmesh memifs using it, and whether
        # kvmesh registered it (only those are removed, with their last memif)
        self.memif_sockets: dict[str, MemifSocket] = {}

    def sw_if_index(self, name: str) -> int:
        meta = self.interfaces.get(name)
        if meta is None:
            raise MissingInterfaceError(
                f"VPP interface {name!r} is not configured (no sw_if_index)"
            )
        return meta.sw_if_index

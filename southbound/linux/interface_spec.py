"""One Linux interface as kvmesh understands it once validated and normalised (`InterfaceSpec`):
what the model (southbound/linux/models/interface.py) makes of a value and what its descriptors,
the existing-link one included (southbound/linux/existing.py), work from. Plain data, in a module
of its own so that neither of those imports the other."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class VethSpec:
    peer: str


@dataclass(frozen=True, slots=True)
class VxlanSpec:
    vni: int
    local: str | None
    remote: str | None
    port: int
    device: str | None


@dataclass(frozen=True, slots=True)
class MacvlanSpec:
    parent: str
    mode: str


@dataclass(frozen=True, slots=True)
class InterfaceSpec:
    """One interface as kvmesh understands it (validated, normalised)."""

    name: str
    type: str
    enabled: bool = True
    mtu: int | None = None
    mac: str | None = None
    addresses: tuple[str, ...] = ()
    master: str | None = None
    veth: VethSpec | None = None
    vxlan: VxlanSpec | None = None
    macvlan: MacvlanSpec | None = None

    def to_value(self) -> dict[str, Any]:
        value: dict[str, Any] = {
            "type": self.type,
            "enabled": self.enabled,
            "mtu": self.mtu,
            "mac": self.mac,
            "addresses": list(self.addresses),
            "master": self.master,
        }
        if self.veth is not None:
            value["veth"] = {"peer": self.veth.peer}
        elif self.vxlan is not None:
            value["vxlan"] = {
                "vni": self.vxlan.vni,
                "local": self.vxlan.local,
                "remote": self.vxlan.remote,
                "port": self.vxlan.port,
                "device": self.vxlan.device,
            }
        elif self.macvlan is not None:
            value["macvlan"] = {"parent": self.macvlan.parent, "mode": self.macvlan.mode}
        elif self.type == "tap":
            value["tap"] = {}
        return value

    @property
    def lower_device(self) -> str | None:
        """The link this one is stacked on (vxlan device, macvlan parent), if any."""
        if self.vxlan is not None:
            return self.vxlan.device
        if self.macvlan is not None:
            return self.macvlan.parent
        return None

    def creation_identity(self) -> tuple[Any, ...]:
        """What netlink cannot change in place: a difference here means delete + create."""
        return (self.type, self.veth, self.vxlan, self.macvlan)

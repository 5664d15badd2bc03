"""The canonical form of ``linux/interface/<name>`` values.

Values arrive as plain dicts (decoded JSON/msgpack). ``parse_interface`` validates them with the
model (``southbound.linux.models.LinuxInterface``) and returns an ``InterfaceSpec``;
``InterfaceSpec.to_value()`` is the canonical dict, the same shape Retrieve reports, so the
scheduler's comparison of desired and actual state is exact.

Defaults: ``enabled`` true; ``addresses`` empty. ``mtu`` and ``mac`` are *unmanaged* when absent:
kvmesh leaves the kernel's choice alone and does not report drift for them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from southbound.linux import keys
from southbound.linux.errors import InvalidValueError
from southbound.linux.models import LinuxInterface, interface_name_problem
from southbound.validation import KEY_FIELD, validate


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


def parse_interface(key: str, value: object) -> InterfaceSpec:
    """Validate an interface value (``models.LinuxInterface``); raise ``InvalidValueError``
    listing every bad field."""
    name = keys.parse_interface_key(key)
    if name is None:
        raise InvalidValueError(key, {KEY_FIELD: "must be 'linux/interface/<name>'"})
    problem = interface_name_problem(name)
    if name == keys.HOST_NAME:
        problem = f"interface name '{keys.HOST_NAME}' is reserved for host links"
    elif problem:
        problem = f"interface name {problem}"
    model = validate(LinuxInterface, key, value, key_problems={KEY_FIELD: problem} if problem
                     else None, context={"name": name}, error=InvalidValueError)
    vxlan = model.vxlan
    return InterfaceSpec(
        name=name, type=model.type, enabled=model.enabled, mtu=model.mtu, mac=model.mac,
        addresses=tuple(model.addresses), master=model.master,
        veth=VethSpec(peer=model.veth.peer) if model.veth is not None else None,
        vxlan=VxlanSpec(vni=vxlan.vni, local=vxlan.local, remote=vxlan.remote, port=vxlan.port,
                        device=vxlan.device) if vxlan is not None else None,
        macvlan=MacvlanSpec(parent=model.macvlan.parent, mode=model.macvlan.mode)
        if model.macvlan is not None else None,
    )


def canonical_interface(key: str, value: Mapping[str, Any]) -> dict[str, Any]:
    """The canonical dict of a valid value (raises ``InvalidValueError`` otherwise)."""
    return parse_interface(key, value).to_value()


"""The interface model: validation and the canonical form of ``linux/interface/<name>`` values.

Values arrive as plain dicts (decoded JSON/msgpack). ``parse_interface`` checks every field and
returns an ``InterfaceSpec``; ``InterfaceSpec.to_value()`` is the canonical dict, the same shape
Retrieve reports, so the scheduler's comparison of desired and actual state is exact.

Defaults: ``enabled`` true; ``addresses`` empty. ``mtu`` and ``mac`` are *unmanaged* when absent:
kvmesh leaves the kernel's choice alone and does not report drift for them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from southbound.linux import keys
from southbound.linux.fields import FieldChecker

INTERFACE_TYPES = ("veth", "bridge", "tap", "vxlan", "macvlan")
MACVLAN_MODES = ("private", "vepa", "bridge", "passthru", "source")
MTU_RANGE = (68, 65535)
VXLAN_DEFAULT_PORT = 4789
TOP_LEVEL_FIELDS = ("type", "enabled", "mtu", "mac", "addresses", "master", *INTERFACE_TYPES)


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
    """Validate an interface value; raise ``InvalidValueError`` listing every bad field."""
    check = FieldChecker(key, value)
    name = keys.parse_interface_key(key)
    if name is None:
        check.fail("(key)", "must be 'linux/interface/<name>'")
        check.raise_if_any()
        raise AssertionError("unreachable")
    name_ok = _check_key_name(check, name)
    check.reject_unknown(TOP_LEVEL_FIELDS)
    kind = check.take_choice("type", INTERFACE_TYPES)
    if kind is None and "type" not in check.errors:
        check.fail("type", f"is required (one of {', '.join(INTERFACE_TYPES)})")
    enabled = check.take_bool("enabled", True)
    mtu = check.take_int("mtu", *MTU_RANGE)
    mac = check.take_mac("mac")
    addresses = check.take_addresses("addresses")
    master = check.take_name("master")
    if master is not None and master == name:
        check.fail("master", "an interface cannot be its own master")
    for other in INTERFACE_TYPES:
        if other != kind and check.value.get(other) is not None:
            check.fail(other, f"only allowed with type '{other}'")
    veth = _parse_veth(check, name) if kind == "veth" else None
    vxlan = _parse_vxlan(check) if kind == "vxlan" else None
    macvlan = _parse_macvlan(check, name) if kind == "macvlan" else None
    if kind == "tap":
        tap = check.take_mapping("tap")
        if tap:
            check.reject_unknown((), where=tap, prefix="tap.")
    check.raise_if_any()
    assert kind is not None and name_ok
    return InterfaceSpec(
        name=name, type=kind, enabled=enabled, mtu=mtu, mac=mac, addresses=tuple(addresses),
        master=master, veth=veth, vxlan=vxlan, macvlan=macvlan,
    )


def _check_key_name(check: FieldChecker, name: str) -> bool:
    if name == keys.HOST_NAME:
        check.fail("(key)", f"interface name '{keys.HOST_NAME}' is reserved for host links")
        return False
    return check.take_name("name", source={"name": name}, field="(key)") is not None


def _parse_veth(check: FieldChecker, name: str) -> VethSpec | None:
    section = check.take_mapping("veth")
    if section is None:
        if "veth" not in check.errors:
            check.fail("veth", "is required for type 'veth': {\"peer\": \"<name>\"}")
        return None
    check.reject_unknown(("peer",), where=section, prefix="veth.")
    peer = check.take_name("peer", source=section, field="veth.peer")
    if peer is None:
        check.fail("veth.peer", "is required")
        return None
    if peer == name:
        check.fail("veth.peer", "must differ from the interface name")
        return None
    if peer == keys.HOST_NAME:
        check.fail("veth.peer", f"interface name '{keys.HOST_NAME}' is reserved for host links")
        return None
    return VethSpec(peer=peer)


def _parse_vxlan(check: FieldChecker) -> VxlanSpec | None:
    section = check.take_mapping("vxlan")
    if section is None:
        if "vxlan" not in check.errors:
            check.fail("vxlan", "is required for type 'vxlan': {\"vni\": <0..16777215>, ...}")
        return None
    check.reject_unknown(("vni", "local", "remote", "port", "device"), where=section,
                         prefix="vxlan.")
    vni = check.take_int("vni", 0, 2**24 - 1, source=section, field="vxlan.vni")
    if vni is None and "vxlan.vni" not in check.errors:
        check.fail("vxlan.vni", "is required")
    local = check.take_ip("local", source=section, field="vxlan.local")
    remote = check.take_ip("remote", source=section, field="vxlan.remote")
    port = check.take_int("port", 1, 65535, source=section, field="vxlan.port")
    device = check.take_name("device", source=section, field="vxlan.device")
    if local is not None and remote is not None and local.version != remote.version:
        check.fail("vxlan.remote", "must be of the same address family as vxlan.local")
    if remote is not None and remote.is_multicast and device is None:
        check.fail("vxlan.device", "is required with a multicast vxlan.remote")
    if local is not None and (local.is_multicast or local.is_unspecified):
        check.fail("vxlan.local", "must be a unicast address")
    if vni is None:
        return None
    return VxlanSpec(
        vni=vni,
        local=str(local) if local is not None else None,
        remote=str(remote) if remote is not None else None,
        port=port if port is not None else VXLAN_DEFAULT_PORT,
        device=device,
    )


def _parse_macvlan(check: FieldChecker, name: str) -> MacvlanSpec | None:
    section = check.take_mapping("macvlan")
    if section is None:
        if "macvlan" not in check.errors:
            check.fail("macvlan", "is required for type 'macvlan': {\"parent\": \"<name>\"}")
        return None
    check.reject_unknown(("parent", "mode"), where=section, prefix="macvlan.")
    parent = check.take_name("parent", source=section, field="macvlan.parent")
    mode = check.take_choice("mode", MACVLAN_MODES, source=section, field="macvlan.mode")
    if parent is None:
        if "macvlan.parent" not in check.errors:
            check.fail("macvlan.parent", "is required")
        return None
    if parent == name:
        check.fail("macvlan.parent", "must differ from the interface name")
        return None
    return MacvlanSpec(parent=parent, mode=mode or "bridge")


def canonical_interface(key: str, value: Mapping[str, Any]) -> dict[str, Any]:
    """The canonical dict of a valid value (raises ``InvalidValueError`` otherwise)."""
    return parse_interface(key, value).to_value()


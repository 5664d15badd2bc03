"""The ``linux/interface/<name>`` model: links of type veth, bridge, tap, vxlan, macvlan.

One module (see ``southbound.modelspec``): the pydantic model (``LinuxInterface``), its canonical
spec (``InterfaceSpec``, what ``parse_interface`` returns and Retrieve reports), the kernel's
view of a kvmesh link (``interface_spec``), the descriptor and ``MODEL``. The derived values
(``address.py``: one per address, ``master.py``: the bridge binding) and the OBTAINED host links
(``host.py``) have their own small descriptors, registered with this model.

* Create makes the link in one netlink request where the kernel allows it (type, group marker,
  state, MTU and MAC together). Addresses and the bridge membership are *derived* values with
  their own descriptors: a bad address or a missing bridge never blocks the link itself.
* veth: each end depends on the other end's key, so the scheduler creates the pair only when
  both ends are configured (the two values form a dependency cycle, created as one unit).
  Whichever end is created first makes the pair; the other end then only sets its own
  attributes. Deleting either end removes the pair (the kernel deletes both ends; the other
  value goes back to PENDING); configuring it again restores both.
* vxlan/macvlan depend on their lower link (``vxlan.device``/``macvlan.parent``), which may be a
  kvmesh interface or a host link (``linux/interface/host/<name>``).
* Update changes state, MTU and MAC in place; a change of type, veth peer or vxlan/macvlan
  parameters needs delete + create (``update_with_recreate``).
* Retrieve reports kvmesh-owned links only (link group marker), shaped like the desired values:
  a field the desired value leaves unset (``mtu``, ``mac``) is reported unset, and IPv6
  link-local addresses the kernel adds by itself are hidden unless desired.

Defaults: ``enabled`` true; ``addresses`` empty. ``mtu`` and ``mac`` are *unmanaged* when absent.
"""

from __future__ import annotations

import errno
import ipaddress
import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

from pydantic import Field, ValidationInfo, model_validator

from scheduler import Dependency, Descriptor, ValueOrigin
from southbound.linux import keys
from southbound.linux.addr import parse_address
from southbound.linux.address import AddressDescriptor
from southbound.linux.context import PluginContext
from southbound.linux.errors import (
    InvalidValueError,
    NetlinkOperationError,
    OwnershipError,
    VxlanTakenError,
    is_retriable_failure,
)
from southbound.linux.existing import ExistingLinks, existing_dependency
from southbound.linux.fields import (
    InterfaceAddresses,
    InterfaceName,
    IPAddress,
    Mac,
    interface_name_problem,
    sort_addresses,
)
from southbound.linux.host import HostAddressDescriptor, HostInterfaceDescriptor
from southbound.linux.interface import NAME, link_dependency
from southbound.linux.interface_spec import InterfaceSpec as InterfaceSpec
from southbound.linux.interface_spec import MacvlanSpec as MacvlanSpec
from southbound.linux.interface_spec import VethSpec as VethSpec
from southbound.linux.interface_spec import VxlanSpec as VxlanSpec
from southbound.linux.master import MasterDescriptor
from southbound.linux.memo import ParseCache
from southbound.linux.records import CreatedLink, Link
from southbound.modelspec import ModelSpec
from southbound.validation import KEY_FIELD, FieldProblems, StrictModel, validate

log = logging.getLogger(__name__)

INTERFACE_TYPES = ("veth", "bridge", "tap", "vxlan", "macvlan")  # each with its section
EXISTING = "existing"  # a link kvmesh did not create and only configures
MACVLAN_MODES = ("private", "vepa", "bridge", "passthru", "source")
VXLAN_DEFAULT_PORT = 4789
Correlate = Sequence[tuple[str, Any, Any]]


# -- model ------------------------------------------------------------------------------------


class VethSection(StrictModel):
    """The other end of a veth pair (configure it as its own ``linux/interface/<peer>``)."""

    peer: InterfaceName = Field(description="name of the other end")


class VxlanSection(StrictModel):
    """A VXLAN tunnel endpoint."""

    vni: int = Field(ge=0, le=2**24 - 1, description="VXLAN network identifier")
    local: IPAddress | None = Field(None, description="local unicast address (unset: any)")
    remote: IPAddress | None = Field(None, description="remote address; multicast needs device")
    port: int = Field(VXLAN_DEFAULT_PORT, ge=1, le=65535, description="UDP destination port")
    device: InterfaceName | None = Field(None, description="lower link the tunnel uses")

    @model_validator(mode="after")
    def _families(self) -> VxlanSection:
        problems = {}
        local = parse_address(self.local) if self.local else None
        remote = parse_address(self.remote) if self.remote else None
        if local is not None and remote is not None and local[0] != remote[0]:
            problems["remote"] = "must be of the same address family as vxlan.local"
        if remote is not None and _is_multicast(remote) and self.device is None:
            problems["device"] = "is required with a multicast vxlan.remote"
        if local is not None and (_is_multicast(local) or not any(local[1])):
            problems["local"] = "must be a unicast address"
        if problems:
            raise FieldProblems(problems)
        return self


def _is_multicast(address: tuple[int, bytes, str]) -> bool:
    version, packed, _text = address
    return (packed[0] & 0xF0) == 0xE0 if version == 4 else packed[0] == 0xFF


class MacvlanSection(StrictModel):
    """A macvlan link on a parent link."""

    parent: InterfaceName = Field(description="the parent link (kvmesh or host)")
    mode: Literal["private", "vepa", "bridge", "passthru", "source"] = Field(
        "bridge", description="macvlan mode")


class TapSection(StrictModel):
    """A tap device (no options yet)."""


class BridgeSection(StrictModel):
    """A Linux bridge (no options yet; members name it as their ``master``)."""


class LinuxInterface(StrictModel):
    """``linux/interface/<name>``: a Linux link kvmesh owns. ``mtu`` and ``mac`` unset (null)
    leave the kernel's choice alone; the section matching ``type`` carries its parameters.
    Type ``existing``: a link kvmesh did not create (e.g. ``eth0``); kvmesh waits for it, sets
    its addresses, MTU, state and master, and on delete removes only what it added (restoring
    the MTU, state and master it found) and never the link."""

    type: Literal["veth", "bridge", "tap", "vxlan", "macvlan", "existing"] = Field(
        description="link type (`existing`: a link kvmesh did not create)")
    enabled: bool = Field(True, description="administratively up")
    mtu: int | None = Field(None, ge=68, le=65535, description="MTU (unset: kernel's choice)")
    mac: Mac | None = Field(None, description="MAC address (unset: kernel's choice)")
    addresses: InterfaceAddresses = Field(
        default_factory=list, description="addresses with prefix length, e.g. 10.0.0.1/24")
    master: InterfaceName | None = Field(None, description="bridge this link is enslaved to")
    veth: VethSection | None = Field(None, description="required with type veth")
    bridge: BridgeSection | None = Field(None, description="optional with type bridge")
    tap: TapSection | None = Field(None, description="optional with type tap")
    vxlan: VxlanSection | None = Field(None, description="required with type vxlan")
    macvlan: MacvlanSection | None = Field(None, description="required with type macvlan")

    @classmethod
    def section_problems(cls, value: Mapping[str, Any]) -> dict[str, str]:
        return {other: f"only allowed with type '{other}'" for other in INTERFACE_TYPES
                if other != value.get("type") and value.get(other) is not None}

    @model_validator(mode="after")
    def _sections(self, info: ValidationInfo) -> LinuxInterface:
        name = (info.context or {}).get("name")
        problems: dict[str, str] = {}
        if self.master is not None and self.master == name:
            problems["master"] = "an interface cannot be its own master"
        problems.update(self.section_problems({"type": self.type, **{
            other: getattr(self, other) for other in INTERFACE_TYPES}}))
        if self.type == "veth":
            if self.veth is None:
                problems["veth"] = "is required for type 'veth': {\"peer\": \"<name>\"}"
            elif self.veth.peer == name:
                problems["veth.peer"] = "must differ from the interface name"
            elif self.veth.peer == keys.HOST_NAME:
                problems["veth.peer"] = f"interface name '{keys.HOST_NAME}' is reserved " \
                                        "for host links"
        if self.type == EXISTING and self.mac is not None:
            problems["mac"] = "not managed for type 'existing' (kvmesh leaves the MAC of a " \
                              "link it did not create alone)"
        if self.type == "vxlan" and self.vxlan is None:
            problems["vxlan"] = "is required for type 'vxlan': {\"vni\": <0..16777215>, ...}"
        if self.type == "macvlan":
            if self.macvlan is None:
                problems["macvlan"] = "is required for type 'macvlan': {\"parent\": \"<name>\"}"
            elif self.macvlan.parent == name:
                problems["macvlan.parent"] = "must differ from the interface name"
        if problems:
            raise FieldProblems(problems)
        return self


# -- canonical spec: southbound/linux/interface_spec.py (existing.py needs it too) ------------


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


# -- the kernel's view -----------------------------------------------------------------------

_UNKNOWN_PEER = "?"
_LINK_LOCAL_STARTS = frozenset({"fe8", "fe9", "fea", "feb"})


def is_auto_link_local(cidr: str) -> bool:
    """IPv6 link-local addresses (fe80::/10) are added by the kernel when a link comes up.

    ``cidr`` is canonical text (lower case, as decoded from the kernel), so the first three hex
    digits decide: fe8, fe9, fea, feb."""
    return cidr[:3] in _LINK_LOCAL_STARTS and ":" in cidr[:5]


def model_type(link: Link) -> str | None:
    """The interface model type of a link, or None when the model has no such type."""
    if link.kind in ("veth", "bridge", "vxlan", "macvlan"):
        return link.kind
    if link.kind == "tun" and link.tap:
        return "tap"
    return None


def interface_spec(link: Link, addresses: Iterable[str], names: Mapping[int, str],
                   desired: InterfaceSpec | None) -> InterfaceSpec | None:
    """The kernel's version of a kvmesh interface, shaped like ``desired`` (see module doc)."""
    kind = model_type(link)
    if kind is None:
        return None
    wanted_addresses = set(desired.addresses) if desired is not None else set()
    reported = [a for a in addresses if not is_auto_link_local(a) or a in wanted_addresses]
    veth = vxlan = macvlan = None
    if kind == "veth":
        peer = names.get(link.link, _UNKNOWN_PEER) if link.link is not None else _UNKNOWN_PEER
        veth = VethSpec(peer=peer)
    elif kind == "vxlan" and link.vxlan is not None:
        info = link.vxlan
        vxlan = VxlanSpec(
            vni=info.vni or 0,
            local=str(ipaddress.ip_address(info.local)) if info.local else None,
            remote=str(ipaddress.ip_address(info.remote)) if info.remote else None,
            port=info.port or 0,
            device=names.get(info.device_index) if info.device_index else None,
        )
    elif kind == "macvlan":
        parent = names.get(link.link, _UNKNOWN_PEER) if link.link is not None else _UNKNOWN_PEER
        macvlan = MacvlanSpec(parent=parent, mode=link.macvlan_mode or "bridge")
    manages_mtu = desired is None or desired.mtu is not None
    manages_mac = desired is None or desired.mac is not None
    return InterfaceSpec(
        name=link.name,
        type=kind,
        enabled=link.up,
        mtu=link.mtu if manages_mtu else None,
        mac=link.mac.lower() if manages_mac and link.mac else None,
        addresses=tuple(sort_addresses(reported)),
        master=names.get(link.master) if link.master is not None else None,
        veth=veth,
        vxlan=vxlan,
        macvlan=macvlan,
    )


# -- descriptor ---------------------------------------------------------------------------


class InterfaceDescriptor:
    name = NAME

    def __init__(self, context: PluginContext) -> None:
        self.ctx = context
        self.specs: ParseCache[InterfaceSpec] = ParseCache(parse_interface)
        self.existing = ExistingLinks(context)
        # veth ends created as the peer of another end, not configured yet: name -> (ifindex,
        # the end that created it). Lets the second end skip the create request.
        self._unconfigured_peers: dict[str, tuple[int, str]] = {}

    # -- key space ----------------------------------------------------------------------------

    @staticmethod
    def key_selector(key: str) -> bool:
        return keys.parse_interface_key(key) is not None

    @staticmethod
    def key_label(key: str) -> str:
        return keys.parse_interface_key(key) or key

    # -- model --------------------------------------------------------------------------------

    def dependencies(self, key: str, value: Any) -> list[Dependency]:
        spec = self.specs.try_get(key, value)
        if spec is None:
            return []
        if spec.type == EXISTING:
            return [existing_dependency(spec.name)]
        result = []
        if spec.veth is not None:
            result.append(Dependency(label=f"veth peer {spec.veth.peer}",
                                     key=keys.interface_key(spec.veth.peer)))
        lower = spec.lower_device
        if lower is not None:
            result.append(link_dependency(f"{spec.type} lower link {lower}", lower))
        return result

    def derived_values(self, key: str, value: Any) -> list[tuple[str, Any]]:
        spec = self.specs.try_get(key, value)
        if spec is None:
            return []
        # On a link kvmesh did not create, only the addresses kvmesh added are removed.
        mark = {"existing": True} if spec.type == EXISTING else {}
        derived: list[tuple[str, Any]] = [
            (keys.address_key(spec.name, cidr), {"interface": spec.name, "address": cidr, **mark})
            for cidr in spec.addresses
        ]
        if spec.master is not None:
            derived.append((keys.master_key(spec.name),
                            {"interface": spec.name, "master": spec.master}))
        return derived

    # -- CRUD ---------------------------------------------------------------------------------

    def create(self, key: str, value: Any) -> dict[str, Any]:
        spec = self.specs.get(key, value)
        if spec.type == EXISTING:
            return {"index": self.existing.create(spec)}
        self.ctx.ownership.claim(spec.name)
        try:
            index = self._create(spec)
        except BaseException:
            self.ctx.ownership.release(spec.name)
            raise
        self.ctx.links.remember(spec.name, index)
        return {"index": index}

    def update(self, key: str, old: Any, new: Any, metadata: Any) -> dict[str, Any]:
        spec = self.specs.get(key, new)
        previous = self.specs.try_get(key, old)
        if spec.type == EXISTING:
            return {"index": self.existing.update(spec)}
        purpose = f"update interface {spec.name}"
        if previous is None or _settable(previous) != _settable(spec):
            self.ctx.links.with_index(spec.name, purpose, lambda i: self._apply_settable(i, spec))
        return {"index": self.ctx.links.require(spec.name, purpose)}

    def update_with_recreate(self, key: str, old: Any, new: Any, metadata: Any) -> bool:
        previous, spec = self.specs.try_get(key, old), self.specs.try_get(key, new)
        if previous is None or spec is None:
            return True
        return previous.creation_identity() != spec.creation_identity()

    def delete(self, key: str, value: Any, metadata: Any) -> None:
        name = keys.parse_interface_key(key) or key
        spec = self.specs.try_get(key, value)
        if spec is not None and spec.type == EXISTING:
            self.existing.delete(spec)  # never the link itself
            self.ctx.links.forget(name)
            return
        try:
            link = self.ctx.client.get_link(name)
            if link is None:
                return
            if link.group != self.ctx.ownership.link_group:
                # Our link is gone and someone else's link has the name now: not ours to delete.
                log.warning("not deleting link %s: it is not owned by kvmesh", name)
                return
            self.ctx.client.delete_link(link.index, f"delete interface {name}")
            if spec is not None and spec.veth is not None:
                # The kernel deleted the other end too.
                self.ctx.links.forget(spec.veth.peer)
                self._forget_peer_of(name)
        finally:
            self.ctx.links.forget(name)
            self._unconfigured_peers.pop(name, None)
            self.ctx.ownership.release(name)

    def retrieve(self, correlate: Correlate) -> list[tuple[str, Any, Any, ValueOrigin]]:
        snapshot = self.ctx.snapshot()
        addresses, names = snapshot.addresses, snapshot.names
        desired: dict[str, InterfaceSpec] = {}
        for key, value, _metadata in correlate:
            spec = self.specs.try_get(key, value)
            if spec is not None:
                desired[spec.name] = spec
        result: list[tuple[str, Any, Any, ValueOrigin]] = []
        for link in snapshot.links:
            if link.group != self.ctx.ownership.link_group:
                wanted = desired.get(link.name)
                if wanted is not None and wanted.type == EXISTING:
                    self._report(result, link, self.existing.observe(link, snapshot, wanted))
                continue
            observed = interface_spec(link, addresses.get(link.index, ()), names,
                                      desired.get(link.name))
            if observed is None:
                continue
            self.ctx.ownership.claim(link.name)
            self._report(result, link, observed)
        return result

    def _report(self, result: list[tuple[str, Any, Any, ValueOrigin]], link: Link,
                observed: InterfaceSpec) -> None:
        key = keys.interface_key(link.name)
        value = observed.to_value()
        self.specs.put(key, value, observed)  # spares the scheduler's calls a re-parse
        result.append((key, value, {"index": link.index}, ValueOrigin.FROM_NB))

    # -- netlink ------------------------------------------------------------------------------

    def _base_attributes(self, spec: InterfaceSpec) -> dict[str, Any]:
        attributes: dict[str, Any] = {
            "group": self.ctx.ownership.link_group,
            "state": "up" if spec.enabled else "down",
        }
        if spec.mtu is not None:
            attributes["mtu"] = spec.mtu
        if spec.mac is not None:
            attributes["address"] = spec.mac
        return attributes

    def _apply_settable(self, index: int, spec: InterfaceSpec) -> None:
        attributes = self._base_attributes(spec)
        self.ctx.client.set_link(index, f"configure interface {spec.name}", **attributes)

    def _create(self, spec: InterfaceSpec) -> int:
        operation = f"create interface {spec.name}"
        if spec.veth is not None:
            index = self._configure_unconfigured_peer(spec)
            if index is not None:
                return index
        if spec.type == "tap":
            return self._create_tap(spec)
        arguments = self._base_attributes(spec)
        kind = spec.type
        if spec.veth is not None:
            arguments["peer"] = {"ifname": spec.veth.peer,
                                 "group": self.ctx.ownership.link_group}
        elif spec.vxlan is not None:
            arguments.update(self._vxlan_arguments(spec))
        elif spec.macvlan is not None:
            parent = self.ctx.links.require(spec.macvlan.parent, operation)
            arguments.update(macvlan_mode=spec.macvlan.mode, link=parent)
        try:
            created = self.ctx.client.create_link(spec.name, kind, **arguments)
        except NetlinkOperationError as exc:
            if exc.code != errno.EEXIST:
                raise
            return self._adopt(spec)
        if created is None:  # nothing echoed: look it up
            found = self.ctx.client.get_link(spec.name)
            if found is None:
                raise NetlinkOperationError(operation, errno.ENODEV,
                                            "the link vanished right after creation")
            created = CreatedLink(found.index, found.link)
        if spec.veth is not None and created.peer is not None:
            self._unconfigured_peers[spec.veth.peer] = (created.peer, spec.name)
            self.ctx.links.remember(spec.veth.peer, created.peer)
        return created.index

    def _configure_unconfigured_peer(self, spec: InterfaceSpec) -> int | None:
        assert spec.veth is not None
        known = self._unconfigured_peers.pop(spec.name, None)
        if known is None or known[1] != spec.veth.peer:
            return None
        try:
            self._apply_settable(known[0], spec)
        except NetlinkOperationError as exc:
            if exc.code != errno.ENODEV:
                raise
            return None  # the pair went away meanwhile: create it again
        return known[0]

    def _vxlan_arguments(self, spec: InterfaceSpec) -> dict[str, Any]:
        vxlan = spec.vxlan
        assert vxlan is not None
        arguments: dict[str, Any] = {"vxlan_id": vxlan.vni, "vxlan_port": vxlan.port}
        six = ":" in (vxlan.local or vxlan.remote or "")
        if vxlan.local is not None:
            arguments["vxlan_local6" if six else "vxlan_local"] = vxlan.local
        if vxlan.remote is not None:
            arguments["vxlan_group6" if six else "vxlan_group"] = vxlan.remote
        if vxlan.device is not None:
            arguments["vxlan_link"] = self.ctx.links.require(
                vxlan.device, f"create interface {spec.name}")
        return arguments

    def _create_tap(self, spec: InterfaceSpec) -> int:
        # Taps are made by ioctl (TUNSETIFF), which attaches to an existing persistent tap of
        # the same name instead of failing: check first, so a host tap is never taken over.
        if self.ctx.client.get_link(spec.name) is not None:
            return self._adopt(spec)
        self.ctx.client.create_link(spec.name, "tuntap", mode="tap")
        link = self.ctx.client.get_link(spec.name)
        if link is None:
            raise NetlinkOperationError(f"create interface {spec.name}", errno.ENODEV,
                                        "the tap vanished right after creation")
        try:
            self._apply_settable(link.index, spec)
        except BaseException:
            self.ctx.client.delete_link(link.index, f"undo create of tap {spec.name}")
            raise
        return link.index

    def _adopt(self, spec: InterfaceSpec) -> int:
        """The name exists: accept it if it is kvmesh's own link of the same kind, else fail."""
        operation = f"create interface {spec.name}"
        link = self.ctx.client.get_link(spec.name)
        if link is None and spec.vxlan is not None:  # the name is free: the VNI/port is not
            raise VxlanTakenError(operation, spec.vxlan.vni, spec.vxlan.port, [
                other.name for other in self.ctx.client.dump_links() if other.vxlan is not None
                and (other.vxlan.vni, other.vxlan.port) == (spec.vxlan.vni, spec.vxlan.port)])
        if link is None:
            raise NetlinkOperationError(operation, errno.EEXIST,
                                        "the name is taken (the link vanished meanwhile)",
                                        retriable=True)
        if link.group != self.ctx.ownership.link_group:
            raise OwnershipError(operation, f"a link named {spec.name!r} already exists and "
                                            "is not owned by kvmesh")
        if model_type(link) != spec.type or not self._same_identity(link, spec):
            raise OwnershipError(operation, f"kvmesh link {spec.name!r} exists with different "
                                            "creation parameters (type, peer or tunnel)")
        self._apply_settable(link.index, spec)
        return link.index

    def _same_identity(self, link: Link, spec: InterfaceSpec) -> bool:
        if spec.veth is None and spec.vxlan is None and spec.macvlan is None:
            return True
        names = {other.index: other.name for other in self.ctx.client.dump_links()}
        observed = interface_spec(link, (), names, spec)
        return observed is not None and observed.creation_identity() == spec.creation_identity()

    def _forget_peer_of(self, name: str) -> None:
        for peer, (_index, creator) in list(self._unconfigured_peers.items()):
            if creator == name:
                self._unconfigured_peers.pop(peer, None)


def _settable(spec: InterfaceSpec) -> tuple[Any, ...]:
    return (spec.enabled, spec.mtu, spec.mac)


# -- registration ---------------------------------------------------------------------------


def descriptors(context: PluginContext) -> list[Descriptor]:
    """Host links first (their Retrieve takes the dump the others reuse), then the interfaces
    and their derived addresses and bridge bindings."""
    retriable = is_retriable_failure
    hosts, host_addresses = HostInterfaceDescriptor(context), HostAddressDescriptor()
    interfaces = InterfaceDescriptor(context)
    addresses, masters = AddressDescriptor(context), MasterDescriptor(context)
    return [
        Descriptor(
            name=hosts.name, key_selector=hosts.key_selector, key_label=hosts.key_label,
            validate=hosts.validate, retrieve=hosts.retrieve,
            derived_values=hosts.derived_values, is_retriable_failure=retriable,
        ),
        Descriptor(name=host_addresses.name, key_selector=host_addresses.key_selector),
        Descriptor(
            name=interfaces.name, key_selector=interfaces.key_selector,
            key_label=interfaces.key_label, validate=interfaces.specs.validate,
            create=interfaces.create, delete=interfaces.delete, update=interfaces.update,
            update_with_recreate=interfaces.update_with_recreate,
            retrieve=interfaces.retrieve, is_retriable_failure=retriable,
            derived_values=interfaces.derived_values,
            dependencies=interfaces.dependencies,
            value_comparator=interfaces.specs.equivalent, with_metadata=True,
            retrieve_dependencies=(hosts.name,),
        ),
        Descriptor(
            name=addresses.name, key_selector=addresses.key_selector,
            create=addresses.create, delete=addresses.delete, is_retriable_failure=retriable,
        ),
        Descriptor(
            name=masters.name, key_selector=masters.key_selector,
            create=masters.create, update=masters.update,
            delete=masters.delete, dependencies=masters.dependencies,
            is_retriable_failure=retriable,
        ),
    ]


MODEL: ModelSpec[PluginContext] = ModelSpec(
    "linux/interface", "linux/interface/<name>",
    re.compile(r"linux/interface/(?!host/)[^/]+"), LinuxInterface, parse_interface,
    descriptors=descriptors,
)

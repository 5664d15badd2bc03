"""Descriptor of ``linux/interface/<name>``: links of type veth, bridge, tap, vxlan, macvlan.

* Create makes the link in one netlink request where the kernel allows it (type, group marker,
  state, MTU and MAC together). Addresses and the bridge membership are *derived* values with
  their own descriptors (``address.py``, ``master.py``): a bad address or a missing bridge never
  blocks the link itself.
* veth: each end depends on the other end's key, so the scheduler creates the pair only when
  both ends are configured (the two values form a dependency cycle, created as one unit).
  Whichever end is created first makes the pair; the other end then only sets its own
  attributes. Deleting either end removes the pair (the kernel deletes both ends; the other
  value goes back to PENDING); configuring it again restores both.
* vxlan/macvlan depend on their lower link (``vxlan.device``/``macvlan.parent``), which may be a
  kvmesh interface or a host link (``linux/interface/host/<name>``).
* Update changes state, MTU and MAC in place; a change of type, veth peer or vxlan/macvlan
  parameters needs delete + create (``update_with_recreate``).
* Retrieve reports kvmesh-owned links only (link group marker), shaped like the desired values.
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Sequence
from typing import Any

from scheduler import Dependency, ValueOrigin
from southbound.linux import keys
from southbound.linux.context import PluginContext
from southbound.linux.errors import NetlinkOperationError, OwnershipError, VxlanTakenError
from southbound.linux.interface_model import InterfaceSpec, parse_interface
from southbound.linux.memo import ParseCache
from southbound.linux.netlink import CreatedLink
from southbound.linux.observe import interface_spec, model_type
from southbound.linux.records import Link

log = logging.getLogger(__name__)

NAME = "linux-interface"
Correlate = Sequence[tuple[str, Any, Any]]


def link_dependency(label: str, name: str) -> Dependency:
    """Satisfied by a kvmesh interface or a host link of that name."""
    wanted = (keys.interface_key(name), keys.host_key(name))
    return Dependency(label=label, any_of=lambda key: key in wanted, key_prefixes=wanted)


class InterfaceDescriptor:
    name = NAME

    def __init__(self, context: PluginContext) -> None:
        self.ctx = context
        self.specs: ParseCache[InterfaceSpec] = ParseCache(parse_interface)
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
        derived: list[tuple[str, Any]] = [
            (keys.address_key(spec.name, cidr), {"interface": spec.name, "address": cidr})
            for cidr in spec.addresses
        ]
        if spec.master is not None:
            derived.append((keys.master_key(spec.name),
                            {"interface": spec.name, "master": spec.master}))
        return derived

    # -- CRUD ---------------------------------------------------------------------------------

    def create(self, key: str, value: Any) -> dict[str, Any]:
        spec = self.specs.get(key, value)
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
        result = []
        for link in snapshot.links:
            if link.group != self.ctx.ownership.link_group:
                continue
            observed = interface_spec(link, addresses.get(link.index, ()), names,
                                      desired.get(link.name))
            if observed is None:
                continue
            self.ctx.ownership.claim(link.name)
            key = keys.interface_key(link.name)
            value = observed.to_value()
            self.specs.put(key, value, observed)  # spares the scheduler's calls a re-parse
            result.append((key, value, {"index": link.index}, ValueOrigin.FROM_NB))
        return result

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

"""Links kvmesh did not create but configures: ``linux/interface/<name>`` with ``"type":
"existing"`` (e.g. the node's ``eth0``). The interface descriptor hands such values here.

* The value depends on the OBTAINED host link ``linux/interface/host/<name>``: it waits
  (PENDING) until the link exists, and goes back to PENDING when the link goes.
* Create records what the link had (admin state, MTU, master), then sets the state and the MTU
  the value asks for. It never sets the link group (the link stays a host link: kvmesh does not
  own it) nor the MAC.
* Addresses and the bridge binding are the usual derived values; the addresses kvmesh adds carry
  its address protocol, and only those are ever removed (see ``address.py``).
* Delete never deletes the link: it puts back the state, MTU and master recorded at create.
  The record lives in the agent's memory: after an agent restart kvmesh no longer knows the
  originals and leaves state, MTU and master as they are (still removing only its addresses).
* Retrieve reports the link shaped like the desired value: the addresses it wants or that
  kvmesh added (never the link's other addresses), MTU and master only when managed.
"""

from __future__ import annotations

import dataclasses
import errno
import logging
import threading
from typing import TYPE_CHECKING, Any

from scheduler import Dependency
from southbound.linux import keys
from southbound.linux.context import PluginContext, Snapshot
from southbound.linux.errors import NetlinkOperationError, OwnershipError
from southbound.linux.fields import sort_addresses
from southbound.linux.records import Link

if TYPE_CHECKING:
    from southbound.linux.interface_spec import InterfaceSpec

log = logging.getLogger(__name__)


def existing_dependency(name: str) -> Dependency:
    return Dependency(label=f"existing link {name}", key=keys.host_key(name))


@dataclasses.dataclass(frozen=True)
class Original:
    """What an existing link had before kvmesh configured it."""

    enabled: bool
    mtu: int
    master: str | None


class ExistingLinks:
    def __init__(self, context: PluginContext) -> None:
        self.ctx = context
        self._originals: dict[str, Original] = {}
        self._lock = threading.Lock()

    def create(self, spec: InterfaceSpec) -> int:
        operation = f"configure existing link {spec.name}"
        link = self._require(spec.name, operation)
        if link.group == self.ctx.ownership.link_group:
            raise OwnershipError(operation, f"{spec.name!r} is a link kvmesh created, not an "
                                            "existing one")
        master = self._name_of(link.master)
        with self._lock:
            self._originals[spec.name] = Original(link.up, link.mtu, master)
        self.ctx.links.remember(spec.name, link.index)
        self._apply(link, spec, operation)
        return link.index

    def update(self, spec: InterfaceSpec) -> int:
        operation = f"configure existing link {spec.name}"
        link = self._require(spec.name, operation)
        self._apply(link, spec, operation)
        return link.index

    def delete(self, spec: InterfaceSpec) -> None:
        with self._lock:
            original = self._originals.pop(spec.name, None)
        link = self.ctx.client.get_link(spec.name)
        if link is None or link.group == self.ctx.ownership.link_group:
            return  # gone, or no longer the link kvmesh configured
        if original is None:
            log.info("existing link %s: its original state, MTU and master are unknown (the "
                     "agent restarted); left as they are", spec.name)
            return
        attributes: dict[str, Any] = {}
        if link.up != original.enabled:
            attributes["state"] = "up" if original.enabled else "down"
        if spec.mtu is not None and link.mtu != original.mtu:
            attributes["mtu"] = original.mtu
        if spec.master is not None and self._name_of(link.master) != original.master:
            bridge = self.ctx.links.lookup(original.master) if original.master else 0
            if bridge is not None:
                attributes["master"] = bridge
        if attributes:
            self.ctx.client.set_link(link.index, f"restore existing link {spec.name}",
                                     **attributes)

    def observe(self, link: Link, snapshot: Snapshot, desired: InterfaceSpec) -> InterfaceSpec:
        """The link as the kernel has it, shaped like ``desired`` (see the module doc)."""
        wanted = set(desired.addresses)
        reported = [cidr for cidr in snapshot.addresses.get(link.index, ())
                    if cidr in wanted or (link.index, cidr) in snapshot.marked]
        master = snapshot.names.get(link.master) if link.master is not None else None
        return dataclasses.replace(
            desired,
            enabled=link.up,
            mtu=link.mtu if desired.mtu is not None else None,
            addresses=tuple(sort_addresses(reported)),
            master=master if desired.master is not None else None,
        )

    def _apply(self, link: Link, spec: InterfaceSpec, operation: str) -> None:
        attributes: dict[str, Any] = {}
        if link.up != spec.enabled:
            attributes["state"] = "up" if spec.enabled else "down"
        if spec.mtu is not None and link.mtu != spec.mtu:
            attributes["mtu"] = spec.mtu
        if attributes:
            self.ctx.client.set_link(link.index, operation, **attributes)

    def _require(self, name: str, operation: str) -> Link:
        link = self.ctx.client.get_link(name)
        if link is None:  # retriable: the link may be on its way (the watcher reports it)
            raise NetlinkOperationError(operation, errno.ENODEV, f"link {name!r} does not "
                                        "exist", retriable=True)
        return link

    def _name_of(self, index: int | None) -> str | None:
        if index is None:
            return None
        link = self.ctx.client.get_link_by_index(index)
        return link.name if link is not None else None

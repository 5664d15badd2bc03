"""The VPP southbound plugin: the connection, the descriptors, interface events."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from scheduler import Descriptor, KVScheduler
from southbound.plugin_api import ReconciliationStage
from southbound.vpp.address import address_descriptor, unnumbered_descriptor
from southbound.vpp.binapi import ADMIN_UP, LINK_UP, VppApi
from southbound.vpp.bridge_domain import BridgeDomainDescriptor, bd_member_descriptor
from southbound.vpp.connection import VppConnection
from southbound.vpp.context import (
    BD_DESCRIPTOR,
    BD_MEMBER_DESCRIPTOR,
    INTERFACE_DESCRIPTOR,
    ROUTE_DESCRIPTOR,
    Context,
)
from southbound.vpp.interface import InterfaceDescriptor
from southbound.vpp.models import acl, nat44_interface
from southbound.vpp.registry import REGISTRY
from southbound.vpp.route import RouteDescriptor

log = logging.getLogger("southbound.vpp")

#: The reconciliation stage of each VPP descriptor that is not reconciled last
#: (``ReconciliationStage.OTHER``): interfaces and what binds to them first, then bridge
#: domains, then routes.
STAGES: Mapping[str, ReconciliationStage] = {
    INTERFACE_DESCRIPTOR: ReconciliationStage.INTERFACES,
    BD_MEMBER_DESCRIPTOR: ReconciliationStage.INTERFACES,
    acl.BINDING_DESCRIPTOR: ReconciliationStage.INTERFACES,
    nat44_interface.DESCRIPTOR: ReconciliationStage.INTERFACES,
    BD_DESCRIPTOR: ReconciliationStage.L2_DOMAINS,
    ROUTE_DESCRIPTOR: ReconciliationStage.ROUTES,
}


@dataclass(frozen=True)
class InterfaceEvent:
    """An `sw_interface_event` from VPP, with the kvmesh name when kvmesh owns the interface."""

    sw_if_index: int
    name: str | None
    admin_up: bool
    link_up: bool
    deleted: bool


class VppPlugin:
    """What `southbound.vpp.register` returns (a ``southbound.plugin_api.SouthboundPlugin``).
    `close()` disconnects and stops reconnecting."""

    def __init__(self, scheduler: KVScheduler, connection: VppConnection) -> None:
        self.scheduler = scheduler
        self.connection = connection
        self.api = VppApi(connection)
        self.ctx = Context(self.api)
        self._event_callbacks: list[Callable[[InterfaceEvent], None]] = []
        self.link_state: dict[str, InterfaceEvent] = {}
        self._registered: list[str] = []  # descriptor names, in registration order
        connection.on_event(self._on_vpp_event)

    def register_descriptors(self) -> None:
        self._register(InterfaceDescriptor(self.ctx).descriptor())
        self.ctx.interfaces = self.scheduler.get_metadata_map(INTERFACE_DESCRIPTOR)
        self._register(address_descriptor(self.ctx))
        self._register(unnumbered_descriptor(self.ctx))
        self._register(BridgeDomainDescriptor(self.ctx).descriptor())
        self._register(bd_member_descriptor(self.ctx))
        self._register(RouteDescriptor(self.ctx).descriptor())
        for descriptor in REGISTRY.descriptors(self.ctx):
            self._register(descriptor)

    def _register(self, descriptor: Descriptor) -> None:
        self.scheduler.register_descriptor(descriptor)
        self._registered.append(descriptor.name)

    def descriptor_stages(self) -> dict[str, ReconciliationStage]:
        return {name: STAGES.get(name, ReconciliationStage.OTHER) for name in self._registered}

    @property
    def connected(self) -> bool:
        return self.connection.connected

    def wait_connected(self, timeout: float | None = None) -> bool:
        return self.connection.wait_connected(timeout)

    def on_connect(self, callback: Callable[[], None]) -> None:
        """Called after every reconnection (e.g. VPP restarted: trigger a full resync)."""
        self.connection.on_connect(callback)

    def on_disconnect(self, callback: Callable[[], None]) -> None:
        """Called when the connection to VPP is lost."""
        self.connection.on_disconnect(callback)

    def reconnect(self, hold_off: float = 0.0) -> None:
        """Drop the connection and reconnect after `hold_off` seconds (the reconciliation
        framework's DISCONNECT); `on_disconnect` then `on_connect` callbacks run."""
        self.connection.drop(hold_off)

    def on_drift(self, callback: Callable[[], None]) -> None:
        """Called when VPP deleted one of kvmesh's interfaces (its own or an operator's doing):
        the scheduler is not told of it by itself."""
        self.on_interface_event(lambda event: callback() if event.deleted and event.name
                                else None)

    def on_interface_event(self, callback: Callable[[InterfaceEvent], None]) -> None:
        """Called (in a dedicated thread) for every `sw_interface_event`."""
        self._event_callbacks.append(callback)

    def stats(self) -> dict[str, Any]:
        return {"connected": self.connected, **self.connection.counters}

    def close(self) -> None:
        self.connection.close()

    def _on_vpp_event(self, name: str, msg: Any) -> None:
        if name != "sw_interface_event":
            return
        owner = self.ctx.names_by_index.get(msg.sw_if_index)
        event = InterfaceEvent(
            sw_if_index=msg.sw_if_index,
            name=owner,
            admin_up=bool(msg.flags & ADMIN_UP),
            link_up=bool(msg.flags & LINK_UP),
            deleted=bool(msg.deleted),
        )
        if owner is not None:
            if event.deleted:
                self.link_state.pop(owner, None)
                log.warning("VPP deleted interface %s (sw_if_index %d)", owner, msg.sw_if_index)
            else:
                self.link_state[owner] = event
        for callback in list(self._event_callbacks):
            try:
                callback(event)
            except Exception:
                log.exception("interface event callback %r failed", callback)

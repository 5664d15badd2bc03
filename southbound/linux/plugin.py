"""The Linux plugin: wires the descriptors and the watcher of one namespace to a scheduler."""

from __future__ import annotations

import logging
import threading
from typing import Any

from scheduler import Descriptor, KVScheduler, SchedulerClosedError
from southbound.linux.address import AddressDescriptor
from southbound.linux.context import (
    KVMESH_LINK_GROUP,
    KVMESH_ROUTE_PROTO,
    Ownership,
    PluginContext,
)
from southbound.linux.errors import is_retriable_failure
from southbound.linux.host import HostAddressDescriptor, HostInterfaceDescriptor
from southbound.linux.interface import InterfaceDescriptor
from southbound.linux.master import MasterDescriptor
from southbound.linux.netlink import NetlinkClient
from southbound.linux.registry import REGISTRY
from southbound.linux.route import RouteDescriptor
from southbound.linux.watcher import HostInterfaceWatcher

log = logging.getLogger(__name__)


class LinuxPlugin:
    """Linux networking of one namespace as scheduler descriptors, plus the host-link watcher.

    Use ``register(scheduler, netns)``; ``close()`` stops the watcher and closes the netlink
    handles (the descriptors stay registered: the scheduler has no unregister)."""

    def __init__(self, scheduler: KVScheduler, netns: str | None = None, *,
                 link_group: int = KVMESH_LINK_GROUP, route_proto: int = KVMESH_ROUTE_PROTO,
                 watch: bool = True, watcher_timeout: float = 30.0,
                 state_dir: str | None = None) -> None:
        self.scheduler = scheduler
        self.netns = netns
        self.ownership = Ownership(link_group, route_proto)
        self.client = NetlinkClient(netns)  # raises NamespaceNotFoundError
        self.context = PluginContext(self.client, self.ownership, state_dir)
        self.interfaces = InterfaceDescriptor(self.context)
        self.addresses = AddressDescriptor(self.context)
        self.masters = MasterDescriptor(self.context)
        self.routes = RouteDescriptor(self.context)
        self.hosts = HostInterfaceDescriptor(self.context)
        self.host_addresses = HostAddressDescriptor()
        self._closed = False
        self._close_lock = threading.Lock()
        self.watcher: HostInterfaceWatcher | None = None
        try:
            for descriptor in self.descriptors():
                scheduler.register_descriptor(descriptor)
            if watch:
                self.watcher = HostInterfaceWatcher(netns, self.ownership, self._notify)
                self.watcher.start(timeout=watcher_timeout)
        except BaseException:
            self.close()
            raise

    def descriptors(self) -> list[Descriptor]:
        retriable = is_retriable_failure
        interfaces, routes, hosts = self.interfaces, self.routes, self.hosts
        return [
            Descriptor(
                name=hosts.name, key_selector=hosts.key_selector, key_label=hosts.key_label,
                validate=hosts.validate, retrieve=hosts.retrieve,
                derived_values=hosts.derived_values, is_retriable_failure=retriable,
            ),
            Descriptor(name=self.host_addresses.name,
                       key_selector=self.host_addresses.key_selector),
            Descriptor(
                name=interfaces.name, key_selector=interfaces.key_selector,
                key_label=interfaces.key_label, validate=interfaces.specs.validate,
                create=interfaces.create, delete=interfaces.delete, update=interfaces.update,
                update_with_recreate=interfaces.update_with_recreate,
                retrieve=interfaces.retrieve, is_retriable_failure=retriable,
                derived_values=interfaces.derived_values,
                dependencies=interfaces.dependencies,
                value_comparator=interfaces.specs.equivalent, with_metadata=True,
                # Host links first: their Retrieve takes the dump the others reuse.
                retrieve_dependencies=(hosts.name,),
            ),
            Descriptor(
                name=self.addresses.name, key_selector=self.addresses.key_selector,
                create=self.addresses.create, delete=self.addresses.delete,
                is_retriable_failure=retriable,
            ),
            Descriptor(
                name=self.masters.name, key_selector=self.masters.key_selector,
                create=self.masters.create, update=self.masters.update,
                delete=self.masters.delete, dependencies=self.masters.dependencies,
                is_retriable_failure=retriable,
            ),
            Descriptor(
                name=routes.name, key_selector=routes.key_selector, validate=routes.specs.validate,
                create=routes.create, delete=routes.delete, update=routes.update,
                update_with_recreate=routes.update_with_recreate, retrieve=routes.retrieve,
                dependencies=routes.dependencies, value_comparator=routes.specs.equivalent,
                is_retriable_failure=retriable, retrieve_dependencies=(interfaces.name,),
            ),
            *REGISTRY.descriptors(self.context),
        ]

    def _notify(self, key: str, value: dict[str, Any] | None) -> None:
        try:
            self.scheduler.push_sb_notification(key, value)
        except SchedulerClosedError:
            # Shutting down in the other order (scheduler first): nothing left to tell.
            log.debug("scheduler closed: notification of %s dropped", key)

    def stats(self) -> dict[str, int]:
        """Counters for monitoring (netlink calls and errors, watcher activity)."""
        watcher = self.watcher
        return {
            "netlink_calls": self.client.calls,
            "netlink_errors": self.client.errors,
            "watcher_events": watcher.events if watcher else 0,
            "watcher_notifications": watcher.notifications if watcher else 0,
            "watcher_notify_errors": watcher.notify_errors if watcher else 0,
            "watcher_resyncs": watcher.resyncs if watcher else 0,
            "watcher_failures": watcher.failures if watcher else 0,
        }

    def close(self) -> None:
        """Stop the watcher and close netlink handles. Idempotent."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        if self.watcher is not None:
            self.watcher.close()
        self.client.close()


def register(scheduler: KVScheduler, netns: str | None = None, **options: Any) -> LinuxPlugin:
    """Register the Linux descriptors for namespace ``netns`` (None: the caller's own) on
    ``scheduler``, start the host-link watcher and return the plugin (call ``close()`` when done).

    Raises ``NamespaceNotFoundError`` when the namespace does not exist: kvmesh never creates
    one. ``options``: ``link_group``/``route_proto`` (ownership markers), ``watch`` (False: no
    watcher thread), ``watcher_timeout`` (seconds to wait for the initial host-link dump),
    ``state_dir`` (where the sysctls' originals are kept across restarts; default
    ``/var/lib/kvmesh/linux``)."""
    return LinuxPlugin(scheduler, netns, **options)

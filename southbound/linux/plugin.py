"""The Linux plugin: registers the descriptors of every Linux model (``southbound.linux.registry``)
and runs the host-link watcher of one namespace."""

from __future__ import annotations

import logging
import threading
from typing import Any

from scheduler import Descriptor, KVScheduler, SchedulerClosedError
from southbound.linux.context import (
    KVMESH_LINK_GROUP,
    KVMESH_ROUTE_PROTO,
    Ownership,
    PluginContext,
)
from southbound.linux.netlink import NetlinkClient
from southbound.linux.registry import REGISTRY
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
        """Every descriptor of every Linux model (``southbound.linux.registry``)."""
        return REGISTRY.descriptors(self.context)

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

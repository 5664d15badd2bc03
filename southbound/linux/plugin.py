"""The Linux plugin: registers the descriptors of every Linux model (``southbound.linux.registry``)
and runs the host-link watcher of one namespace."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from scheduler import Descriptor, KVScheduler, SchedulerClosedError
from southbound.linux import host, interface
from southbound.linux.context import (
    KVMESH_LINK_GROUP,
    KVMESH_ROUTE_PROTO,
    Ownership,
    PluginContext,
)
from southbound.linux.models import route
from southbound.linux.netlink import NetlinkClient
from southbound.linux.registry import REGISTRY
from southbound.linux.watcher import HostInterfaceWatcher
from southbound.plugin_api import ReconciliationStage

log = logging.getLogger(__name__)

#: The reconciliation stage of each Linux descriptor that is not reconciled last
#: (``ReconciliationStage.OTHER``: addresses, masters, neighbors, rules, sysctls, nftables).
STAGES: Mapping[str, ReconciliationStage] = {
    interface.NAME: ReconciliationStage.INTERFACES,
    host.NAME: ReconciliationStage.INTERFACES,
    route.NAME: ReconciliationStage.ROUTES,
}


class LinuxPlugin:
    """Linux networking of one namespace as scheduler descriptors, plus the host-link watcher.

    Use ``register(scheduler, netns)``; ``close()`` stops the watcher and closes the netlink
    handles (the descriptors stay registered: the scheduler has no unregister).

    A ``southbound.plugin_api.SouthboundPlugin``: a namespace has no connection to lose, so the
    plugin is always ``connected``, never calls ``on_disconnect`` callbacks, and ``reconnect``
    only calls the ``on_connect`` callbacks again after the hold-off (the agent then
    reconciles the namespace anew). Drift is reported to the scheduler by the host-link
    watcher's notifications, so ``on_drift`` callbacks are never called either."""

    #: Always True: the netlink sockets are the caller's own, opened in an existing namespace.
    connected = True

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
        self._close_lock = threading.Lock()  # guards _closed and _reconnect
        self._on_connect: list[Callable[[], None]] = []
        self._reconnect: threading.Timer | None = None
        self.watcher: HostInterfaceWatcher | None = None
        self._registered: list[str] = []
        try:
            for descriptor in self.descriptors():
                scheduler.register_descriptor(descriptor)
                self._registered.append(descriptor.name)
            if watch:
                self.watcher = HostInterfaceWatcher(netns, self.ownership, self._notify)
                self.watcher.start(timeout=watcher_timeout)
        except BaseException:
            self.close()
            raise

    def descriptors(self) -> list[Descriptor]:
        """Every descriptor of every Linux model (``southbound.linux.registry``)."""
        return REGISTRY.descriptors(self.context)

    def descriptor_stages(self) -> dict[str, ReconciliationStage]:
        return {name: STAGES.get(name, ReconciliationStage.OTHER) for name in self._registered}

    def on_connect(self, callback: Callable[[], None]) -> None:
        """Called after each ``reconnect`` (the namespace is there from the start)."""
        self._on_connect.append(callback)

    def on_disconnect(self, callback: Callable[[], None]) -> None:
        """Never called: a namespace is not a connection that drops."""

    def on_drift(self, callback: Callable[[], None]) -> None:
        """Never called: the host-link watcher tells the scheduler itself."""

    def reconnect(self, hold_off: float) -> None:
        """Call the ``on_connect`` callbacks again after `hold_off` seconds (unless closed)."""
        with self._close_lock:
            if self._closed:
                return
            if self._reconnect is not None:
                self._reconnect.cancel()
            self._reconnect = threading.Timer(hold_off, self._reconnected)
            self._reconnect.daemon = True
            self._reconnect.start()

    def _reconnected(self) -> None:
        with self._close_lock:
            if self._closed:
                return
        for callback in list(self._on_connect):
            try:
                callback()
            except Exception:
                log.exception("on_connect callback %r failed", callback)

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
            if self._reconnect is not None:
                self._reconnect.cancel()
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

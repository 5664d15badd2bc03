"""The agent's reconciliation services (run by ``kvmesh.agent.recon`` for each (re)connected
device, in priority order), and why a device is held out of KNOWN.

`kvstore-initial-sync` first waits until the local KvStore is current (until then an absent key
proves nothing: deletes are held back, what kvmesh made is adopted as it is); then one
`resync-<stage>` service per ``ReconciliationStage`` resyncs the device's descriptors of that
stage (as its plugin declared them) against the desired state.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from kvmesh.agent.config import AgentConfig
from kvmesh.agent.desired import Model
from kvmesh.agent.devices import Device, Devices
from kvmesh.agent.events import DeviceStateChanged, StatusEvent
from kvmesh.agent.keys import device_of
from kvmesh.agent.northbound import NorthboundFollower
from kvmesh.agent.recon import (
    CancelToken,
    DeviceState,
    ReconciliationManager,
    ReconciliationService,
    ResultIntent,
)
from kvstore import KvStoreClient, StoreState, store_is_current, why_not_current
from scheduler import KVScheduler, TransactionError
from southbound.plugin_api import ReconciliationStage

log = logging.getLogger("kvmesh.agent")

#: Priority of the built-in service that waits for the KvStore's initial sync.
KVSTORE_SYNC_PRIORITY = 0


class Reconciliation:
    def __init__(self, config: AgentConfig, scheduler: KVScheduler,
                 recon: ReconciliationManager, devices: Devices,
                 northbound: NorthboundFollower, post: Callable[[StatusEvent], None]) -> None:
        self.config = config
        self.scheduler = scheduler
        self.recon = recon
        self._devices = devices
        self._northbound = northbound
        self._post = post
        self._lock = threading.Lock()  # guards _hold_reasons
        # Why a device is held out of KNOWN, while it is (published with its state).
        self._hold_reasons: dict[str, str] = {}
        # An operator declared the store current (`--assume-current`, `resync --force`).
        self._assume_current = threading.Event()
        if config.assume_current:
            self._assume_current.set()
        self.store_state: StoreState | None = None  # as last read from the KvStore

    def register(self) -> None:
        """The services, and the device states to `status/` as they change."""
        self.recon.add_listener(self.device_state_changed)
        # No timeout: the device waits for a current store as long as it takes (an operator
        # can cut that short with `kvmesh resync --force`), but it is not idle meanwhile.
        self.recon.register(ReconciliationService(
            "kvstore-initial-sync", KVSTORE_SYNC_PRIORITY, ResultIntent.DO_NOTHING,
            self._wait_for_current_store, timeout_s=None))
        for stage in ReconciliationStage:
            self.recon.register(ReconciliationService(
                f"resync-{stage.label}", stage.order, ResultIntent.DISCONNECT,
                self._stage_resync(stage), timeout_s=600))

    def device_state_changed(self, device: str, state: DeviceState) -> None:
        with self._lock:
            reason = self._hold_reasons.get(device)
        self._post(DeviceStateChanged(device, state, time.time(), reason))

    def _wait_for_current_store(self, device: str, token: CancelToken) -> bool:
        """Wait until the local KvStore is current, then let the deleting resyncs run.

        Until the store is known to be current (SYNCED, or RESTORED with no peers, or declared
        so by an operator) its absence of a key proves nothing: the device is held out of KNOWN
        with the reason published, and what the southbound holds that kvmesh made is adopted
        as it is. Creates and updates of the desired state go ahead; deletes wait.
        """
        with KvStoreClient(self.config.kv_url) as client:
            self._northbound.load_dump(client)
            adopted = False
            while True:
                state, num_peers = self._read_store_state(client)
                if store_is_current(state, num_peers, forced=self._assume_current.is_set()):
                    break
                self._hold(device, f"{why_not_current(state, num_peers)}: deletes held back "
                                   f"(kvmesh resync --node {self.config.node} --force overrides)")
                if not adopted or self._northbound.desired.has_pending(
                        lambda key: device_of(key) == device):
                    self._adopt(device, token)
                    adopted = True
                if token.wait(self.config.store_poll_s):
                    token.check()
            self._northbound.load_dump(client)  # what the sync brought (the stream has it too)
        self._hold(device, None)
        return True

    def _read_store_state(self, client: KvStoreClient) -> tuple[StoreState, int]:
        # Counters, not NODE_INFO: NODE_INFO also computes the store's root digest, which is
        # not free on a big store that is still receiving its initial sync.
        counters = client.counters()
        state = StoreState.from_code(int(counters.get("kvstore.store_state", 0)))
        self.store_state = state
        return state, int(counters.get("kvstore.num_peers", 0))

    def _hold(self, device: str, reason: str | None) -> None:
        """Publish why `device` is held out of KNOWN (None: it no longer is)."""
        with self._lock:
            if self._hold_reasons.get(device) == reason:
                return
            if reason is None:
                del self._hold_reasons[device]
            else:
                self._hold_reasons[device] = reason
        if reason is not None:
            log.warning("device %s held out of KNOWN: %s", device, reason)
        self.device_state_changed(device, self.recon.device_state(device))

    def _adopt(self, device: str, token: CancelToken) -> None:
        """Apply the desired state of `device` stage by stage without deleting anything: what
        kvmesh made and the store does not (yet) hold is taken over as it is."""
        dev = self._devices.get(device)
        if dev is None:
            return
        for stage in ReconciliationStage:
            names = dev.descriptors_of(stage)
            if not names:
                continue
            token.check()
            try:
                self.scheduler.resync(self._take_desired(dev, names), kind="full",
                                      descriptors=names, retry=self.config.retry,
                                      delete_missing=False,
                                      description=f"adopt {device}: {stage.label} (store not "
                                                  f"current: no deletes)")
            except TransactionError as exc:
                log.warning("adopting %s/%s: %s", device, stage.label, exc)

    def _stage_resync(self, stage: ReconciliationStage) -> Callable[[str, CancelToken], bool]:
        def run(device: str, token: CancelToken) -> bool:
            dev = self._devices.get(device)
            if dev is None:
                return True
            names = dev.descriptors_of(stage)
            if not names:
                return True
            token.check()
            try:
                self.scheduler.resync(self._take_desired(dev, names), kind="full",
                                      descriptors=names, retry=self.config.retry,
                                      description=f"reconcile {device}: {stage.label}")
            except TransactionError as exc:
                # Value-level failures are visible in statuses (and retried); they are not a
                # reason to drop the device. Anything else propagates and fails the stage.
                log.warning("reconcile %s/%s: %s", device, stage.label, exc)
            # A connection lost during the stage made its reads fail (the scheduler then works
            # from what it could read): the device must not become KNOWN on that.
            if not dev.plugin.connected:
                raise ConnectionError(f"connection to {device} lost while reconciling "
                                      f"{stage.label}")
            return True

        return run

    def _take_desired(self, device: Device, descriptor_names: list[str]) -> dict[str, Model]:
        """Desired values of `device` owned by the given descriptors; their pending changes
        are dropped (the resync applies the current desired state, deletions included)."""
        wanted = set(descriptor_names)
        selectors = [d.key_selector for d in self.scheduler.descriptors() if d.name in wanted]
        return self._northbound.desired.take_scope(
            lambda key: device_of(key) == device.name and any(sel(key) for sel in selectors))

    def assume_current(self) -> dict[str, Any]:
        """An operator declares the store the truth: held devices reconcile with deletes."""
        self._assume_current.set()
        log.warning("KvStore declared current by an operator (was %s): deletes allowed",
                    self.store_state.value if self.store_state else "unknown")
        devices = self.recon.devices()
        return {"store_state": self.store_state.value if self.store_state else None,
                "devices": {d: st.value for d, st in devices.items()},
                "all_known": all(st is DeviceState.KNOWN for st in devices.values())}

    def view(self) -> dict[str, Any]:
        """The services, device states and holds (REST GET /scheduler/recon)."""
        with self._lock:
            held = dict(self._hold_reasons)
        return {
            "services": [{"priority": p, "name": s.name, "intent": s.intent.value}
                         for p, level in self.recon.registered_services().items()
                         for s in level],
            "devices": {d: s.value for d, s in self.recon.devices().items()},
            "status": self.recon.status(),
            "held": held,
            "store_state": self.store_state.value if self.store_state else None,
        }

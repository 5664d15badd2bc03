"""The agent's devices (one southbound plugin each: the Linux namespace, the VPP connection)
and the glue between them and the reconciliation framework (``kvmesh.agent.recon``).

A (re)connected device is reconciled; a failed reconciliation that asks for DISCONNECT makes the
plugin reconnect after an exponential hold-off; drift a plugin reports is repaired by a
downstream resync shortly after. Northbound changes for a device wait until it is KNOWN.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass

from kvmesh.agent.config import AgentConfig
from kvmesh.agent.counters import AgentCounters
from kvmesh.agent.keys import device_of
from kvmesh.agent.recon import DeviceState, ReconciliationManager, RunOutcome
from scheduler import KVScheduler, SchedulerClosedError, TransactionError
from southbound.plugin_api import ReconciliationStage, SouthboundPlugin

log = logging.getLogger("kvmesh.agent")


@dataclass(frozen=True)
class Device:
    name: str
    plugin: SouthboundPlugin
    stages: Mapping[str, ReconciliationStage]  # its descriptors: the reconciliation scope

    def descriptors_of(self, stage: ReconciliationStage) -> list[str]:
        return [name for name, declared in self.stages.items() if declared is stage]


class Devices:
    def __init__(self, config: AgentConfig, scheduler: KVScheduler,
                 recon: ReconciliationManager, counters: AgentCounters,
                 stop: threading.Event) -> None:
        self.config = config
        self.scheduler = scheduler
        self.recon = recon
        self._counters = counters
        self._stop = stop
        self._lock = threading.Lock()  # guards the three tables below
        self._devices: dict[str, Device] = {}
        self._failures: dict[str, int] = {}  # consecutive failed reconciliations per device
        self._repairs_pending: set[str] = set()

    def add(self, name: str, plugin: SouthboundPlugin) -> Device:
        """`plugin` (its descriptors registered) as the device `name`; reconciled now if it is
        connected, and whenever it connects again."""
        device = Device(name, plugin, dict(plugin.descriptor_stages()))
        with self._lock:
            self._devices[name] = device
        plugin.on_connect(lambda: self.connect(name))
        plugin.on_disconnect(lambda: self.recon.device_disconnected(name))
        plugin.on_drift(lambda: self.repair_soon(name))
        if plugin.connected:
            self.connect(name)
        return device

    def get(self, name: str) -> Device | None:
        with self._lock:
            return self._devices.get(name)

    def all(self) -> dict[str, Device]:
        with self._lock:
            return dict(self._devices)

    def may_apply(self, model_key: str) -> bool:
        """May a change of `model_key` be applied now? Held back only while its device is
        being (re)connected; a model with no southbound on this node goes through, and the
        scheduler reports it UNIMPLEMENTED (visible in its status) instead of it waiting."""
        device = device_of(model_key)
        if self.get(device) is None:
            return True
        return self.recon.device_state(device) is DeviceState.KNOWN

    def connect(self, name: str) -> None:
        if self._stop.is_set():
            return
        future = self.recon.device_connected(name)
        future.add_done_callback(lambda f: self._after_reconciliation(f.result()))

    def _after_reconciliation(self, outcome: RunOutcome) -> None:
        """Runs on a reconciliation thread."""
        if outcome.state is DeviceState.KNOWN:
            with self._lock:
                self._failures.pop(outcome.device, None)
            log.info("device %s is KNOWN%s", outcome.device,
                     f" (failed, tolerated: {outcome.failed})" if outcome.failed else "")
            return
        if not outcome.disconnect or self._stop.is_set():
            return
        with self._lock:
            failures = self._failures[outcome.device] = self._failures.get(outcome.device, 0) + 1
            device = self._devices.get(outcome.device)
        first, cap = self.config.reconnect_backoff_s
        hold_off = min(cap, first * 2 ** (failures - 1))
        log.warning("reconciliation of %s failed (%s): disconnecting, retry in %.1fs",
                    outcome.device, outcome.failed, hold_off)
        if device is not None:
            # The plugin drops the device and reconnects after the hold-off; its on_connect
            # callback starts the next reconciliation.
            device.plugin.reconnect(hold_off)

    def repair_soon(self, name: str) -> None:
        """A southbound reported drift: run a downstream resync of that device shortly, once
        for a burst of reports."""
        with self._lock:
            if name in self._repairs_pending or self._stop.is_set():
                return
            self._repairs_pending.add(name)
        timer = threading.Timer(self.config.repair_delay_s, self._repair, args=(name,))
        timer.daemon = True
        timer.start()

    def _repair(self, name: str) -> None:
        with self._lock:
            self._repairs_pending.discard(name)
            device = self._devices.get(name)
        if (device is None or self._stop.is_set()
                or self.recon.device_state(name) is not DeviceState.KNOWN):
            return  # a device being reconciled is resynced by its reconciliation
        try:
            self.scheduler.resync(kind="downstream", descriptors=list(device.stages),
                                  retry=self.config.retry,
                                  description=f"repair {name}: drift reported by the southbound")
        except TransactionError as exc:
            log.warning("repairing %s: %s", name, exc)
        except SchedulerClosedError:
            return
        self._counters.count("drift_repairs")

    def periodic_resync(self) -> None:
        """The periodic downstream resync (skipped while a device is being reconciled: that
        gets its own)."""
        if any(self.recon.device_state(d) is not DeviceState.KNOWN for d in self.all()):
            return
        try:
            self.scheduler.resync(kind="downstream", retry=self.config.retry,
                                  description="periodic downstream resync")
        except TransactionError as exc:
            log.warning("periodic downstream resync: %s", exc)
        self._counters.count("downstream_resyncs")

    def close(self) -> None:
        for device in self.all().values():
            try:
                device.plugin.close()
            except Exception:
                log.exception("closing the %s southbound failed", device.name)

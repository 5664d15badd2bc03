"""Both southbound plugins implement `southbound.plugin_api.SouthboundPlugin` the way the
agent relies on: every descriptor they register has a declared reconciliation stage, and the
Linux plugin's reconnect comes back through its on_connect callbacks."""

from __future__ import annotations

import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from kvmesh.vppemu import EmulatorProcess
from scheduler import KVScheduler
from southbound.plugin_api import ReconciliationStage, SouthboundPlugin
from tests.netns import Netns, temporary_netns
from tests.parallel import scratch_dir


@pytest.fixture
def netns() -> Iterator[Netns]:
    with temporary_netns() as ns:
        yield ns


@pytest.fixture
def linux(netns: Netns, tmp_path: Path) -> Iterator[tuple[KVScheduler, SouthboundPlugin]]:
    """A scheduler with the Linux plugin registered on it, working in `netns`."""
    import southbound.linux

    scheduler = KVScheduler()
    plugin = southbound.linux.register(scheduler, netns=netns.name, watch=False,
                                       state_dir=str(tmp_path))
    try:
        yield scheduler, plugin
    finally:
        plugin.close()
        scheduler.close()


def test_linux_plugin_declares_a_stage_for_every_descriptor(
        linux: tuple[KVScheduler, SouthboundPlugin]) -> None:
    scheduler, plugin = linux
    stages = plugin.descriptor_stages()
    assert list(stages) == [d.name for d in scheduler.descriptors()]
    assert stages["linux-interface"] is ReconciliationStage.INTERFACES
    assert stages["linux-host-interface"] is ReconciliationStage.INTERFACES
    assert stages["linux-route"] is ReconciliationStage.ROUTES
    assert stages["linux-interface-address"] is ReconciliationStage.OTHER
    assert plugin.connected


def test_linux_reconnect_calls_on_connect_after_the_hold_off_unless_closed(
        linux: tuple[KVScheduler, SouthboundPlugin]) -> None:
    _scheduler, plugin = linux
    connected = threading.Event()
    plugin.on_connect(connected.set)
    plugin.reconnect(0.01)
    assert connected.wait(10), "on_connect after the hold-off"
    connected.clear()
    plugin.reconnect(0.3)
    plugin.close()  # cancels the pending reconnect: no callback after close
    assert not connected.wait(1.0)


def test_vpp_plugin_declares_a_stage_for_every_descriptor() -> None:
    import southbound.vpp

    workdir = scratch_dir("kvm-sb-")  # short: unix socket paths are limited
    emulator = EmulatorProcess(str(Path(workdir) / "api.sock"))
    scheduler = KVScheduler()
    try:
        emulator.start()
        plugin = southbound.vpp.register(scheduler, socket=emulator.socket_path)
        try:
            stages = plugin.descriptor_stages()
            assert list(stages) == [d.name for d in scheduler.descriptors()]
            assert stages["vpp-interface"] is ReconciliationStage.INTERFACES
            assert stages["vpp-bd"] is ReconciliationStage.L2_DOMAINS
            assert stages["vpp-route"] is ReconciliationStage.ROUTES
            assert stages["vpp-vrf"] is ReconciliationStage.OTHER
        finally:
            plugin.close()
    finally:
        scheduler.close()
        emulator.stop()
        shutil.rmtree(workdir, ignore_errors=True)

"""Connection management: no VPP, VPP arriving late, timeouts, unsupported messages."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import pytest

import southbound.vpp
from kvmesh.vppemu import EmulatorProcess
from scheduler import KVScheduler, RetryPolicy, TransactionError, ValueState
from southbound.vpp.connection import VppConnection
from southbound.vpp.errors import VppApiError, VppConnectionError, VppUnsupportedError
from tests.parallel import scratch_dir
from tests.util import wait_until


@pytest.fixture
def workdir():
    path = scratch_dir("kvm-vpp-")
    try:
        yield Path(path)
    finally:
        shutil.rmtree(path, ignore_errors=True)


def connection_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name in ("vpp-connection", "vpp-events")]


def test_register_fails_clearly_when_vpp_is_not_there(workdir):
    before = len(connection_threads())
    with KVScheduler() as scheduler, pytest.raises(VppConnectionError, match="not reachable"):
        southbound.vpp.register(scheduler, socket=str(workdir / "none.sock"), connect_timeout=0.3)
    assert len(connection_threads()) == before  # nothing left running


def test_vpp_arriving_late_is_connected_and_failed_operations_retried(workdir):
    socket_path = str(workdir / "late.sock")
    with KVScheduler() as scheduler:
        plugin = southbound.vpp.register(scheduler, socket=socket_path, connect_timeout=0)
        try:
            assert not plugin.connected
            key = "vpp/interface/lo1"
            with pytest.raises(TransactionError, match="not connected to VPP"):
                scheduler.start_txn().set_value(key, {"type": "loopback"}).commit(
                    retry=RetryPolicy(period=0.2, max_count=0, exp_backoff=False)
                )
            assert scheduler.get_value_status(key).state is ValueState.RETRYING
            with EmulatorProcess(socket_path, host_check=False):
                assert plugin.wait_connected(30)
                wait_until(
                    lambda: scheduler.get_value_status(key).state is ValueState.CONFIGURED,
                    timeout=30,
                    message="created once VPP is there",
                )
        finally:
            plugin.close()


def test_timeout_drops_the_connection_and_reconnects(emulator):
    conn = VppConnection(emulator.socket_path, read_timeout=1.5)
    conn.start()
    try:
        assert conn.wait_connected(30)
        first = conn.generation
        emulator.control.delay("show_version", seconds=10)
        with pytest.raises(VppConnectionError, match="connection to VPP lost"):
            conn.call("show_version")
        wait_until(lambda: conn.connected and conn.generation > first, timeout=30)
        assert conn.call("show_version").program == "vpe"
        assert conn.counters["transport_errors"] == 1
    finally:
        conn.close()


def test_messages_vpp_does_not_offer_are_reported(emulator):
    conn = VppConnection(emulator.socket_path)
    conn.start()
    try:
        assert conn.wait_connected(30)
        with pytest.raises(VppUnsupportedError, match="does not offer"):
            conn.call("memclnt_rx_thread_suspend_not_there")
        before = conn.counters
        # a retval is checked and named
        with pytest.raises(VppApiError, match=r"VNET_API_ERROR_INVALID_SW_IF_INDEX \(-2\)"):
            conn.call("delete_loopback", sw_if_index=12345)
        # counted; what was read before is a copy (the reader thread counts too)
        after = conn.counters
        assert after["retval_errors"] == before["retval_errors"] + 1
        assert after["calls"] == before["calls"] + 1
    finally:
        conn.close()
    assert not conn.connected


def test_api_definitions_from_files_instead_of_bootstrap(emulator, workdir):
    """VPP < 24.06 cannot serve get_api_json: `apidir` loads .api.json files instead."""
    import importlib.resources

    from kvmesh.vppemu.apidef import API_DIR

    for source in API_DIR.glob("*.api.json"):
        shutil.copy(source, workdir / source.name)
    memclnt = importlib.resources.files("vpp_papi.data").joinpath("memclnt.api.json")
    (workdir / "memclnt.api.json").write_text(memclnt.read_text())
    bootstraps = emulator.control.counters().get("msg.get_api_json", 0)
    with KVScheduler() as scheduler:
        plugin = southbound.vpp.register(
            scheduler, socket=emulator.socket_path, apidir=str(workdir)
        )
        try:
            scheduler.start_txn().set_value("vpp/interface/lo1", {"type": "loopback"}).commit()
            assert scheduler.get_value_status("vpp/interface/lo1").state is ValueState.CONFIGURED
            assert plugin.connection.counters["connects"] == 1
            # the definitions came from the files, not from VPP
            assert emulator.control.counters().get("msg.get_api_json", 0) == bootstraps
        finally:
            plugin.close()


def test_drop_runs_the_hooks_and_reconnects_after_the_hold_off(emulator):
    conn = VppConnection(emulator.socket_path)
    events: list[str] = []
    conn.on_disconnect(lambda: events.append("down"))
    conn.on_connect(lambda: events.append("up"))
    conn.start()
    try:
        assert conn.wait_connected(30)
        first = conn.generation
        conn.drop(hold_off=0.3)
        wait_until(lambda: "down" in events, timeout=30, message="disconnect hook ran")
        wait_until(lambda: conn.connected and conn.generation == first + 1, timeout=30)
        assert events == ["up", "down", "up"]
        assert conn.counters["drops"] == 1
        assert conn.call("show_version").program == "vpe"
    finally:
        conn.close()

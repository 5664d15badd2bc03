"""Reconciliation framework: ordering, parallelism, intents, cancellation, gate, counters."""

from __future__ import annotations

import threading

import pytest

from kvmesh.agent.recon import (
    CancelToken,
    DeviceState,
    ReconciliationManager,
    ReconciliationService,
    ResultIntent,
    ServiceState,
)
from tests.util import wait_until


def recorder(log: list[str], name: str, result: bool = True):
    def start(device: str, token: CancelToken) -> bool:
        log.append(f"{name}@{device}")
        return result

    return start


def svc(name: str, priority: int, start, intent=ResultIntent.DO_NOTHING, end=None, timeout=30.0):
    return ReconciliationService(name, priority, intent, start, end, timeout)


def test_services_run_in_ascending_priority_order(manager: ReconciliationManager) -> None:
    log: list[str] = []
    for name, prio in (("routes", 30), ("interfaces", 10), ("addresses", 20)):
        manager.register(svc(name, prio, recorder(log, name)))
    outcome = manager.device_connected("vpp").result(timeout=10)
    assert outcome.state is DeviceState.KNOWN
    assert log == ["interfaces@vpp", "addresses@vpp", "routes@vpp"]
    assert [s.name for lvl in manager.registered_services().values() for s in lvl] == [
        "interfaces", "addresses", "routes"]


def test_equal_priority_runs_in_parallel(manager: ReconciliationManager) -> None:
    # Each service waits for the other at a barrier: only a parallel run can pass it.
    barrier = threading.Barrier(2, timeout=10)

    def start(device: str, token: CancelToken) -> bool:
        barrier.wait()
        return True

    manager.register(svc("a", 5, start))
    manager.register(svc("b", 5, start))
    outcome = manager.device_connected("d").result(timeout=15)
    assert outcome.state is DeviceState.KNOWN and not outcome.failed


def test_next_priority_waits_for_whole_level(manager: ReconciliationManager) -> None:
    release = threading.Event()
    log: list[str] = []

    def slow(device: str, token: CancelToken) -> bool:
        release.wait(10)
        log.append("slow")
        return True

    manager.register(svc("slow", 1, slow))
    manager.register(svc("fast", 1, recorder(log, "fast")))
    manager.register(svc("later", 2, recorder(log, "later")))
    fut = manager.device_connected("d")
    wait_until(lambda: "fast@d" in log, message="fast service ran")
    assert manager.status("d")["d"]["slow"]["state"] == "STARTED"
    assert "later@d" not in log and manager.device_state("d") is DeviceState.RECONCILING
    release.set()
    assert fut.result(timeout=10).state is DeviceState.KNOWN
    assert log[-1] == "later@d"


def test_do_nothing_failure_continues_and_device_becomes_known(
    manager: ReconciliationManager,
) -> None:
    log: list[str] = []

    def boom(device: str, token: CancelToken) -> bool:
        raise RuntimeError("southbound refused")

    manager.register(svc("optional", 1, boom, ResultIntent.DO_NOTHING))
    manager.register(svc("next", 2, recorder(log, "next")))
    outcome = manager.device_connected("d").result(timeout=10)
    assert outcome.state is DeviceState.KNOWN
    assert outcome.failed == {"optional": "RuntimeError: southbound refused"}
    assert log == ["next@d"]
    st = manager.status("d")["d"]["optional"]
    assert st["state"] == "FAILED" and st["failures"] == 1 and st["successes"] == 0


def test_disconnect_failure_stops_the_run(manager: ReconciliationManager) -> None:
    log: list[str] = []
    manager.register(svc("critical", 1, recorder(log, "critical", result=False),
                         ResultIntent.DISCONNECT))
    manager.register(svc("never", 2, recorder(log, "never")))
    outcome = manager.device_connected("d").result(timeout=10)
    assert outcome.state is DeviceState.FAILED and outcome.disconnect
    assert log == ["critical@d"]
    assert manager.device_state("d") is DeviceState.FAILED
    assert "never" not in manager.status("d")["d"]


def test_disconnect_mid_run_cancels_and_calls_every_end_in_priority_order(
    manager: ReconciliationManager,
) -> None:
    ends: list[str] = []
    started = threading.Event()

    def blocking(device: str, token: CancelToken) -> bool:
        started.set()
        token.wait(30)
        token.check()
        return True

    def end_of(name: str):
        return lambda device: ends.append(f"{name}@{device}")

    manager.register(svc("third", 3, recorder([], "third"), end=end_of("third")))
    manager.register(svc("first", 1, blocking, end=end_of("first")))
    manager.register(svc("second", 2, recorder([], "second"), end=end_of("second")))
    fut = manager.device_connected("d")
    assert started.wait(10)
    manager.device_disconnected("d")
    outcome = fut.result(timeout=10)
    assert outcome.cancelled and outcome.state is DeviceState.DISCONNECTED
    assert ends == ["first@d", "second@d", "third@d"]
    st = manager.status("d")["d"]
    assert st["first"]["state"] == ServiceState.CANCELLED.value
    assert "second" not in st  # never started
    assert manager.device_state("d") is DeviceState.DISCONNECTED


def test_service_ignoring_cancel_does_not_hold_the_run(manager: ReconciliationManager) -> None:
    release = threading.Event()
    started = threading.Event()

    def stubborn(device: str, token: CancelToken) -> bool:
        started.set()
        release.wait(30)
        return True

    manager.register(svc("stubborn", 1, stubborn))
    fut = manager.device_connected("d")
    assert started.wait(10)
    manager.device_disconnected("d")
    try:
        assert fut.result(timeout=10).cancelled
    finally:
        release.set()


def test_timeout_is_a_failure(manager: ReconciliationManager) -> None:
    release = threading.Event()

    def hang(device: str, token: CancelToken) -> bool:
        release.wait(30)
        return True

    manager.register(svc("hang", 1, hang, ResultIntent.DISCONNECT, timeout=0.2))
    try:
        outcome = manager.device_connected("d").result(timeout=10)
    finally:
        release.set()
    assert outcome.disconnect
    assert outcome.failed["hang"].startswith("timed out")


def test_known_gate_and_listener(manager: ReconciliationManager) -> None:
    release = threading.Event()
    states: list[tuple[str, DeviceState]] = []
    manager.add_listener(lambda dev, st: states.append((dev, st)))
    manager.register(svc("gate", 1, lambda device, token: release.wait(10)))
    fut = manager.device_connected("d")
    assert manager.wait_known("d", timeout=0.05) is False
    release.set()
    assert manager.wait_known("d", timeout=10) is True
    assert fut.result(timeout=10).state is DeviceState.KNOWN
    assert states == [("d", DeviceState.RECONCILING), ("d", DeviceState.KNOWN)]


def test_reconnect_counts_and_duplicate_connect_shares_the_run(
    manager: ReconciliationManager,
) -> None:
    release = threading.Event()
    calls: list[str] = []

    def start(device: str, token: CancelToken) -> bool:
        calls.append(device)
        release.wait(10)
        return True

    manager.register(svc("s", 1, start))
    first = manager.device_connected("d")
    assert manager.device_connected("d") is first
    release.set()
    first.result(timeout=10)
    manager.device_disconnected("d")
    manager.device_connected("d").result(timeout=10)
    assert calls == ["d", "d"]
    assert manager.status("d")["d"]["s"]["successes"] == 2


def test_register_rejects_duplicates_and_unregister_removes(
    manager: ReconciliationManager,
) -> None:
    reg = manager.register(svc("x", 1, recorder([], "x")))
    with pytest.raises(ValueError, match="already registered"):
        manager.register(svc("x", 2, recorder([], "x")))
    reg.close()
    assert manager.registered_services() == {}

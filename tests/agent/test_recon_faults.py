"""Reconciliation under connection faults: device states stay truthful (issue 10).

- A disconnect racing the end of a run must win: the device ends DISCONNECTED, never KNOWN, and
  the last state listeners hear is DISCONNECTED (a stress test of many races with frequent thread
  switches; the slow-listener test pins the ordering down deterministically).
- A service that timed out (or was cancelled) and ignores its token must not run alongside the
  next run's instance of the same service for the same device.
"""

from __future__ import annotations

import sys
import threading

from kvmesh.agent.recon import (
    CancelToken,
    DeviceState,
    ReconciliationManager,
    ReconciliationService,
    ResultIntent,
)


def test_disconnect_racing_the_end_of_a_run_is_never_overwritten_by_known(
    manager: ReconciliationManager,
) -> None:
    heard: dict[str, DeviceState] = {}
    manager.add_listener(lambda device, state: heard.__setitem__(device, state))
    go = threading.Barrier(2)

    def quick(device: str, token: CancelToken) -> bool:
        go.wait(5)
        return True

    manager.register(ReconciliationService("quick", 1, ResultIntent.DISCONNECT, quick))
    wrong: list[object] = []
    # Switch threads as often as possible, so the interleavings the gap allows happen.
    old_interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        _race(manager, go, heard, wrong)
    finally:
        sys.setswitchinterval(old_interval)
    assert not wrong, f"{len(wrong)} of {RACES} runs: {wrong[:5]}"


RACES = 300


def _race(manager: ReconciliationManager, go: threading.Barrier,
          heard: dict[str, DeviceState], wrong: list[object]) -> None:
    for i in range(RACES):
        device = f"d{i}"
        future = manager.device_connected(device)
        go.wait(5)  # the service is returning now: disconnect races the end of the run
        manager.device_disconnected(device)
        future.result(timeout=10)
        if manager.device_state(device) is not DeviceState.DISCONNECTED:
            wrong.append((device, manager.device_state(device)))
        elif heard.get(device) is not DeviceState.DISCONNECTED:
            wrong.append((device, f"listener last heard {heard.get(device)}"))


def test_timed_out_service_does_not_run_into_the_next_reconciliation(
    manager: ReconciliationManager,
) -> None:
    running = 0
    overlap = []
    lock = threading.Lock()
    release = threading.Event()
    calls = 0

    def stubborn(device: str, token: CancelToken) -> bool:
        nonlocal running, calls
        with lock:
            running += 1
            calls += 1
            if running > 1:
                overlap.append(running)
        try:
            release.wait(1.0)  # ignores its token, outlives its timeout
        finally:
            with lock:
                running -= 1
        return True

    manager.register(ReconciliationService("stubborn", 1, ResultIntent.DISCONNECT, stubborn,
                                           timeout_s=0.1))
    first = manager.device_connected("d").result(timeout=10)
    assert first.disconnect and first.failed["stubborn"].startswith("timed out")
    second = manager.device_connected("d")  # the caller reconnects at once
    second.result(timeout=10)
    release.set()
    assert not overlap, "two instances of one service ran at once for the same device"


def test_timed_out_service_sees_its_token_cancelled(manager: ReconciliationManager) -> None:
    saw_cancel = threading.Event()

    def cooperative(device: str, token: CancelToken) -> bool:
        if token.wait(10):
            saw_cancel.set()
        return True

    manager.register(ReconciliationService("coop", 1, ResultIntent.DO_NOTHING, cooperative,
                                           timeout_s=0.1))
    outcome = manager.device_connected("d").result(timeout=10)
    assert outcome.failed["coop"].startswith("timed out")
    assert saw_cancel.wait(5), "a timed-out service is told to stop"
    assert manager.device_state("d") is DeviceState.KNOWN  # DO_NOTHING: tolerated


def test_listeners_hear_a_disconnect_last_even_behind_a_slow_listener(
    manager: ReconciliationManager,
) -> None:
    """A listener still busy announcing KNOWN when the device disconnects: the DISCONNECTED
    announcement must come after it, never before (the agent publishes what listeners hear)."""
    entered = threading.Event()
    proceed = threading.Event()
    heard: list[DeviceState] = []

    def slow(device: str, state: DeviceState) -> None:
        if state is DeviceState.KNOWN:
            entered.set()
            proceed.wait(5)

    manager.add_listener(slow)
    manager.add_listener(lambda device, state: heard.append(state))
    manager.register(ReconciliationService("quick", 1, ResultIntent.DISCONNECT,
                                           lambda device, token: True))
    run = manager.device_connected("d")
    assert entered.wait(10)
    disconnect = threading.Thread(target=manager.device_disconnected, args=("d",))
    disconnect.start()
    disconnect.join(0.5)  # a window for a disconnect announcement that does not wait its turn
    proceed.set()
    disconnect.join(10)
    run.result(timeout=10)  # the run's announcements are over
    assert manager.device_state("d") is DeviceState.DISCONNECTED
    assert heard[-1] is DeviceState.DISCONNECTED, heard

"""Helpers shared by the test suite."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


def modules_loaded(code: str, modules: Iterable[str]) -> set[str]:
    """Which of `modules` a fresh interpreter has loaded after running `code`."""
    watched = sorted(modules)
    probe = f"{code}\nimport sys\nprint(' '.join(m for m in {watched!r} if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return set(done.stdout.split())


# The longest pause between two polls of a condition that stays false (unless the caller asks
# for a longer `interval`): many conditions start a process (`ip -j link`, a CLI call) or ask a
# node, and polled every 10 ms for seconds they took a core from the processes they wait for.
MAX_POLL_INTERVAL = 0.1


def wait_until(
    condition: Callable[[], T], timeout: float = 10.0, interval: float = 0.01, message: str = ""
) -> T:
    """Poll `condition` until it returns a truthy value, or fail after `timeout` seconds.

    This is the suite's only way to wait for something asynchronous: never a bare sleep.
    Returns the truthy value so the caller can assert on it. The pauses start at `interval` and
    grow to `MAX_POLL_INTERVAL` (or stay at `interval` if that is longer): what comes at once is
    seen at once, what takes seconds is not polled a hundred times a second.
    """
    deadline = time.monotonic() + timeout
    pause = interval
    longest = max(interval, MAX_POLL_INTERVAL)
    last: T = condition()
    while not last:
        if time.monotonic() >= deadline:
            raise AssertionError(f"condition not met within {timeout}s: {message or condition}")
        time.sleep(pause)
        pause = min(pause * 1.5, longest)
        last = condition()
    return last


def agent_pids_serving(address: str) -> list[int]:
    """Agent processes (`kvmesh agent run`) serving REST on `address` (found through /proc)."""
    wanted = address.encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            args = (entry / "cmdline").read_bytes().split(b"\x00")
        except OSError:
            continue
        if b"agent" in args and b"run" in args and wanted in args:
            pids.append(int(entry.name))
    return pids

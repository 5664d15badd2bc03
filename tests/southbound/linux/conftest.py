"""Fixtures of the Linux southbound tests: a fresh namespace per test, always deleted."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from scheduler import KVScheduler
from southbound.linux import LinuxPlugin, register
from tests.netns import Netns, list_netns, netns_available, netns_fixture

ns = netns_fixture("kvlx")


@pytest.fixture
def linux(ns: Netns) -> Iterator[tuple[Netns, KVScheduler, LinuxPlugin]]:
    """A namespace, a scheduler and the Linux plugin registered on it for that namespace."""
    scheduler = KVScheduler()
    plugin = None
    try:
        plugin = register(scheduler, ns.name)
        yield ns, scheduler, plugin
    finally:
        if plugin is not None:
            plugin.close()
        scheduler.close()


@pytest.fixture(scope="session", autouse=True)
def _no_namespace_left_behind() -> Iterator[None]:
    """Every namespace a test of this package created is gone at the end of the session."""
    yield
    if netns_available():
        mine = f"kvlx-{os.getpid()}-"  # other test runs may be using namespaces right now
        leftovers = [name for name in list_netns() if name.startswith(mine)]
        assert not leftovers, f"namespaces left behind: {leftovers}"

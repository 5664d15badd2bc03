"""Helpers of the ACL and NAT44 scheduler-level tests."""

from __future__ import annotations

from tests.southbound.vpp.conftest import VppHarness
from tests.util import wait_until


def restart_vpp(vpp: VppHarness) -> None:
    """An emulator restart (all state lost), returning once the plugin has reconnected; the
    harness's own client stays disconnected."""
    generation = vpp.plugin.connection.generation
    vpp.papi.disconnect()
    vpp.control.restart()
    wait_until(lambda: vpp.plugin.connected and vpp.plugin.connection.generation > generation,
               timeout=30, message="reconnected after the restart")


def calls(vpp: VppHarness, before: dict[str, int], *names: str) -> dict[str, int]:
    """How many requests of each message the emulator answered since `before` (its counters)."""
    after = vpp.control.counters()
    return {n: after.get(f"msg.{n}", 0) - before.get(f"msg.{n}", 0) for n in names}

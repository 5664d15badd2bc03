"""The README's main-job command (`kvmesh demo`) works end to end and cleans up."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.netns import list_netns, netns_available


@pytest.mark.netns
@pytest.mark.skipif(not netns_available(), reason="needs root and iproute2 (ip netns)")
def test_cluster_demo_configures_breaks_and_repairs() -> None:
    if any(ns.startswith("kvmesh-n") for ns in list_netns()):
        pytest.skip("a kvmesh cluster (kvmesh-n*) is running on this machine")
    result = subprocess.run([sys.executable, "-m", "kvmesh", "demo"], capture_output=True,
                            text=True, timeout=300)
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    assert "linux/route/main/10.50.0.0/24/veth0" in out and "CONFIGURED" in out
    assert "10.50.0.0/24 via 10.0.12.2 dev veth0" in out
    assert "route repaired" in out
    assert "configuration survived the restart" in out
    assert "processes stopped, namespaces removed" in out
    assert not [ns for ns in list_netns() if ns.startswith("kvmesh-n")]

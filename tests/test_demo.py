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


@pytest.mark.process
def test_demo_shows_a_commands_lines_in_the_order_it_wrote_them(
        capsys: pytest.CaptureFixture[str]) -> None:
    """`kvmesh resync --node n2` in the demo showed its result before its 'running...' line
    (stdout and stderr captured apart, printed one after the other)."""
    from kvmesh.cluster_demo import _run

    script = ("import sys; print('running...', file=sys.stderr, flush=True); "
              "print('done', flush=True)")
    _run([sys.executable, "-c", script], show="resync")
    assert capsys.readouterr().out == "$ resync\nrunning...\ndone\n"

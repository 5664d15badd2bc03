"""On call in one command, against a real isolated cluster, from the mesh alone.

Reported on a 3-node cluster: after SIGKILL of n3, its statuses were shown as current for ~5 min
and then vanished (`no statuses found`); `kvmesh status` had no state filter and exited 0 with
FAILED values present. `kvmesh cluster health` did not exist.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from kvmesh import cluster
from kvmesh.agent.keys import status_prefix
from kvmesh.agent.liveness import MISSED_HEARTBEATS
from tests import cli_run
from tests.netns import netns_available
from tests.util import wait_until

pytestmark = [pytest.mark.process, pytest.mark.netns, pytest.mark.slow,
              pytest.mark.skipif(not netns_available(), reason="needs root and iproute2")]

# The agents' heartbeat, shorter than the default 10 s (`agent.heartbeat_ms`): a dead agent is
# shown down after three missed ones, 6 s instead of 30. The bound below fails if it is ignored.
HEARTBEAT_MS = 2000
TWIN = json.dumps({"type": "vxlan", "vxlan": {"vni": 77}})  # two of them: one FAILS (EEXIST)


def _kvmesh(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return cli_run.kvmesh(args, env={**os.environ, **env})


def _health(env: dict[str, str]) -> tuple[int, dict[str, Any]]:
    out = _kvmesh(env, "--json", "cluster", "health")
    assert out.stdout, out.stderr
    data = json.loads(out.stdout)
    return out.returncode, {n["node"]: n for n in data["nodes"]}


def test_health_status_filters_exit_codes_and_a_dead_node_shown_stale(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    try:
        state = cluster.up(3, "chain", run_dir=run_dir, isolated=True, timeout=90,
                           node_config={"agent": {"heartbeat_ms": HEARTBEAT_MS}})
        env = cluster.client_env(run_dir, "n1")  # secured: the operator's key, n1's address

        def all_up() -> bool:
            code, nodes = _health(env)
            return code == 0 and set(nodes) == {"n1", "n2", "n3"}

        wait_until(all_up, timeout=30, interval=0.5, message="every node healthy")
        text = _kvmesh(env, "cluster", "health")
        assert text.returncode == 0
        lines = text.stdout.splitlines()
        assert len(lines) == 4 and lines[0].split()[:2] == ["NODE", "AGENT"]
        assert all(" up " in line and "linux:KNOWN" in line for line in lines[1:]), lines

        # A FAILED value on n2 (twin VXLANs, same VNI: the kernel refuses the second one).
        for name in ("vxa", "vxb"):
            assert _kvmesh(env, "config", "set", "n2", f"linux/interface/{name}",
                           TWIN).returncode == 0
        _kvmesh(env, "config", "set", "n2", "linux/interface/br9",
                json.dumps({"type": "bridge"}))

        def n2_failed() -> dict[str, Any]:
            code, nodes = _health(env)
            return nodes["n2"] if code == 1 and nodes["n2"]["oldest_failed"] else {}

        n2 = wait_until(n2_failed, timeout=60, interval=0.5, message="n2 has a FAILED value")
        assert n2["oldest_failed"]["key"] in ("linux/interface/vxa", "linux/interface/vxb")
        assert "VNI 77" in n2["oldest_failed"]["error"], n2
        assert n2["values"]["FAILED"] == 1 and n2["problems"] == ["1 FAILED"]
        row = next(line for line in _kvmesh(env, "cluster", "health").stdout.splitlines()
                   if line.startswith("n2 "))
        assert "FAILED:1" in row and "VNI 77" in row, row

        # `status --state` filters; exit 1 when a value shown is FAILED, 0 when none is.
        wait_until(lambda: _kvmesh(env, "--json", "status", "n2", "--state", "CONFIGURED")
                   .stdout.count("linux/interface/") == 2, timeout=30, interval=0.5,
                   message="br9 and one VXLAN CONFIGURED")
        failed = _kvmesh(env, "--json", "status", "n2", "--state", "FAILED,INVALID")
        assert failed.returncode == 1
        (only,) = json.loads(failed.stdout)["n2"].values()
        assert only["state"] == "FAILED" and only["stale"] is False
        ok = _kvmesh(env, "status", "n2", "--state", "configured")
        assert ok.returncode == 0 and "FAILED" not in ok.stdout and "br9" in ok.stdout
        bad = _kvmesh(env, "status", "--state", "BROKEN")
        assert bad.returncode == 2 and "BROKEN" in bad.stderr

        # n3 dies (node and agent, SIGKILL): shown down since when, its statuses stale, kept.
        _kvmesh(env, "config", "set", "n3", "linux/interface/br3",
                json.dumps({"type": "bridge"}))
        wait_until(lambda: "br3" in _kvmesh(env, "status", "n3", "--state", "CONFIGURED")
                   .stdout, timeout=30, interval=0.5, message="br3 CONFIGURED on n3")
        os.kill(state.nodes["n3"].pids["node"], signal.SIGKILL)

        def n3_down() -> dict[str, Any]:
            _code, nodes = _health(env)
            return nodes["n3"] if not nodes["n3"]["agent"]["up"] else {}

        bound = (MISSED_HEARTBEATS + 2) * HEARTBEAT_MS / 1000
        n3 = wait_until(n3_down, timeout=bound, interval=1, message="n3 shown down")
        assert n3["agent"]["last_seen"] is not None and "agent down" in n3["problems"]
        shown = _kvmesh(env, "status", "n3")
        assert shown.returncode == 1, shown.stdout  # stale values are not a healthy answer
        assert "CONFIGURED (stale)" in shown.stdout
        assert "n3: agent down since " in shown.stdout
        as_json = json.loads(_kvmesh(env, "--json", "status", "n3").stdout)
        assert as_json["n3"]["linux/interface/br3"]["stale"] is True
        health = _kvmesh(env, "cluster", "health")
        assert health.returncode == 1
        assert any(line.startswith("n3 ") and "down since" in line and "(stale)" in line
                   for line in health.stdout.splitlines()), health.stdout
        # Kept: the statuses outlive the agent far longer than the 5 min reported (a day).
        with state.client("n1") as client:
            ttls = [v.ttl_ms for v in client.dump(prefix=status_prefix("n3")).values()]
        assert ttls and min(ttls) > 3_600_000, ttls
    finally:
        cluster.down(run_dir)

"""`kvmesh cluster up/status/down` and the 3-node flow behind the README's demo."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from kvmesh import cluster
from kvstore.version import PROTOCOL_VERSION, __version__
from tests.netns import list_netns, netns_available
from tests.parallel import unique_prefix
from tests.util import wait_until


def kvmesh(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kvmesh", *args], capture_output=True,
                          text=True, timeout=120)


def test_topologies_peer_on_both_sides() -> None:
    names = ["n1", "n2", "n3", "n4"]
    assert cluster.peers_of(names, "chain") == {
        "n1": ["n2"], "n2": ["n1", "n3"], "n3": ["n2", "n4"], "n4": ["n3"]}
    ring = cluster.peers_of(names, "ring")
    assert sorted(ring["n1"]) == ["n2", "n4"] and sorted(ring["n4"]) == ["n1", "n3"]
    mesh = cluster.peers_of(names, "mesh")
    assert all(len(peers) == 3 for peers in mesh.values())
    with pytest.raises(cluster.ClusterError, match="unknown topology"):
        cluster.peers_of(names, "star")


def test_a_core_peers_by_the_topology_and_each_leaf_has_one_core_peer() -> None:
    names = [f"n{i}" for i in range(1, 8)]
    peers = cluster.cluster_peering(names, "ring", core=3)
    assert sorted(peers["n1"]) == ["n2", "n3", "n4", "n7"]  # ring n1-n2-n3 + leaves n4, n7
    assert sorted(peers["n2"]) == ["n1", "n3", "n5"]
    assert sorted(peers["n3"]) == ["n1", "n2", "n6"]
    assert {leaf: peers[leaf] for leaf in names[3:]} == {
        "n4": ["n1"], "n5": ["n2"], "n6": ["n3"], "n7": ["n1"]}  # round-robin over the core
    assert cluster.cluster_peering(names, "mesh") == cluster.peers_of(names, "mesh")
    assert cluster.cluster_peering(names, "random", core=7, seed=3) == \
        cluster.peers_of(names, "random", seed=3)
    with pytest.raises(cluster.ClusterError, match="at least one full node"):
        cluster.cluster_peering(names, "chain", core=0)


def test_cluster_up_refuses_core_0_before_starting_anything(tmp_path: Path) -> None:
    result = kvmesh("cluster", "up", "--nodes", "3", "--core", "0", "--run-dir",
                    str(tmp_path / "run"))
    assert result.returncode == 1
    assert "--core 0: a cluster needs at least one full node" in result.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.netns
@pytest.mark.skipif(not netns_available(), reason="needs root and iproute2 (ip netns)")
def test_cluster_up_configure_status_down(tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("KVMESH_URL", "KVMESH_KEY_FILE", "KVMESH_SERVER_KEY"):
        monkeypatch.setenv(name, "")  # restored after the test
    prefix = unique_prefix("kvc")
    run_dir = tmp_path / "run"
    try:
        state = cluster.up(3, "chain", run_dir=run_dir, netns_prefix=prefix, timeout=90)
        status = json.loads(kvmesh("--json", "cluster", "status", "--run-dir",
                                   str(run_dir)).stdout)
        assert set(status["nodes"]) == {"n1", "n2", "n3"}
        for name, info in status["nodes"].items():
            assert {"cmd_url", "pub_url", "netns", "http"} <= set(info)
            assert info["netns"] == f"{prefix}-{name}"
            assert all(p["alive"] for p in info["processes"].values())
            assert (info["version"], info["protocol"]) == (__version__, PROTOCOL_VERSION)
        n1 = state.nodes["n1"].cmd_url
        # The cluster is secured: a client without the operator's key is refused ...
        refused = kvmesh("--url", n1, "key", "get", "k")
        assert refused.returncode == 1 and "no key: set KVMESH_KEY_FILE" in refused.stderr
        # ... and `kvmesh cluster env` gives the operator's environment.
        exports = kvmesh("cluster", "env", "--run-dir", str(run_dir)).stdout.splitlines()
        env = dict(shlex.split(line.removeprefix("export "))[0].split("=", 1) for line in exports)
        assert env["KVMESH_URL"] == n1
        assert set(env) == {"KVMESH_URL", "KVMESH_KEY_FILE", "KVMESH_SERVER_KEY"}
        os.environ.update(env)  # for every kvmesh command below (restored at the end)
        # Desired state for the far end of the chain, written on n1.
        set_result = kvmesh("config", "set", "n3", "linux/interface/br7",
                            '{"type": "bridge", "mtu": 1400}')
        assert set_result.returncode == 0, set_result.stderr

        def br7_mtu() -> int | None:
            out = subprocess.run(["ip", "-n", f"{prefix}-n3", "-j", "link", "show", "br7"],
                                 capture_output=True, text=True).stdout
            return json.loads(out)[0]["mtu"] if out.strip() else None

        wait_until(lambda: br7_mtu() == 1400, timeout=60, message="bridge created on n3")

        def n3_status() -> str | None:
            out = kvmesh("--url", n1, "--json", "status", "n3").stdout
            data = json.loads(out or "{}")
            return data.get("n3", {}).get("linux/interface/br7", {}).get("state")

        wait_until(lambda: n3_status() == "CONFIGURED", timeout=60,
                   message="n1 sees n3's bridge CONFIGURED")
        second = cluster.up  # a second `up` on the same run dir is refused
        with pytest.raises(cluster.ClusterError, match="already running"):
            second(1, run_dir=run_dir, netns_prefix=prefix)
    finally:
        stopped = cluster.down(run_dir)
    assert stopped >= 3
    assert not [ns for ns in list_netns() if ns.startswith(f"{prefix}-")]
    after = json.loads(kvmesh("--json", "cluster", "status", "--run-dir", str(run_dir)).stdout)
    assert after["nodes"] == {}


@pytest.mark.netns
@pytest.mark.skipif(not netns_available(), reason="needs root and iproute2 (ip netns)")
def test_a_namespace_another_cluster_holds_is_a_clear_error(tmp_path: Path) -> None:
    prefix = unique_prefix("kvh")
    held = f"{prefix}-n2"  # as another cluster's n2 would hold it
    subprocess.run(["ip", "netns", "add", held], check=True)
    try:
        with pytest.raises(cluster.ClusterError, match=f"ip netns add {held}: .*File exists.*"
                           "another cluster"):
            cluster.up(2, "chain", run_dir=tmp_path / "run", netns_prefix=prefix, timeout=60)
        # What this attempt made is gone; what it did not make is left alone.
        assert f"{prefix}-n1" not in list_netns()
        assert held in list_netns()
    finally:
        subprocess.run(["ip", "netns", "del", held], check=False)


@pytest.mark.process
def test_cluster_status_names_tls_rest_endpoints_https(tmp_path: Path) -> None:
    """An isolated cluster's agents serve REST over TLS: status said http:// of them."""
    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o700)
    nodes = {"n1": cluster.NodeInfo("tcp://x:1", "tcp://x:2", None, "198.18.0.1:8080"),
             "n2": cluster.NodeInfo("tcp://x:3", "tcp://x:4", None, None)}
    cluster.ClusterState(str(run_dir), "chain", nodes, http_cert=str(run_dir / "c.pem")).save()
    data: dict = cluster.status(run_dir)["nodes"]  # type: ignore[assignment]
    assert data["n1"]["rest_url"] == "https://198.18.0.1:8080"
    assert data["n2"]["rest_url"] is None
    table = kvmesh("cluster", "status", "--run-dir", str(run_dir)).stdout
    assert "https://198.18.0.1:8080" in table and "http://" not in table
    cluster.ClusterState(str(run_dir), "chain", nodes).save()  # loopback: plain HTTP
    data = cluster.status(run_dir)["nodes"]  # type: ignore[assignment]
    assert data["n1"]["rest_url"] == "http://198.18.0.1:8080"

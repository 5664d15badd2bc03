"""kvmesh/faults.py against a real isolated cluster: each fault bites, and heals without a trace."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from kvmesh import cluster, faults, launch
from kvstore.client import KvStoreError, make_value
from tests.netns import netns_available
from tests.util import wait_until

pytestmark = [
    # One cluster for the module (a module fixture): its tests run in one worker, in order.
    pytest.mark.xdist_group("faults-cluster"),
    pytest.mark.netns,
    pytest.mark.skipif(not netns_available() or shutil.which("nft") is None,
                       reason="needs root, iproute2 and nftables"),
]


@pytest.fixture(scope="module")
def lab_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[cluster.ClusterState]:
    run_dir = Path(tmp_path_factory.mktemp("faults")) / "run"
    try:
        yield cluster.up(3, "mesh", run_dir=run_dir, isolated=True, agents=False, timeout=60,
                         node_config={"sync_interval_s": 1, "sync_timeout_ms": 1000,
                                      "sync_initial_backoff_ms": 100,
                                      "sync_max_backoff_ms": 500})
    finally:
        cluster.down(run_dir)


def _has(state: cluster.ClusterState, node: str, key: str) -> bool:
    try:
        with state.client(node, timeout_s=0.5) as client:
            return key in client.get([key])
    except KvStoreError:
        return False


def _set(state: cluster.ClusterState, node: str, key: str) -> None:
    with state.client(node, timeout_s=2) as client:
        client.set({key: make_value(b"v", version=1, originator_id="t")})


def _tables(state: cluster.ClusterState, node: str) -> str:
    return subprocess.run(["ip", "netns", "exec", str(state.nodes[node].netns), "nft", "list",
                           "tables"], capture_output=True, text=True).stdout


def _answers(state: cluster.ClusterState, node: str) -> bool:
    try:
        with state.client(node, timeout_s=0.3) as client:
            client.node_info(refresh=True)
        return True
    except KvStoreError:
        return False


def test_partition_drops_between_the_sides_and_heal_removes_its_tables(
    lab_cluster: cluster.ClusterState,
) -> None:
    lab = lab_cluster.isolated_lab()
    assert lab is not None
    partition = faults.Partition(lab, ["n1"], ["n2", "n3"])
    partition.inject()
    try:
        _set(lab_cluster, "n1", "cut-off")  # the host still reaches n1
        wait_until(lambda: partition.drops() > 0, timeout=10, message="nft drops counted")
        assert not _has(lab_cluster, "n2", "cut-off")
        assert partition.table in _tables(lab_cluster, "n2")
    finally:
        partition.heal()
    assert partition.table not in _tables(lab_cluster, "n1")
    assert partition.table not in _tables(lab_cluster, "n2")
    assert partition.drops() > 0  # kept after heal, as evidence
    wait_until(lambda: _has(lab_cluster, "n2", "cut-off") and _has(lab_cluster, "n3", "cut-off"),
               timeout=20, message="key delivered after heal")


def test_loss_drops_a_share_of_packets_from_other_nodes(
    lab_cluster: cluster.ClusterState,
) -> None:
    lab = lab_cluster.isolated_lab()
    assert lab is not None
    loss = faults.Loss(lab, ["n2"], 50)
    loss.inject()
    try:
        for i in range(20):
            _set(lab_cluster, "n1", f"lossy-{i}")
        wait_until(lambda: loss.drops() > 0, timeout=15, message="random drops counted")
    finally:
        loss.heal()
    assert loss.table not in _tables(lab_cluster, "n2")
    wait_until(lambda: _has(lab_cluster, "n2", "lossy-19"), timeout=20, message="delivered")


def test_pause_crash_and_link_down_bite_and_heal(lab_cluster: cluster.ClusterState) -> None:
    lab = lab_cluster.isolated_lab()
    assert lab is not None
    for fault in (faults.Pause(lab_cluster, "n3"), faults.LinkDown(lab, "n3"),
                  faults.Crash(lab_cluster, "n3")):
        old_pid = lab_cluster.nodes["n3"].pids["node"]
        fault.inject()
        try:
            assert not _answers(lab_cluster, "n3"), fault.describe()
        finally:
            fault.heal()
        wait_until(lambda: _answers(lab_cluster, "n3"), timeout=30, message=fault.describe())
        if isinstance(fault, faults.Crash):
            assert lab_cluster.nodes["n3"].pids["node"] != old_pid
            assert not launch.pid_alive(old_pid)
    _set(lab_cluster, "n1", "after-faults")
    wait_until(lambda: _has(lab_cluster, "n3", "after-faults"), timeout=20, message="healed")


def test_flood_held_by_a_partition_does_not_bring_an_expired_key_back(tmp_path: Path) -> None:
    """nftables partition between two isolated nodes while a short-TTL key is written: TCP
    holds the flood and delivers it after the heal, past the TTL. The receiver must age it out
    (issue 10) rather than start its TTL afresh. No anti-entropy: only the held flood travels."""
    run_dir = tmp_path / "run"
    try:
        state = cluster.up(2, "chain", run_dir=run_dir, isolated=True, agents=False, timeout=60,
                           node_config={"sync_interval_s": 0})
        lab = state.isolated_lab()
        assert lab is not None

        def peered(node: str) -> bool:
            with state.client(node) as client:
                return bool(client.node_info(refresh=True).initial_sync_done)

        # n1 floods to n2 only once their first sync is done.
        wait_until(lambda: peered("n1") and peered("n2"), timeout=30, message="peered")
        partition = faults.Partition(lab, ["n1"], ["n2"])
        partition.inject()
        try:
            with state.client("n1", timeout_s=2) as client:
                client.set({"short": make_value(b"x", version=1, originator_id="t",
                                                ttl_ms=1500)})
                wait_until(lambda: "short" not in client.get(["short"]), timeout=10,
                           message="expired on n1")
            assert partition.drops() > 0
        finally:
            partition.heal()
        _set(state, "n1", "marker")  # after `short` on the same connection
        wait_until(lambda: _has(state, "n2", "marker"), timeout=30, message="flood delivered")
        assert not _has(state, "n2", "short"), "expired key came back after the partition"
        with state.client("n2") as client:
            assert client.counters()["kvstore.ttl.expired_in_transit"] >= 1
    finally:
        cluster.down(run_dir, purge=True)

"""cluster_bench's convergence check counts what the run wrote, whatever else expires meanwhile
(tools/bench/cluster_bench.py `converge`)."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from kvmesh import cluster
from kvstore.client import make_value
from tests.util import wait_until

BENCH_DIR = Path(__file__).resolve().parents[1] / "tools" / "bench"


@pytest.fixture
def cluster_bench(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(BENCH_DIR))
    import cluster_bench as module  # tools/bench/cluster_bench.py

    return module


@pytest.mark.process
@pytest.mark.slow
def test_a_key_expiring_during_the_run_does_not_hide_convergence(
        tmp_path: Path, cluster_bench: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    """One run in four failed 'no convergence within 120s (complete: [])' right after the
    operator phase: the nodes held finite-TTL keys (status tombstones, expired revisions) that
    expired during the run, so no node ever counted base + 10 000 keys, not even the one
    written to. Here a finite-TTL key is held when the run starts and gone before its first
    check."""
    run_dir = tmp_path / "run"
    state = cluster.up(1, run_dir=run_dir, namespaces=False, agents=False, timeout=60)
    try:
        with state.client("n1") as client:
            client.set({"tombstone": make_value(b"", version=1, originator_id="n1",
                                                ttl_ms=1500)})
        real_batches = cluster_bench.key_batches

        def batches_once_it_expired(prefix: str, origin: str) -> list[dict[str, object]]:
            # Called after the run counted what the node held (the key was among it).
            with state.client("n1") as client:
                wait_until(lambda: "tombstone" not in client.get(["tombstone"]), timeout=30,
                           message="the finite-TTL key expired")
            batches: list[dict[str, object]] = real_batches(prefix, origin)
            return batches

        monkeypatch.setattr(cluster_bench, "key_batches", batches_once_it_expired)
        run = cluster_bench.converge(state, "bench/conv/t/", timeout_s=30)
        assert set(run.complete_s) == {"n1"}
    finally:
        cluster.down(run_dir, purge=True)

"""Benchmarks leave nothing in the temp dir, however they end (tools/bench/scratch.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.util import wait_until

BENCH_DIR = Path(__file__).resolve().parents[1] / "tools" / "bench"

CHILD = """
import sys, tempfile, time
sys.path.insert(0, {bench!r})
from scratch import private_tempdir
root = private_tempdir("kvbench")
made = tempfile.mkdtemp(prefix="kvbench-")
open(made + "/data", "w").write("x" * 1000)
print(root, flush=True)
if {how!r} == "raise":
    raise RuntimeError("benchmark failed")
if {how!r} == "wait":
    time.sleep(60)
if {how!r} == "keep":
    from scratch import keep
    print(keep(__import__("pathlib").Path(made)), flush=True)
    raise RuntimeError("benchmark failed, logs kept")
"""


def run_child(tmp_path: Path, how: str) -> subprocess.Popen[str]:
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    return subprocess.Popen([sys.executable, "-c", CHILD.format(bench=str(BENCH_DIR), how=how)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize("how", ["return", "raise"])
def test_scratch_dir_removed_when_the_run_ends(tmp_path: Path, how: str) -> None:
    child = run_child(tmp_path, how)
    out, _err = child.communicate(timeout=30)
    assert out.strip().startswith(str(tmp_path))  # it did make its directory there
    assert child.returncode == (0 if how == "return" else 1)
    assert list(tmp_path.iterdir()) == []


def test_a_failed_runs_logs_stay_where_it_says(tmp_path: Path) -> None:
    """cluster_bench said 'logs kept in <dir>' of a dir inside its scratch dir, removed at exit:
    `keep` moves it out first and the message names where it went."""
    child = run_child(tmp_path, "keep")
    out, _err = child.communicate(timeout=30)
    assert child.returncode == 1
    root, kept = (Path(line) for line in out.split())
    assert not root.exists()  # the scratch dir is still removed
    assert kept.parent.parent == tmp_path and kept.name.startswith("kvbench-")
    assert (kept / "data").read_text() == "x" * 1000
    assert [p.name.startswith("kvbench-failed-") for p in tmp_path.iterdir()] == [True]


def test_scratch_dir_removed_on_sigterm(tmp_path: Path) -> None:
    child = run_child(tmp_path, "wait")
    assert child.stdout is not None
    root = Path(child.stdout.readline().strip())
    assert root.is_dir() and root.parent == tmp_path
    child.send_signal(signal.SIGTERM)
    child.wait(timeout=30)
    wait_until(lambda: list(tmp_path.iterdir()) == [], timeout=10)


def test_kvstore_bench_cluster_removes_its_workdir(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The benchmark's node harness (one real node) cleans up its keys, logs and data."""
    monkeypatch.syspath_prepend(str(BENCH_DIR))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    import kvstore_bench

    with kvstore_bench.cluster() as cluster:
        node = cluster.start_node("a", durability="batch")
        cluster.wait_ready(node, initial_sync=False)
        assert any(tmp_path.iterdir())
    assert list(tmp_path.iterdir()) == []


FORKED = """
import os, signal, sys, tempfile, time
sys.path.insert(0, {bench!r})
from scratch import private_tempdir
private_tempdir("kvbench")
marker = {marker!r}
try:
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # a helper child (pyroute2 forks one per namespace socket), stopped by SIGTERM
        os.write(ready_w, b"1")  # running Python code: the signal is handled, not lost in fork
        time.sleep(60)
        os._exit(0)
    os.read(ready_r, 1)
    os.kill(pid, signal.SIGTERM)
    os.waitpid(pid, 0)
finally:
    open(marker, "a").write(f"{{os.getpid()}}\\n")
"""


def test_a_forked_child_stopped_by_sigterm_runs_none_of_the_parents_cleanup(
        tmp_path: Path) -> None:
    """linux_bench's namespace vanished under it: pyroute2 stops its forked helper with
    SIGTERM, and the inherited handler raised SystemExit in the helper, which then ran the
    benchmark's `finally` blocks (`ip netns del`). Only the process that made the scratch dir
    turns SIGTERM into SystemExit."""
    marker = tmp_path / "finally-ran"
    script = FORKED.format(bench=str(BENCH_DIR), marker=str(marker))
    child = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                           timeout=60, env={**os.environ, "TMPDIR": str(tmp_path)})
    assert child.returncode == 0, child.stderr
    assert len(marker.read_text().split()) == 1, "the child ran the parent's finally block"

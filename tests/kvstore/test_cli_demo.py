"""`kvmesh demo` runs the whole story on real processes and stops them cleanly."""

from __future__ import annotations

import subprocess
import sys

from tests.kvstore.conftest import REPO


def test_demo_runs_end_to_end() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "kvmesh", "demo", "--kvstore-only"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert out.count("hello, mesh") == 3  # the key read back from each of the three nodes
    assert "+ demo/counter" in out and "via a > b > c" in out  # snooped two hops away
    assert "kvstore.num_keys" in out
    assert "node a exit 0, node b exit 0, node c exit 0" in out

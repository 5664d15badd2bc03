"""tests/parallel.py's own rules: a killed test process's runtime base does not stay behind."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.parallel import RUNTIME_PREFIX, scratch_dir, sweep_dead_runtime_bases


def test_the_runtime_base_of_a_dead_process_is_swept_and_a_live_ones_kept(tmp_path: Path) -> None:
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    dead = tmp_path / f"{RUNTIME_PREFIX}{gone.stdout.strip()}-abc"
    live = tmp_path / f"{RUNTIME_PREFIX}{os.getpid()}-def"
    other = tmp_path / f"{RUNTIME_PREFIX}notapid-ghi"
    for base in (dead, live, other):
        (base / "kvm-vpp-x").mkdir(parents=True)
    assert sweep_dead_runtime_bases(tmp_path) == [dead]
    assert not dead.exists() and live.is_dir() and other.is_dir()


def test_scratch_dirs_live_in_this_processs_runtime_base() -> None:
    made = scratch_dir("kvm-t-")
    try:
        assert made.parent == Path(os.environ["KVMESH_RUNTIME_DIR"])
        assert made.parent.name.startswith(f"{RUNTIME_PREFIX}{os.getpid()}-")
        assert len(str(made / "api.sock")) < 100  # a unix socket path fits
    finally:
        made.rmdir()

"""`pytest -n 2 --dist loadgroup` keeps a module's `xdist_group` tests in one worker, in order:
the suite's shared-cluster modules (tests/test_operator.py, test_faults.py,
test_vpp_gateway_e2e.py) depend on it. pytest 9.2 with pytest-xdist 3.8 silently dropped the
grouping (pytest-xdist#1386: the fresh-clone run then failed 4 operator tests whose cluster
state other workers' tests had not built); setup.cfg keeps pytest below 9.2 for that."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

MODULE = '''
import os
import pytest
pytestmark = [pytest.mark.xdist_group("shared")]
RAN = []

def record(n):
    RAN.append(n)
    with open(os.path.join({out!r}, f"{{n}}"), "w") as f:
        f.write(os.environ["PYTEST_XDIST_WORKER"] + " " + ",".join(map(str, RAN)))

''' + "".join(f"def test_{n}():\n    record({n})\n\n" for n in range(1, 7))
OTHERS = "".join(f"def test_other_{n}():\n    pass\n\n" for n in range(12))


@pytest.mark.process
def test_a_group_runs_in_one_worker_in_order(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (tmp_path / "test_grouped.py").write_text(MODULE.format(out=str(out)))
    (tmp_path / "test_others.py").write_text(OTHERS)
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "loadgroup",
                          "-p", "no:cacheprovider", str(tmp_path)],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    seen = {int(p.name): p.read_text().split() for p in out.iterdir()}
    assert sorted(seen) == [1, 2, 3, 4, 5, 6]
    assert len({worker for worker, _ran in seen.values()}) == 1, seen  # one worker
    assert seen[6][1] == "1,2,3,4,5,6"  # in file order, one module (one RAN list)

"""The order the workers get their tests in (tests/schedule.py): longest first, the tests of a
module-scoped fixture together in one worker, set up once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests import schedule

REPO = Path(__file__).resolve().parents[1]

# The suite's conftest, reduced to the scheduling (the seconds given here, not tests/tiers.json).
CONFTEST = '''
import pytest
from tests import schedule

SECONDS = {seconds!r}

def pytest_configure(config):
    if getattr(config.option, "dist", "no") == "loadgroup":
        config.option.loadscopereorder = False

@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    schedule.arrange(items, SECONDS, worker=hasattr(config, "workerinput"))
'''
RECORD = '''
import os

def record(what):
    with open(os.path.join({out!r}, os.environ["PYTEST_XDIST_WORKER"]), "a") as f:
        f.write(what + "\\n")
'''
# File order: a_many, b_shared, z_long; the recorded seconds say z_long is the longest unit,
# b_shared's four tests (one module fixture) the next.
MODULES = {
    "test_a_many.py": "from record import record\n" + "".join(
        f"def test_{n}():\n    record('many')\n\n" for n in range(12)),
    "test_b_shared.py": '''
import pytest
from record import record

@pytest.fixture(scope="module")
def shared():
    record("shared set up")
    return 1
''' + "".join(f"def test_{n}(shared):\n    record('shared')\n\n" for n in range(4)),
    "test_z_long.py": "from record import record\n\ndef test_long():\n    record('long')\n",
}
SECONDS = {"test_z_long.py::test_long": 100.0,
           **{f"test_b_shared.py::test_{n}": 5.0 for n in range(4)},
           **{f"test_a_many.py::test_{n}": 0.1 for n in range(12)}}


@pytest.mark.process
def test_workers_start_with_the_longest_units_and_a_module_fixture_is_set_up_once(
        tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (tmp_path / "conftest.py").write_text(CONFTEST.format(seconds=SECONDS))
    (tmp_path / "record.py").write_text(RECORD.format(out=str(out)))
    for name, text in MODULES.items():
        (tmp_path / name).write_text(text)
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "loadgroup",
         "-p", "no:cacheprovider", "-p", "no:randomly", "--rootdir", str(tmp_path),
         str(tmp_path)],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": f"{REPO}:{tmp_path}"})
    assert run.returncode == 0, run.stdout + run.stderr
    ran = {p.name: p.read_text().split("\n")[:-1] for p in out.iterdir()}
    firsts = sorted(lines[0] for lines in ran.values())
    assert firsts == ["long", "shared set up"], ran  # each worker's first unit
    every = [line for lines in ran.values() for line in lines]
    assert every.count("shared set up") == 1, ran  # the module's tests in one worker
    assert every.count("shared") == 4 and every.count("many") == 12, ran


class _Item:
    """What `longest_first` reads of a pytest item."""

    def __init__(self, nodeid: str, group: str | None = None) -> None:
        self.nodeid = nodeid
        self.group = group

    def iter_markers(self, name: str) -> list[SimpleNamespace]:
        return [SimpleNamespace(args=(self.group,), kwargs={})] if self.group else []


def test_a_test_not_recorded_counts_as_unknown_seconds_and_groups_keep_file_order() -> None:
    items = [_Item("t.py::quick"), _Item("t.py::g1", "g"), _Item("t.py::new"),
             _Item("t.py::g2", "g")]
    seconds = {"t.py::quick": 0.5, "t.py::g1": 1.0, "t.py::g2": schedule.UNKNOWN_SECONDS}
    order = [i.nodeid for i in schedule.longest_first(items, seconds)]  # type: ignore[arg-type]
    assert order == ["t.py::g1", "t.py::g2", "t.py::new", "t.py::quick"]

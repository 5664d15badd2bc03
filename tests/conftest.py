"""Test tiers, applied in one place.

Every test carries the markers of what it needs, so that the inner loop can leave out the costly
ones::

    pytest -m "not slow and not netns and not process"     # the fast tier (the inner loop)
    pytest                                                 # everything (CI)

* ``process``: the test starts processes (nodes, agents, the VPP emulator, the CLI, tools);
* ``netns``: the test needs root and creates network namespaces;
* ``slow``: fuzzing, chaos runs, lint (mypy over the tree), long simulations, anything that
  takes seconds on its own.

The markers come from ``tests/tiers.json`` (test id -> markers), written by a recording run
(``KVMESH_RECORD_TIERS=1 pytest -p no:xdist``, see docs/testing.md) that watches what each test
really does. The classification is enforced: a test that starts a process without the
``process`` marker fails with a message saying so, so the fast tier cannot silently grow a
process-starting test. Tests added since the last recording carry every tier marker (they run
in the full suite only) until it is re-recorded.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings as hypothesis_settings

from tests import schedule
from tests.parallel import isolate_session

TIERS_FILE = Path(__file__).with_name("tiers.json")
TIER_MARKERS = ("process", "netns", "slow")
RECORD = os.environ.get("KVMESH_RECORD_TIERS") == "1"
SLOW_SECONDS = 2.0  # a test that takes this long on its own (idle machine) is slow
ALWAYS_SLOW_FILES = ("tests/test_lint.py", "tests/fuzz/", "tests/test_chaos_")

# pytest rewrites the asserts of every test module it imports (about 5 s of CPU for the suite,
# in each xdist worker) and keeps the result in __pycache__ only where bytecode may be written:
# keep it even under PYTHONDONTWRITEBYTECODE, so that only a module's first import after a change
# pays (tools/setup.sh writes them once for a fresh clone).
sys.dont_write_bytecode = False

# A KvStore counter name that kvstore/stats.py does not declare is an error in every test, in
# this process and in the node processes the tests start (they inherit the environment).
os.environ["KVSTORE_STRICT_COUNTERS"] = "1"

# This test process apart from every other (pytest-xdist workers, another run on the machine):
# its own runtime base (never /run/kvmesh), its own slice of ports, none of the caller's client
# settings. Before any kvmesh module is imported: cluster.DEFAULT_RUN_DIR is computed on import.
RUNTIME_BASE = isolate_session()


def _load_record() -> dict[str, Any]:
    return json.loads(TIERS_FILE.read_text()) if TIERS_FILE.exists() else {}


RECORD_FILE = _load_record()
TIERS: dict[str, list[str]] = RECORD_FILE.get("tests", {})
# Seconds each test took (setup, call, teardown) in the recording run: the order of the workers'
# work (tests/schedule.py).
SECONDS: dict[str, float] = RECORD_FILE.get("seconds", {})


def _base_id(nodeid: str) -> str:
    """The test id without its parameters (parametrised cases share one classification) and
    without the `@group` suffix `--dist loadgroup` adds to grouped tests' ids."""
    return nodeid.split("[", 1)[0].split("@", 1)[0]


def _markers_for(nodeid: str) -> set[str]:
    # Not recorded yet: assume the worst (left out of the fast tier until re-recorded).
    markers = set(TIERS.get(_base_id(nodeid), TIER_MARKERS))
    if nodeid.startswith(ALWAYS_SLOW_FILES):
        markers.add("slow")
    return markers


@pytest.hookimpl(optionalhook=True)  # an xdist hook: unknown under `-p no:xdist`
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto`: two workers per core. Most of the suite waits (for processes to start, for
    protocol timers), so one worker per core leaves the cores idle half the time: on 2 cores
    the whole suite took 7 min 54 s with 2 workers and 5 min 30 s with 4 (docs/testing.md)."""
    return 2 * len(os.sched_getaffinity(0))


def pytest_configure(config: pytest.Config) -> None:
    if hypothesis_profile(config) == "dev":
        hypothesis_settings.load_profile("dev")
    # xdist would hand out the groups with the most tests first; the workers' collection is
    # already in the order wanted (longest first, below).
    if getattr(config.option, "dist", "no") == "loadgroup":
        config.option.loadscopereorder = False


@pytest.hookimpl(tryfirst=True)  # before xdist's worker reads the groups (`--dist loadgroup`)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        for marker in sorted(_markers_for(item.nodeid)):
            item.add_marker(getattr(pytest.mark, marker))
    schedule.arrange(items, SECONDS, worker=hasattr(config, "workerinput"))
    if hypothesis_profile(config) == "dev":
        _cap_examples(items, DEV_EXAMPLES)


# --- what a test really does: the recorder and the enforcement share one probe -----------------

class _Probe:
    """Counts the processes and namespaces started since the session began."""

    def __init__(self) -> None:
        self.processes = 0
        self.namespaces = 0

    def snapshot(self) -> tuple[int, int]:
        return self.processes, self.namespaces

    def saw_command(self, args: Any) -> None:
        self.processes += 1
        words = [str(a) for a in args] if isinstance(args, (list, tuple)) else str(args).split()
        if "netns" in words and ("add" in words or "exec" in words):
            self.namespaces += 1


_probe = _Probe()
_real_popen_init = subprocess.Popen.__init__
_real_process_start = multiprocessing.Process.start


def _popen_init(self: subprocess.Popen[Any], args: Any, *rest: Any, **kwargs: Any) -> None:
    _probe.saw_command(args)
    _real_popen_init(self, args, *rest, **kwargs)


def _process_start(self: Any) -> None:
    _probe.processes += 1
    _real_process_start(self)


subprocess.Popen.__init__ = _popen_init  # type: ignore[method-assign]
multiprocessing.Process.start = _process_start  # type: ignore[method-assign]

_recorded: dict[str, dict[str, Any]] = {}
_seconds: dict[str, float] = {}  # recorded: test id (parameters included) -> seconds
_spawning_fixtures: set[str] = set()  # recorded: fixtures whose setup starts processes


@pytest.hookimpl(hookwrapper=True)
def pytest_fixture_setup(fixturedef: pytest.FixtureDef[Any]) -> Iterator[None]:
    # A module- or session-scoped fixture starts its processes for the first test that asks:
    # the tests that use it are all "process" tests, whichever runs first.
    before = _probe.processes
    yield
    if _probe.processes > before:
        _spawning_fixtures.add(fixturedef.argname)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    processes, namespaces = _probe.snapshot()
    started = time.perf_counter()
    yield
    elapsed = time.perf_counter() - started
    spawned = _probe.processes - processes
    if RECORD:
        _seconds[schedule.seconds_key(item.nodeid)] = round(elapsed, 2)
        entry = _recorded.setdefault(_base_id(item.nodeid), {
            "process": False, "netns": False, "seconds": 0.0,
            "fixtures": sorted(getattr(item, "fixturenames", ()))})
        entry["process"] |= spawned > 0
        entry["netns"] |= _probe.namespaces > namespaces
        entry["seconds"] = max(entry["seconds"], elapsed)


@pytest.fixture(autouse=True)
def _tier_guard(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fails a test that starts a process in its body without the ``process`` marker."""
    before = _probe.processes
    yield
    spawned = _probe.processes - before
    marked = {m.name for m in request.node.iter_markers() if m.name in TIER_MARKERS}
    if not RECORD and spawned and "process" not in marked:
        pytest.fail(f"{request.node.nodeid} started {spawned} process(es) but is not marked "
                    "'process': re-record tests/tiers.json (docs/testing.md)", pytrace=False)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if not RECORD or not _recorded or hasattr(session.config, "workerinput"):
        return
    tests: dict[str, list[str]] = {}
    for nodeid, entry in sorted(_recorded.items()):
        markers = []
        if entry["process"] or _spawning_fixtures.intersection(entry["fixtures"]):
            markers.append("process")
        if entry["netns"]:
            markers.append("netns")
        if entry["seconds"] >= SLOW_SECONDS or nodeid.startswith(ALWAYS_SLOW_FILES):
            markers.append("slow")
        tests[nodeid] = markers
    TIERS_FILE.write_text(json.dumps(
        {"comment": "tests: test id -> tier markers; seconds: test id with its parameters -> "
                    "seconds it took; written by KVMESH_RECORD_TIERS=1 pytest "
                    "(tests/conftest.py), do not edit by hand",
         "tests": {**TIERS, **tests}, "seconds": {**SECONDS, **_seconds}},
        indent=0, sort_keys=True) + "\n")


# --- hypothesis: the full search in the whole suite, a short one in the fast tier ---------------
# Profiles: `ci` runs each property with the examples it asks for (the whole suite); `dev` runs
# at most DEV_EXAMPLES per property, those that set their own max_examples included. The fast
# tier (a `-m` expression with `not slow`) is the inner loop and runs `dev` unless a profile is
# chosen (`--hypothesis-profile=ci` or HYPOTHESIS_PROFILE=ci for the full search there).
DEV_EXAMPLES = 10
FAST_TIER = re.compile(r"\bnot\s+slow\b")

hypothesis_settings.register_profile("ci", hypothesis_settings.get_profile("default"))
hypothesis_settings.register_profile("dev", max_examples=DEV_EXAMPLES, deadline=None)
hypothesis_settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def hypothesis_profile(config: pytest.Config) -> str:
    """The profile this run uses: the one chosen, else `dev` for the fast tier, else `ci`."""
    chosen = config.getoption("hypothesis_profile", None) or os.environ.get("HYPOTHESIS_PROFILE")
    if chosen:
        return str(chosen)
    return "dev" if FAST_TIER.search(config.getoption("markexpr", "") or "") else "ci"


def _cap_examples(items: list[pytest.Item], cap: int) -> None:
    """Lowers the examples of properties that set their own max_examples above `cap` (hypothesis
    keeps a test's own settings over the profile's)."""
    for item in items:
        test = getattr(getattr(item, "obj", None), "__func__", getattr(item, "obj", None))
        own = getattr(test, "_hypothesis_internal_use_settings", None)
        if own is not None and own.max_examples > cap:
            test._hypothesis_internal_use_settings = hypothesis_settings(  # type: ignore[union-attr]
                own, max_examples=cap)

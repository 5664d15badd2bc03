"""The fuzzing harnesses in the test suite: the committed corpus and every regression input
replayed, and a short coverage-guided run of each harness (bounded: FUZZ_SECONDS each)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fuzz.harnesses import HARNESSES

FUZZ_DIR = Path(__file__).resolve().parent
REPO = FUZZ_DIR.parents[1]
FUZZ_SECONDS = int(os.environ.get("KVMESH_FUZZ_SECONDS", "6"))


def _inputs(harness: str) -> list[Path]:
    found: list[Path] = []
    for kind in ("corpus", "regressions"):
        directory = FUZZ_DIR / kind / harness
        if directory.is_dir():
            found += sorted(p for p in directory.iterdir() if p.is_file())
    return found


@pytest.mark.parametrize("harness", sorted(HARNESSES))
def test_corpus_and_regressions_replay(harness: str) -> None:
    inputs = _inputs(harness)
    assert len(inputs) >= 5, f"the seed corpus of {harness} is missing"
    for path in inputs:
        try:
            HARNESSES[harness](path.read_bytes())
        except BaseException as exc:
            raise AssertionError(f"{harness} fails on {path.relative_to(REPO)}: {exc!r}") from exc


def test_every_harness_has_an_instrumentation_scope() -> None:
    from tests.fuzz.run import SCOPES

    assert set(SCOPES) == set(HARNESSES)


@pytest.mark.parametrize("harness", sorted(HARNESSES))
def test_short_fuzz_run(harness: str, tmp_path: Path) -> None:
    seed = int(os.environ.get("KVMESH_FUZZ_SEED", "1"))
    cmd = [sys.executable, "-m", "tests.fuzz.run", harness, "--seconds", str(FUZZ_SECONDS),
           "--seed", str(seed), "--work", str(tmp_path / "work")]
    # A hang guard, not a speed check: starting the fuzzer (atheris, the corpus) on a loaded
    # machine took more than a minute (the fresh-clone parallel run, load average ~50).
    result = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True,
                            timeout=FUZZ_SECONDS + 240)
    output = result.stdout + result.stderr
    crashes = sorted(p.name for p in (tmp_path / "work").glob("crash-*"))
    assert result.returncode == 0 and not crashes, (
        f"fuzzing {harness} found {crashes or 'a failure'} (reproduce: "
        f"{' '.join(cmd[1:])}; seed {seed})\n{output[-4000:]}"
    )
    assert "Done" in output and "stat::number_of_executed_units" in output, output[-2000:]

"""Run one fuzzing harness with atheris (libFuzzer): `python -m tests.fuzz.run HARNESS [...]`.

    python -m tests.fuzz.run request --seconds 600            # a long run
    python -m tests.fuzz.run rest_query --runs 2000 --work D   # a bounded run (the test suite)

The committed corpus `tests/fuzz/corpus/HARNESS/` seeds every run; new inputs go to the work
directory (a temporary one unless --work is given; pass the corpus directory itself to grow
it). A finding stops the run: libFuzzer writes the input as `crash-*` into --artifacts (default:
the work directory); keep it under `tests/fuzz/regressions/HARNESS/` once fixed.
Exit code 0: no finding.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import tempfile
from pathlib import Path

import atheris

FUZZ_DIR = Path(__file__).resolve().parent
MODEL_MODULES = (
    "southbound.linux.models.interface",
    "southbound.linux.models.route",
    "southbound.vpp.models",
)
# The code each harness drives, instrumented for coverage: only that (instrumenting every
# package took 5 s of each run's start, as long as the suite's whole run of a harness).
SCOPES: dict[str, tuple[str, ...]] = {
    "request": ("kvstore",),
    "sync_reply": ("kvstore",),
    "agent_value": ("kvmesh.agent.desired", "kvmesh.agent.models", "southbound"),
    "rest_query": ("kvmesh",),
    "http_head": ("kvmesh.agent.http_wire",),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.fuzz.run", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument("harness")
    parser.add_argument("--runs", type=int, default=None, help="stop after N executions")
    parser.add_argument("--seconds", type=int, default=None, help="stop after S seconds")
    parser.add_argument("--work", default=None, help="directory for new corpus inputs")
    parser.add_argument("--artifacts", default=None, help="directory for crashing inputs")
    parser.add_argument("--seed", type=int, default=1, help="libFuzzer's random seed")
    args = parser.parse_args(argv)
    if args.harness not in SCOPES:
        parser.error(f"unknown harness {args.harness!r}; one of {', '.join(SCOPES)}")

    with atheris.instrument_imports(include=[*SCOPES[args.harness], "tests.fuzz"]):
        from tests.fuzz.harnesses import HARNESSES

        # The model validators are imported lazily by kvmesh.agent.models: import them here,
        # inside the instrumentation, so the fuzzer sees their coverage.
        for module in MODEL_MODULES:
            importlib.import_module(module)
    work = Path(args.work or tempfile.mkdtemp(prefix=f"fuzz-{args.harness}-"))
    work.mkdir(parents=True, exist_ok=True)
    artifacts = Path(args.artifacts) if args.artifacts else work
    libfuzzer = [
        sys.argv[0],
        str(work),
        str(FUZZ_DIR / "corpus" / args.harness),
        f"-artifact_prefix={artifacts}/",
        f"-seed={args.seed}",
        "-max_len=65536",
        "-rss_limit_mb=2048",
        "-print_final_stats=1",
    ]
    if args.runs is not None:
        libfuzzer.append(f"-runs={args.runs}")
    if args.seconds is not None:
        libfuzzer.append(f"-max_total_time={args.seconds}")
    print(f"fuzzing {args.harness}: seed {args.seed}, work {work}", flush=True)
    atheris.Setup(libfuzzer, HARNESSES[args.harness])
    atheris.Fuzz()
    return 0


if __name__ == "__main__":
    sys.exit(main())

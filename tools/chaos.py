#!/usr/bin/env python3
"""Chaos run on an isolated kvmesh cluster: seeded faults, a workload, a checker after each heal.

    sudo .venv/bin/python tools/chaos.py --nodes 5 --seed 1 --rounds 2 \\
        --faults partition,loss,pause,crash,link --duration 5

Exit code 0 when every round converged and every check passed, 1 otherwise (the last lines
give the seed and the command that reproduces the run), 2 on bad arguments. `--json FILE` writes
the summary. See RELIABILITY.md and kvmesh/chaos/run.py.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kvmesh.chaos.run import ALL_FAULTS, DEFAULT_FAULTS, ChaosConfig, run
from kvmesh.cluster import ClusterError, default_run_dir
from kvmesh.netlab import LabError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--faults", default=",".join(DEFAULT_FAULTS),
                        help=f"comma-separated, of {','.join(ALL_FAULTS)}")
    parser.add_argument("--duration", type=float, default=5.0,
                        help="seconds each round's faults are held")
    parser.add_argument("--writers", type=int, default=3)
    parser.add_argument("--topology", default="random",
                        choices=("chain", "ring", "mesh", "random"))
    parser.add_argument("--degree", type=int, default=3)
    parser.add_argument("--sync-interval-s", type=float, default=3.0,
                        help="the nodes' anti-entropy interval")
    parser.add_argument("--agents", action="store_true",
                        help="run every node's agent too and check each namespace's kernel "
                        "state against its desired state")
    parser.add_argument("--run-dir", type=Path, default=default_run_dir("chaos"),
                        help="where the runs keep state and logs (one directory per run)")
    parser.add_argument("--json", type=Path, default=None, help="write the summary here")
    args = parser.parse_args(argv)
    kinds = tuple(k for k in args.faults.split(",") if k)
    unknown = [k for k in kinds if k not in ALL_FAULTS]
    if unknown or args.nodes < 2 or args.rounds < 1:
        parser.error(f"unknown fault kind(s) {unknown}" if unknown else
                     "need --nodes >= 2 and --rounds >= 1")
    config = ChaosConfig(nodes=args.nodes, seed=args.seed, rounds=args.rounds, faults=kinds,
                         duration=args.duration, writers=args.writers, topology=args.topology,
                         degree=args.degree, sync_interval_s=args.sync_interval_s,
                         run_dir=args.run_dir, agents=args.agents)
    summary: dict[str, object] = {}
    try:
        reports = run(config, say=lambda line: print(line, flush=True), summary=summary)
    except (ClusterError, LabError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json is not None:
        args.json.write_text(json.dumps(summary, indent=2, sort_keys=True))
    return 1 if any(r.problems for r in reports) else 0


if __name__ == "__main__":
    sys.exit(main())

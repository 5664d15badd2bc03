#!/usr/bin/env python3
"""Run the deterministic store simulation (kvmesh/chaos/sim.py) over seeds.

    .venv/bin/python tools/chaos_sim.py --seed 1234          # one scenario, its problems
    .venv/bin/python tools/chaos_sim.py --seeds 0-1999       # a range; failing seeds listed

Exit code 1 if any scenario fails; each failure prints its seed and the command replaying it.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kvmesh.chaos.sim import scenario_of, simulate


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--seed", type=int)
    group.add_argument("--seeds", help="FIRST-LAST (inclusive)")
    args = parser.parse_args(argv)
    if args.seed is not None:
        seeds = [args.seed]
        print(scenario_of(args.seed))
    else:
        first, _, last = args.seeds.partition("-")
        seeds = list(range(int(first), int(last or first) + 1))
    started = time.monotonic()
    failed = 0
    for seed in seeds:
        result = simulate(seed)
        if not result.ok:
            failed += 1
            print(f"seed {seed} FAILED: reproduce with: tools/chaos_sim.py --seed {seed}")
            for problem in result.problems[:10]:
                print(f"  {problem}")
    print(f"{len(seeds) - failed} passed, {failed} failed "
          f"({time.monotonic() - started:.1f} s, {len(seeds)} scenarios)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

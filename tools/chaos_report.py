#!/usr/bin/env python3
"""Combine chaos-run summaries (`tools/chaos.py --json FILE`) into the tables of RELIABILITY.md.

    .venv/bin/python tools/chaos_report.py /tmp/chaos-long/seed*.json
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any


def main(paths: list[str]) -> int:
    runs: list[dict[str, Any]] = [json.loads(Path(p).read_text()) for p in paths]
    if not runs:
        print("no summaries given", file=sys.stderr)
        return 2
    print("| seed | rounds | faults | nft drops | writes acked | lost | convergence p50 / max (s) "
          "| TTL overruns | failed rounds |")
    print("|---|---|---|---|---|---|---|---|---|")
    times: list[float] = []
    restarts: list[float] = []
    totals: dict[str, int] = {"rounds": 0, "acked": 0, "lost": 0, "ttl": 0, "failed": 0}
    faults: dict[str, int] = {}
    drops: dict[str, int] = {}
    for run in runs:
        seed = run["command"].split("--seed ")[1].split()[0]
        detail = run["rounds_detail"]
        round_times = [r["convergence_s"] for r in detail if r["convergence_s"] is not None]
        times += round_times
        restarts += [r["restart_s"] for r in detail if r.get("restart_s") is not None]
        for kind, count in run["faults"].items():
            faults[kind] = faults.get(kind, 0) + count
        for kind, count in run["nft_drops"].items():
            drops[kind] = drops.get(kind, 0) + count
        totals["rounds"] += run["rounds"]
        totals["acked"] += run["writes_acknowledged"]
        totals["lost"] += run["writes_lost"]
        totals["ttl"] += run["ttl_overruns_beyond_bound"]
        totals["failed"] += run["failed_rounds"]
        p50 = statistics.median(round_times) if round_times else None
        print(f"| {seed} | {run['rounds']} | "
              f"{', '.join(f'{k} {v}' for k, v in sorted(run['faults'].items()))} | "
              f"{', '.join(f'{k} {v}' for k, v in sorted(run['nft_drops'].items())) or '-'} | "
              f"{run['writes_acknowledged']} | {run['writes_lost']} | "
              f"{p50 if p50 is None else round(p50, 2)} / {run['convergence_s_max']} | "
              f"{run['ttl_overruns_beyond_bound']} | {run['failed_rounds']} |")
    print()
    print(f"- rounds: {totals['rounds']} ({totals['failed']} failed)")
    print(f"- faults injected: {', '.join(f'{k} {v}' for k, v in sorted(faults.items()))}")
    print(f"- nftables drops: {', '.join(f'{k} {v}' for k, v in sorted(drops.items()))}")
    print(f"- writes acknowledged: {totals['acked']}, lost: {totals['lost']}")
    if times:
        print(f"- convergence after heal: p50 {statistics.median(times):.2f} s, "
              f"max {max(times):.2f} s (target: max <= {runs[0]['convergence_target_s']} s)")
    if restarts:
        print(f"- rounds that restarted nodes: all nodes answering again after p50 "
              f"{statistics.median(restarts):.2f} s, max {max(restarts):.2f} s")
    print(f"- keys that outlived their TTL beyond the bound: {totals['ttl']}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

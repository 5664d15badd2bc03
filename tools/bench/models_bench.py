#!/usr/bin/env python3
"""CPU cost of validating configuration values through the models (µs per value pair).

    python tools/bench/models_bench.py [--json] [--count N] [--runs R]

* ``linux_us_per_interface_and_route``: one ``linux/interface`` (veth with an address and an
  MTU) and one ``linux/route`` (via a gateway) parsed into the descriptors' specs;
* ``vpp_us_per_interface_and_route``: one ``vpp/interface`` (loopback with an address) and one
  ``vpp/route`` normalised, bypassing the memo (every value new).

Fresh dicts each time (the descriptors' parse caches are keyed by identity); process CPU time,
median of R runs. Compare trees by running it in each (e.g. a ``git archive`` of another commit
with PYTHONPATH pointing at it).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# Measure this work tree's code, whatever the venv's editable install points at.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from southbound.linux.models.interface import parse_interface
from southbound.linux.models.route import parse_route
from southbound.vpp.models import normalize_interface, normalize_route


def pair(i: int) -> tuple[tuple[str, dict[str, Any]], ...]:
    net = f"10.{i // 256 % 256}.{i % 256}"
    return ((f"linux/interface/va{i}", {"type": "veth", "veth": {"peer": f"vb{i}"},
                                        "addresses": [f"{net}.1/24"], "mtu": 1500}),
            (f"linux/route/main/172.16.{i % 256}.0/24/va{i}", {"gateway": f"{net}.2"}),
            (f"vpp/interface/lo{i}", {"type": "loopback", "addresses": [f"{net}.1/24"]}),
            (f"vpp/route/0/172.17.{i % 256}.0/24/10.0.0.{i % 250 + 1}",
             {"outgoing_interface": f"lo{i}"}))


def linux(values: tuple[tuple[str, dict[str, Any]], ...]) -> None:
    parse_interface(*values[0])
    parse_route(*values[1])


def vpp(values: tuple[tuple[str, dict[str, Any]], ...]) -> None:
    normalize_interface.__wrapped__(*values[2])  # type: ignore[attr-defined]
    normalize_route.__wrapped__(*values[3])  # type: ignore[attr-defined]


def measure(fn: Callable[[tuple[tuple[str, dict[str, Any]], ...]], None], count: int) -> float:
    inputs = [pair(i) for i in range(count)]
    started = time.process_time()
    for values in inputs:
        fn(values)
    return (time.process_time() - started) / count * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    result = {name: round(statistics.median(measure(fn, args.count) for _ in range(args.runs)), 1)
              for name, fn in (("linux_us_per_interface_and_route", linux),
                               ("vpp_us_per_interface_and_route", vpp))}
    if args.json:
        print(json.dumps(result, sort_keys=True))
    else:
        for name, value in result.items():
            print(f"{name:<36} {value:.1f}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""KVScheduler benchmark with a no-op southbound.

Metrics (targets from the scheduler issue):
  txn_10k_s               one transaction of 10 k values (interfaces, derived addresses, routes
                          depending on them)                                   target <= 0.5 s
  txn_100k_s              the same with 100 k values                           target <= 6 s
  single_txn_on_100k_ms   one value changed in a 100 k-value graph             target <= 1 ms
  resync_100k_s           full resync of 100 k values, SB already equal        target <= 3 s
The same metrics at the small size are the in-run baseline: the ratios large/small show how cost
scales (10x for a linear bulk transaction, ~1x for a single change).

Usage: scheduler_bench.py [--quick] [--json] [--runs N]
  --quick uses 1 k / 10 k values instead of 10 k / 100 k and fewer runs.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from scratch import private_tempdir

from scheduler import Dependency, Descriptor, KVScheduler, ValueOrigin

IFACE = "config/vpp/interface/"
ADDR = "config/vpp/interface/address/"
ROUTE = "config/vpp/route/"


class NoopSB:
    """Remembers what exists (for Retrieve) and does nothing else."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}

    def create(self, key: str, value: Any) -> int:
        self.values[key] = value
        return len(self.values)

    def update(self, key: str, old: Any, new: Any, metadata: Any) -> Any:
        self.values[key] = new
        return metadata

    def delete(self, key: str, value: Any, metadata: Any) -> None:
        self.values.pop(key, None)

    def retriever(
        self, selector: Callable[[str], bool]
    ) -> Callable[[list[tuple[str, Any, Any]]], list[tuple[str, Any, Any, ValueOrigin]]]:
        def retrieve(
            correlate: list[tuple[str, Any, Any]],
        ) -> list[tuple[str, Any, Any, ValueOrigin]]:
            metadata = {key: meta for key, _, meta in correlate}
            return [
                (key, value, metadata.get(key), ValueOrigin.FROM_NB)
                for key, value in self.values.items()
                if selector(key)
            ]

        return retrieve


def is_iface(key: str) -> bool:
    return key.startswith(IFACE) and not key.startswith(ADDR)


def is_route(key: str) -> bool:
    return key.startswith(ROUTE)


def iface_addresses(key: str, value: dict[str, Any]) -> list[tuple[str, Any]]:
    name = key[len(IFACE) :]
    return [(f"{ADDR}{name}/{ip}", {}) for ip in value["ips"]]


def route_deps(key: str, value: dict[str, Any]) -> list[Dependency]:
    return [Dependency(label="via", key=f"{ADDR}{value['iface']}/{value['via_ip']}")]


def new_scheduler() -> tuple[KVScheduler, NoopSB]:
    sb = NoopSB()
    sched = KVScheduler()
    sched.register_descriptor(
        Descriptor(
            name="iface",
            key_selector=is_iface,
            key_label=lambda key: key[len(IFACE) :],
            create=sb.create,
            update=sb.update,
            delete=sb.delete,
            retrieve=sb.retriever(is_iface),
            derived_values=iface_addresses,
            with_metadata=True,
        )
    )
    sched.register_descriptor(
        Descriptor(
            name="route",
            key_selector=is_route,
            create=sb.create,
            update=sb.update,
            delete=sb.delete,
            retrieve=sb.retriever(is_route),
            dependencies=route_deps,
            retrieve_dependencies=("iface",),
        )
    )
    return sched, sb


def workload(n_values: int) -> dict[str, Any]:
    """n_values values: half interfaces (each deriving one address), half routes via them."""
    out: dict[str, Any] = {}
    interfaces = n_values // 2
    for i in range(interfaces):
        ip = f"10.{i // 65536}.{(i // 256) % 256}.{i % 256}"
        out[f"{IFACE}tap{i}"] = {"mtu": 1500, "ips": [f"{ip}/32"]}
    for i in range(n_values - interfaces):
        j = i % interfaces
        ip = f"10.{j // 65536}.{(j // 256) % 256}.{j % 256}"
        out[f"{ROUTE}172.{i // 65536}.{(i // 256) % 256}.{i % 256}/32"] = {
            "iface": f"tap{j}",
            "via_ip": f"{ip}/32",
        }
    return out


def timed(fn: Callable[[], Any]) -> float:
    gc.collect()
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def bulk_txn(n_values: int) -> tuple[float, KVScheduler, dict[str, Any]]:
    sched, _ = new_scheduler()
    values = workload(n_values)
    txn = sched.start_txn()
    for key, value in values.items():
        txn.set_value(key, value)
    elapsed = timed(txn.commit)
    return elapsed, sched, values


def measure(n_values: int, runs: int, single_runs: int) -> dict[str, float]:
    bulk: list[float] = []
    singles: list[float] = []
    resyncs: list[float] = []
    for _ in range(runs):
        elapsed, sched, values = bulk_txn(n_values)
        bulk.append(elapsed)
        try:
            route_key = next(key for key in values if key.startswith(ROUTE))
            for k in range(single_runs):
                value = dict(values[route_key], metric=k + 1)
                txn = sched.start_txn().set_value(route_key, value)
                singles.append(timed(txn.commit))
            values[route_key] = value
            resyncs.append(timed(partial(sched.resync, values, kind="full")))
        finally:
            sched.close()
    return {
        "txn_s": statistics.median(bulk),
        "single_txn_ms": statistics.median(singles) * 1000.0,
        "resync_s": statistics.median(resyncs),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="1k/10k values, fewer runs")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--runs", type=int, default=None, help="runs per size (median)")
    args = parser.parse_args()
    private_tempdir("kvbench")
    small, large = (1_000, 10_000) if args.quick else (10_000, 100_000)
    runs = args.runs or 3
    base = measure(small, runs + 2, 50)
    big = measure(large, runs, 50)
    s_label = f"{small // 1000}k"
    l_label = f"{large // 1000}k"
    result: dict[str, Any] = {
        f"txn_{s_label}_s": base["txn_s"],
        f"txn_{l_label}_s": big["txn_s"],
        f"single_txn_on_{s_label}_ms": base["single_txn_ms"],
        f"single_txn_on_{l_label}_ms": big["single_txn_ms"],
        f"resync_{s_label}_s": base["resync_s"],
        f"resync_{l_label}_s": big["resync_s"],
        "ratio_txn": big["txn_s"] / base["txn_s"],
        "ratio_single_txn": big["single_txn_ms"] / base["single_txn_ms"],
        "ratio_resync": big["resync_s"] / base["resync_s"],
        "sizes": [small, large],
        "runs": runs,
        "quick": args.quick,
    }
    if args.json:
        print(json.dumps(result))
        return 0
    targets = {
        "txn_10k_s": 0.5,
        "txn_100k_s": 6.0,
        "single_txn_on_100k_ms": 1.0,
        "resync_100k_s": 3.0,
    }
    print(f"KVScheduler benchmark, no-op southbound, medians of {runs}+ runs (shared, noisy VM)")
    print(f"{'metric':<28}{'value':>12}  {'target':>8}")
    for key, value in result.items():
        if key.startswith(("txn_", "single_", "resync_")):
            target = targets.get(key)
            mark = "" if target is None else ("  ok" if value <= target else "  MISSED")
            shown = "" if target is None else f"<= {target}"
            print(f"{key:<28}{value:>12.4f}  {shown:>8}{mark}")
    print(
        f"{'ratio txn ' + l_label + '/' + s_label:<28}{result['ratio_txn']:>12.2f}  (linear = 10)"
    )
    print(f"{'ratio single txn':<28}{result['ratio_single_txn']:>12.2f}  (O(touched) = ~1)")
    print(f"{'ratio resync':<28}{result['ratio_resync']:>12.2f}  (linear = 10)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

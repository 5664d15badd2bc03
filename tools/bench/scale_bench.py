#!/usr/bin/env python3
"""Scale benchmark: isolated clusters of 8 to 64 nodes, all full nodes or with leaves (issue 21).

For each N in --sizes and each variant, `cluster.up(N, isolated=True, ...)` (what `kvmesh cluster
up --isolated` runs: every node, KvStore + agent, in a network namespace of its own on a bridge):
  full    every node a full node, the --topology (random, degree 3, seed 0) over all N
  leaves  --core 8: n1..n8 full nodes in the --topology, n9..nN KvStore leaves (`node run --leaf
          --agent`: they hold only what their agent needs), round-robin on the core; skipped
          when N <= the core (it would be the full variant)
Metrics, `<name>_<N>_<variant>` (e.g. up_s_64_leaves; targets at 64 with leaves):
  up_s                 `cluster.up` from call to return: the lab, the keys, every node answering
                       and every agent's REST API answering                                <= 60
  rss_total_mib        RSS summed over every node and agent process, idle: SETTLE_S after every
                       agent's device is KNOWN                                              <= 4096
  pss_total_mib        the same as PSS (/proc/PID/smaps_rollup): pages shared between processes
                       (interpreter, libraries) counted once, not N times
  rss_node_p50_mib, rss_agent_p50_mib   medians over the nodes (leaves included)
  cpu_idle_pct         CPU of all those processes over --cpu-window s right after, % of one core
  config_far_p50_ms    config -> applied at the node farthest from n1 (most hops; with leaves, a
                       leaf): a bridge config set on n1 until n1 sees its status CONFIGURED
                       (cluster_bench's measure_config), p50 of --samples                  <= 1000
  config_far_p90_ms, far_hops; baseline hop_far_p50_ms: a plain key set on n1 until the farthest
                       node publishes it (interleaved with the config samples)
  conv_10k_keys_s      10 000 plain keys set on n1 in batches of 1 000 until every FULL node holds
                       them all with equal signatures (cluster_bench's converge), median of --runs
  conv_cpu_nodes_s     CPU of all node processes during one convergence run (median)
  conv_leaf_keys_gained, conv_leaf_received_kv   (leaves) keys the leaves gained and key-values
                       they received during the convergence runs: 0, the keys are not their share
  conv_leaf_skipped_kv (leaves) key-values the core nodes did not flood to their leaves
  wall_s               the whole measurement of that cluster, up to down
Also: total_wall_s, load1_start, load1_end (/proc/loadavg).

Needs root (network namespaces). Each cluster is torn down (`cluster.down`) however the run ends,
and its run directory removed (kept with --run-dir).

Usage: scale_bench.py [--sizes 8,16,32,64] [--variants full,leaves] [--core 8] [--topology random]
                      [--samples 10] [--runs 3] [--cpu-window 30] [--json] [--quick]
  --quick: sizes 4,6, core 2, 3 samples, 1 run, short idle windows: a smoke test of a minute.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
from cluster_bench import (  # noqa: E402  (tools/bench/cluster_bench.py)
    IDLE_CPU_WINDOW_S,
    IDLE_SETTLE_S,
    N_KEYS,
    BenchError,
    converge,
    measure_config,
    num_lasting_keys,
    on_sigterm,
    percentile,
    running_cluster,
    say,
    wait_devices_known,
)
from procstat import (  # noqa: E402  (tools/bench/procstat.py)
    CLOCK_TICKS,
    ProcStatError,
    cpu_ticks,
    node_agent_pids,
    pss_mib,
    rss_mib,
)
from scratch import private_tempdir  # noqa: E402  (tools/bench/scratch.py)

from kvmesh import cluster  # noqa: E402
from kvstore.client import KvStoreClient  # noqa: E402

TARGETS_64_LEAVES = {"up_s": 60.0, "rss_total_mib": 4096.0, "config_far_p50_ms": 1000.0}
ORIGIN = "n1"  # where configuration and keys are written: always a core node
UP_TIMEOUT_S = 300.0  # per wait inside `up` (64 nodes and agents starting on 2 cores)
CONVERGENCE_TIMEOUT_S = 600.0
# Between two rounds of counter reads in convergence: a round over 64 nodes costs this process
# CPU the nodes need; 50 ms is still small against convergence times of seconds.
CONVERGENCE_POLL_S = 0.05
VARIANTS = ("full", "leaves")


@dataclass(frozen=True)
class Settings:
    topology: str
    core: int
    samples: int
    runs: int
    settle_s: float
    cpu_window_s: float


# ---------------------------------------------------------------------- topology


def farthest_from(state: cluster.ClusterState, origin: str) -> tuple[str, int]:
    """The node most hops away from `origin` over the cluster's peering (the last in node order
    among equals), and its distance."""
    hops = {origin: 0}
    queue = deque([origin])
    while queue:
        node = queue.popleft()
        for peer in state.nodes[node].peers:
            if peer not in hops:
                hops[peer] = hops[node] + 1
                queue.append(peer)
    if len(hops) != len(state.nodes):
        raise BenchError(f"the cluster is not connected: {sorted(set(state.nodes) - set(hops))}")
    names = list(state.nodes)
    far = max(names, key=lambda name: (hops[name], names.index(name)))
    return far, hops[far]


# ---------------------------------------------------------------------- measurements


def idle_footprint(state: cluster.ClusterState, settings: Settings) -> dict[str, float]:
    """Memory after `settle_s` of idleness, then CPU over `cpu_window_s`, of every process."""
    time.sleep(settings.settle_s)  # the measurement is of an idle cluster: nothing to wait on
    pairs = node_agent_pids(state)
    pids = [pid for pair in pairs.values() for pid in pair]
    before = sum(cpu_ticks(pid) for pid in pids)
    started = time.monotonic()
    time.sleep(settings.cpu_window_s)  # the measurement window itself
    ticks = sum(cpu_ticks(pid) for pid in pids) - before
    window = time.monotonic() - started
    return {
        "rss_total_mib": round(sum(rss_mib(pid) for pid in pids), 1),
        "pss_total_mib": round(sum(pss_mib(pid) for pid in pids), 1),
        "rss_node_p50_mib": round(statistics.median(rss_mib(n) for n, _a in pairs.values()), 1),
        "rss_agent_p50_mib": round(statistics.median(rss_mib(a) for _n, a in pairs.values()), 1),
        "cpu_idle_pct": round(100.0 * ticks / CLOCK_TICKS / window, 2),
    }


def config_to_far(state: cluster.ClusterState, samples: int) -> dict[str, float]:
    far, hops = farthest_from(state, ORIGIN)
    say(f"  config -> applied: {samples} samples, {ORIGIN} -> {far} ({hops} hops"
        f"{', a leaf' if state.nodes[far].leaf else ''})")
    result = measure_config(state, samples, hop_only=False, origin=ORIGIN, far=far)
    return {
        "far_hops": hops,
        "config_far_p50_ms": round(percentile(result.total_ms, 50), 1),
        "config_far_p90_ms": round(percentile(result.total_ms, 90), 1),
        "hop_far_p50_ms": round(percentile(result.hop_ms, 50), 1),
    }


def _sum_counter(clients: dict[str, KvStoreClient], read: Callable[[KvStoreClient], int]) -> int:
    return sum(read(client) for client in clients.values())


def _received(client: KvStoreClient) -> int:
    return client.counters().get("kvstore.received_key_vals", 0)


def _skipped(client: KvStoreClient) -> int:
    return client.counters().get("kvstore.leaf.flood_skipped_key_vals", 0)


def convergence(state: cluster.ClusterState, runs: int, tag: str) -> dict[str, float]:
    """10k keys on n1 until every full node holds them (median of `runs`); with leaves, also
    what the leaves got of them (nothing: the keys are outside their share)."""
    full = [name for name, info in state.nodes.items() if not info.leaf]
    leaves = [name for name, info in state.nodes.items() if info.leaf]
    leaf_clients = {name: state.client(name, timeout_s=30.0) for name in leaves}
    core_clients = {name: state.client(name, timeout_s=30.0) for name in full}
    try:
        keys_before = _sum_counter(leaf_clients, num_lasting_keys)
        received_before = _sum_counter(leaf_clients, _received)
        skipped_before = _sum_counter(core_clients, _skipped)
        totals, cpu = [], []
        for run in range(runs):
            done = converge(state, f"bench/scale/{tag}-{run}/", nodes=full,
                            poll_s=CONVERGENCE_POLL_S, timeout_s=CONVERGENCE_TIMEOUT_S)
            totals.append(done.total_s)
            cpu.append(done.cpu_nodes_s)
            say(f"  convergence run {run + 1}/{runs}: {len(full)} full nodes in "
                f"{done.total_s:.2f} s")
        result = {"conv_10k_keys_s": round(statistics.median(totals), 2),
                  "conv_cpu_nodes_s": round(statistics.median(cpu), 1)}
        if leaves:
            result["conv_leaf_keys_gained"] = \
                _sum_counter(leaf_clients, num_lasting_keys) - keys_before
            result["conv_leaf_received_kv"] = _sum_counter(leaf_clients, _received) \
                - received_before
            result["conv_leaf_skipped_kv"] = _sum_counter(core_clients, _skipped) \
                - skipped_before
    finally:
        for client in (*leaf_clients.values(), *core_clients.values()):
            client.close()
    return result


def measure_cluster(run_dir: Path, nodes: int, variant: str,
                    settings: Settings) -> dict[str, float]:
    core = settings.core if variant == "leaves" else None
    started = time.monotonic()
    with running_cluster(run_dir, nodes, settings.topology, True, isolated=True, core=core,
                         timeout_s=UP_TIMEOUT_S) as state:
        result: dict[str, float] = {"up_s": round(time.monotonic() - started, 2)}
        with state.client(ORIGIN, timeout_s=30.0) as client:
            wait_devices_known(client, list(state.nodes), timeout_s=UP_TIMEOUT_S)
        say(f"  every device KNOWN; idle {settings.settle_s:g} s, then CPU over "
            f"{settings.cpu_window_s:g} s")
        result.update(idle_footprint(state, settings))
        result.update(config_to_far(state, settings.samples))
        result.update(convergence(state, settings.runs, f"{os.getpid()}-{nodes}-{variant}"))
    result["wall_s"] = round(time.monotonic() - started, 1)
    return result


# ---------------------------------------------------------------------- report


def load1() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def markdown_table(results: dict[str, float], sizes: list[int], core: int) -> str:
    """One row per cluster measured, ready for BENCHMARKS.md."""
    lines = [
        "| nodes | variant | up s | RSS total MiB (per node) | PSS total MiB | idle CPU % "
        "| config→applied p50 / p90 ms (far: hops) | plain key hop p50 ms "
        "| 10k keys converged s (full nodes) |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for size in sizes:
        for variant in VARIANTS:
            if f"up_s_{size}_{variant}" in results:
                lines.append(table_row(results, size, variant, core))
    return "\n".join(lines)


def table_row(results: dict[str, float], size: int, variant: str, core: int) -> str:
    def get(name: str) -> float:
        return results[f"{name}_{size}_{variant}"]

    label = "full" if variant == "full" else f"core {core} + {size - core} leaves"
    return (f"| {size} | {label} | {get('up_s'):.1f} | {get('rss_total_mib'):.0f} "
            f"({get('rss_total_mib') / size:.0f}) | {get('pss_total_mib'):.0f} "
            f"| {get('cpu_idle_pct'):.1f} | {get('config_far_p50_ms'):.0f} / "
            f"{get('config_far_p90_ms'):.0f} ({get('far_hops'):.0f}) "
            f"| {get('hop_far_p50_ms'):.0f} | {get('conv_10k_keys_s'):.2f} |")


def verdicts(results: dict[str, float]) -> list[str]:
    lines = []
    for metric, target in TARGETS_64_LEAVES.items():
        name = f"{metric}_64_leaves"
        if name in results:
            ok = "ok" if results[name] <= target else "MISSED"
            lines.append(f"{name} {results[name]:g} (target <= {target:g}: {ok})")
    return lines


# ---------------------------------------------------------------------- main


def parse_sizes(text: str) -> list[int]:
    sizes = [int(part) for part in text.split(",") if part]
    if not sizes or min(sizes) < 2 or max(sizes) > 64:
        raise argparse.ArgumentTypeError("sizes are node counts from 2 to 64")
    return sizes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--sizes", type=parse_sizes, default=None, help="[8,16,32,64]")
    parser.add_argument("--variants", default=",".join(VARIANTS), help="[full,leaves]")
    parser.add_argument("--core", type=int, default=None, help="full nodes of `leaves` [8]")
    parser.add_argument("--topology", choices=cluster.TOPOLOGIES, default="random",
                        help="of the full nodes (random: degree 3, seed 0) [random]")
    parser.add_argument("--samples", type=int, default=None, help="config samples [10]")
    parser.add_argument("--runs", type=int, default=None, help="convergence runs [3]")
    parser.add_argument("--cpu-window", type=float, default=None,
                        help=f"idle CPU window, s [{IDLE_CPU_WINDOW_S:g}]")
    parser.add_argument("--quick", action="store_true", help="a smoke test of a minute")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--run-dir", type=Path, default=None,
                        help="keep the clusters' run directories (logs) here")
    args = parser.parse_args(argv)
    variants = [v for v in args.variants.split(",") if v]
    if not set(variants) <= set(VARIANTS):
        parser.error(f"--variants: some of {', '.join(VARIANTS)}")
    if os.geteuid() != 0:
        parser.error("needs root: every node runs in a network namespace of its own")
    quick = args.quick
    sizes = args.sizes or ([4, 6] if quick else [8, 16, 32, 64])
    settings = Settings(
        topology=args.topology, core=args.core or (2 if quick else 8),
        samples=args.samples or (3 if quick else 10), runs=args.runs or (1 if quick else 3),
        settle_s=2.0 if quick else IDLE_SETTLE_S,
        cpu_window_s=args.cpu_window or (5.0 if quick else IDLE_CPU_WINDOW_S))
    if settings.core < 1:
        parser.error("--core must be at least 1")

    private_tempdir("kvbench")
    signal.signal(signal.SIGTERM, on_sigterm)
    base = args.run_dir or Path(tempfile.mkdtemp(prefix="kvmesh-scale-bench-"))
    results: dict[str, float] = {"load1_start": load1()}
    started = time.monotonic()
    try:
        for size in sizes:
            for variant in variants:
                if variant == "leaves" and size <= settings.core:
                    say(f"{size} nodes, leaves: skipped (a core of {settings.core} leaves none)")
                    continue
                measured = measure_cluster(base / f"{size}-{variant}", size, variant, settings)
                results.update({f"{k}_{size}_{variant}": v for k, v in measured.items()})
                say(f"{size} nodes, {variant}: {json.dumps(measured)}")
    except KeyboardInterrupt:
        say("interrupted: clusters torn down")
        return 130
    except (BenchError, ProcStatError, cluster.ClusterError) as exc:
        say(f"error: {exc}")
        return 1
    finally:
        if args.run_dir is None:
            shutil.rmtree(base, ignore_errors=True)
    results["total_wall_s"] = round(time.monotonic() - started, 1)
    results["load1_end"] = load1()
    if args.json:
        print(json.dumps(results, sort_keys=True))
        return 0
    print(f"scale_bench: isolated clusters, {settings.topology} topology of the full nodes, "
          f"config from {ORIGIN}; {settings.samples} config samples, {settings.runs} "
          f"convergence run(s) of {N_KEYS} keys; {results['total_wall_s']:.0f} s in all, "
          f"load {results['load1_start']:.2f} -> {results['load1_end']:.2f}")
    print(markdown_table(results, sizes, settings.core))
    for line in verdicts(results):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())

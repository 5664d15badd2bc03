#!/usr/bin/env python3
"""Cluster benchmark: a local ring of real kvmesh processes (`kvmesh.cluster.up`).

Metrics (targets from the cluster issue; 2-core machine):
  config_to_applied_p50_ms  a config value set on n1 for the node FARTHEST away in the ring (n5 of
                            8), until n1's publication stream shows its status CONFIGURED (the
                            agent created a Linux bridge in that node's namespace)   <= 150
  config_to_applied_p90_ms  the same, p90
  convergence_10k_keys_s    10 000 keys set on n1 in batched KEY_SETs (as a client would), until
                            every node holds them all and every node's `kvmesh signature` of the
                            prefix is equal; median of runs, fresh key prefix each run  <= 2

Baselines measured in the same run (ratio = metric / baseline):
  config_to_applied: hop_to_farthest_p50_ms, a plain key set on n1 until the farthest node
    publishes it (the KvStore flood alone, no agent; samples interleaved with the metric's);
  convergence: convergence_10k_keys_one_peer_s, the same 10 000 keys set on n1 of a 2-node
    cluster (same processes: node + agent), until its single direct peer has them all.

Breakdown of config_to_applied (p50 of each segment, for finding where the time goes):
  flood_out   set on n1 -> the config key published by the farthest node
  agent       -> the status record's timestamp (agent coalescing + scheduler + netlink)
  publish     -> the status key published by the farthest node (status thread + KEY_SET)
  flood_back  -> the status key published by n1
The status record's "time" is wall clock (ms resolution): the agent/publish split is +-1 ms.

Needs root for the per-node network namespaces (the Linux southbound). Without root, or with
--no-namespaces, config_to_applied cannot be measured (agents have no southbound): only the hop
baseline and convergence are, and the output says so.

Usage: cluster_bench.py [--quick] [--json] [--nodes N] [--samples N] [--runs N] [--no-namespaces]
  --quick: a 4-node ring (farthest node n3), 5 samples, 1 convergence run: well under a minute.
The cluster runs from a temporary directory and is always torn down (also on Ctrl-C / SIGTERM).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import zmq  # noqa: E402

from kvmesh import cluster  # noqa: E402
from kvmesh.agent.desired import encode_config_value  # noqa: E402
from kvmesh.agent.keys import config_key, device_key, status_key  # noqa: E402
from kvmesh.agent.status import decode_status  # noqa: E402
from kvmesh.cli.kvstore_cmds import store_signature  # noqa: E402
from kvstore import wire  # noqa: E402
from kvstore.client import KvStoreClient, make_value  # noqa: E402
from kvstore.gen.kvstore_thrift.ttypes import Value  # noqa: E402

TARGETS = {"config_to_applied_p50_ms": 150.0, "convergence_10k_keys_s": 2.0}
N_KEYS = 10_000
KEY_SET_BATCH = 1_000
VALUE_BYTES = 100
WARMUP_SAMPLES = 2
SAMPLE_TIMEOUT_S = 20.0
CONVERGENCE_TIMEOUT_S = 120.0
BRIDGE = {"type": "bridge"}


class BenchError(RuntimeError):
    pass


# ---------------------------------------------------------------------- statistics


def percentile(samples: list[float], pct: float) -> float:
    """Nearest-rank percentile (no interpolation: every reported number was measured)."""
    ordered = sorted(samples)
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[rank - 1]


def median(samples: list[float]) -> float:
    return float(statistics.median(samples))


# ---------------------------------------------------------------------- publication streams


@dataclass(frozen=True)
class Event:
    """One key-value of a publication, and when this process received it (monotonic s)."""

    stream: str
    key: str
    value: Value
    at: float


Milestone = Callable[[Event], bool]


class Streams:
    """SUB sockets on several nodes' publication streams, polled together, so events seen on
    different nodes during one sample get timestamps from the same clock."""

    def __init__(self, context: zmq.Context[zmq.Socket[bytes]]) -> None:
        self._context = context
        self._poller = zmq.Poller()
        self._streams: dict[zmq.Socket[bytes], tuple[str, tuple[str, ...]]] = {}

    def add(self, name: str, pub_url: str, prefixes: tuple[str, ...]) -> None:
        sock = self._context.socket(zmq.SUB)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.SUBSCRIBE, b"")  # publications carry no topic: filter here
        sock.connect(pub_url)
        self._poller.register(sock, zmq.POLLIN)
        self._streams[sock] = (name, prefixes)

    @property
    def names(self) -> set[str]:
        return {name for name, _prefixes in self._streams.values()}

    def events(self, timeout_s: float) -> Iterator[Event]:
        """Events received within `timeout_s` (yields as soon as something arrives)."""
        ready = dict(self._poller.poll(max(0, int(timeout_s * 1000))))
        for sock in ready:
            name, prefixes = self._streams[sock]
            while True:
                try:
                    data = sock.recv(zmq.NOBLOCK)
                except zmq.Again:
                    break
                at = time.monotonic()
                publication = wire.decode_publication(data)
                for key, value in (publication.key_vals or {}).items():
                    if key.startswith(prefixes):
                        yield Event(name, key, value, at)

    def wait(self, milestones: dict[str, Milestone], timeout_s: float) -> dict[str, float]:
        """The time each milestone was first met; BenchError if some are not met in time."""
        hit: dict[str, float] = {}
        deadline = time.monotonic() + timeout_s
        while len(hit) < len(milestones):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                missing = ", ".join(sorted(set(milestones) - set(hit)))
                raise BenchError(f"not seen within {timeout_s:g}s: {missing}")
            for event in self.events(remaining):
                for name, met in milestones.items():
                    if name not in hit and met(event):
                        hit[name] = event.at
        return hit

    def close(self) -> None:
        for sock in self._streams:
            sock.close(linger=0)
        self._streams.clear()


PROBE_PREFIX = "bench/probe/"


def connect_streams(streams: Streams, client: KvStoreClient, origin: str) -> None:
    """ZeroMQ subscriptions take a moment to reach the publisher: publish probes until every
    stream has delivered one, so no sample's event can be missed."""
    pending = streams.names
    for attempt in range(100):
        key = f"{PROBE_PREFIX}{attempt}"
        client.set({key: make_value(b"probe", version=1, originator_id=origin)})
        deadline = time.monotonic() + 0.2
        while pending and time.monotonic() < deadline:
            for event in streams.events(deadline - time.monotonic()):
                if event.key == key:
                    pending.discard(event.stream)
        if not pending:
            return
    raise BenchError(f"publication streams never connected: {sorted(pending)}")


# ---------------------------------------------------------------------- the clusters


@contextmanager
def running_cluster(run_dir: Path, nodes: int, topology: str,
                    namespaces: bool) -> Iterator[cluster.ClusterState]:
    say(f"starting a {nodes}-node {topology} in {run_dir}"
        f"{' (namespaces kvmesh-n1..)' if namespaces else ' (no namespaces)'}")
    started = time.monotonic()
    state = cluster.up(nodes, topology, run_dir=run_dir, namespaces=namespaces)
    say(f"  up in {time.monotonic() - started:.1f}s")
    try:
        yield state
    finally:
        say(f"tearing down the {nodes}-node cluster")
        with no_interrupts():
            cluster.down(run_dir)


def wait_devices_known(client: KvStoreClient, names: list[str], timeout_s: float = 60.0) -> None:
    """Until every agent's Linux device is KNOWN (as seen from the client's node): before that,
    agents hold configuration back and the first samples would measure reconciliation."""
    keys = [device_key(name, "linux") for name in names]
    deadline = time.monotonic() + timeout_s
    while True:
        found = client.get(keys)
        states = {k: (decode_status(v.value) or {}).get("state") for k, v in found.items()}
        if all(states.get(k) == "KNOWN" for k in keys):
            return
        if time.monotonic() > deadline:
            raise BenchError(f"devices not KNOWN after {timeout_s:g}s: "
                             f"{ {k: states.get(k) for k in keys} }")
        time.sleep(0.05)  # polling interval of a readiness check, not a synchronisation


def farthest_node(names: list[str]) -> str:
    """In a ring, the node half-way round from the first one."""
    return names[len(names) // 2]


# ---------------------------------------------------------------------- config -> applied


@dataclass
class ConfigSamples:
    total_ms: list[float]
    hop_ms: list[float]
    segments_ms: dict[str, list[float]]


SEGMENTS = ("flood_out", "agent", "publish", "flood_back")


def is_configured(event: Event, key: str) -> bool:
    if event.key != key or not event.value.value:
        return False
    record = decode_status(event.value.value)
    return record is not None and record.get("state") == "CONFIGURED"


def configured_at(event_value: Value) -> float:
    record = decode_status(event_value.value) or {}
    return float(record.get("time", 0.0))


def measure_config(state: cluster.ClusterState, samples: int,
                   hop_only: bool) -> ConfigSamples:
    names = list(state.nodes)
    origin, far = names[0], farthest_node(names)
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()
    client = KvStoreClient(state.nodes[origin].cmd_url, timeout_s=10.0)
    streams = Streams(context)
    result = ConfigSamples([], [], {s: [] for s in SEGMENTS})
    try:
        if not hop_only:
            wait_devices_known(client, names)
        watched = (PROBE_PREFIX, "bench/hop/", config_key(far, ""), status_key(far, ""))
        streams.add(origin, state.nodes[origin].pub_url, watched)
        streams.add(far, state.nodes[far].pub_url, watched)
        connect_streams(streams, client, origin)
        # Wall clock -> monotonic, for the status record's timestamp.
        wall_offset = time.time() - time.monotonic()
        for i in range(WARMUP_SAMPLES + samples):
            counted = i >= WARMUP_SAMPLES
            hop = hop_sample(client, streams, origin, far, i)
            if counted:
                result.hop_ms.append(hop)
            if hop_only:
                continue
            total, segments = config_sample(client, streams, origin, far, i, wall_offset)
            if counted:
                result.total_ms.append(total)
                for name, ms in segments.items():
                    result.segments_ms[name].append(ms)
    finally:
        streams.close()
        client.close()
    return result


def hop_sample(client: KvStoreClient, streams: Streams, origin: str, far: str, i: int) -> float:
    key = f"bench/hop/{i}"
    value = make_value(b"h" * VALUE_BYTES, version=1, originator_id=origin)
    start = time.monotonic()
    client.set({key: value})
    hit = streams.wait({"seen": lambda e: e.stream == far and e.key == key}, SAMPLE_TIMEOUT_S)
    return (hit["seen"] - start) * 1000


def config_sample(client: KvStoreClient, streams: Streams, origin: str, far: str, i: int,
                  wall_offset: float) -> tuple[float, dict[str, float]]:
    model_key = f"linux/interface/kvb{i}"
    ckey, skey = config_key(far, model_key), status_key(far, model_key)
    applied: dict[str, float] = {}

    def status_on_far(event: Event) -> bool:
        if event.stream == far and is_configured(event, skey):
            applied["at"] = configured_at(event.value) - wall_offset
            return True
        return False

    value = make_value(encode_config_value(BRIDGE), version=1, originator_id=origin)
    start = time.monotonic()
    client.set({ckey: value})
    hit = streams.wait({
        "config@far": lambda e: e.stream == far and e.key == ckey,
        "status@far": status_on_far,
        "status@origin": lambda e: e.stream == origin and is_configured(e, skey),
    }, SAMPLE_TIMEOUT_S)
    marks = [start, hit["config@far"], applied["at"], hit["status@far"], hit["status@origin"]]
    segments = {name: (marks[n + 1] - marks[n]) * 1000 for n, name in enumerate(SEGMENTS)}
    return (hit["status@origin"] - start) * 1000, segments


# ---------------------------------------------------------------------- convergence


def key_batches(prefix: str, origin: str) -> list[dict[str, Value]]:
    batches: list[dict[str, Value]] = []
    for first in range(0, N_KEYS, KEY_SET_BATCH):
        batches.append({
            f"{prefix}{i:05d}": make_value(f"{i:010d}".encode() * (VALUE_BYTES // 10),
                                           version=1, originator_id=origin)
            for i in range(first, min(N_KEYS, first + KEY_SET_BATCH))
        })
    return batches


def signature_of(client: KvStoreClient, prefix: str) -> tuple[str, int]:
    key_vals = client.hash_dump(prefix)
    return store_signature(key_vals), len(key_vals)


def converge(state: cluster.ClusterState, prefix: str) -> tuple[float, dict[str, float]]:
    """Seconds from the first KEY_SET on the first node until every node holds the N_KEYS keys
    with equal signatures; plus when each node first held them all."""
    names = list(state.nodes)
    origin = names[0]
    clients = {name: KvStoreClient(info.cmd_url, timeout_s=30.0)
               for name, info in state.nodes.items()}
    try:
        base = {name: c.node_info(refresh=True).num_keys or 0 for name, c in clients.items()}
        batches = key_batches(prefix, origin)
        done: dict[str, float] = {}
        start = time.monotonic()
        for batch in batches:
            refused = clients[origin].set(batch)
            if refused:
                raise BenchError(f"{len(refused)} key(s) refused, e.g. {next(iter(refused))}")
        deadline = start + CONVERGENCE_TIMEOUT_S
        while True:
            for name, c in clients.items():
                if name not in done and (c.node_info(refresh=True).num_keys or 0) >= (
                        base[name] + N_KEYS):
                    done[name] = time.monotonic() - start
            if len(done) == len(clients):
                # Counts are only the cheap pre-check: the `kvmesh signature` of the prefix
                # must be the same everywhere (a count could hide a stale or missing value).
                sigs = {name: signature_of(c, prefix) for name, c in clients.items()}
                if len(set(sigs.values())) == 1 and next(iter(sigs.values()))[1] == N_KEYS:
                    return max(done.values()), done
            if time.monotonic() > deadline:
                raise BenchError(f"no convergence within {CONVERGENCE_TIMEOUT_S:g}s "
                                 f"(complete: {sorted(done)})")
            time.sleep(0.002)  # polling interval: keeps the poller off a busy 2-core machine
    finally:
        for c in clients.values():
            c.close()


def measure_convergence(ring: cluster.ClusterState, pair: cluster.ClusterState,
                        runs: int) -> tuple[list[float], list[float], dict[str, list[float]]]:
    """Runs alternate between the ring and the pair so both see the same machine load."""
    ring_s: list[float] = []
    pair_s: list[float] = []
    per_node: dict[str, list[float]] = {name: [] for name in ring.nodes}
    tag = os.getpid()
    for run in range(runs):
        total, done = converge(ring, f"bench/conv/{tag}-{run}/")
        ring_s.append(total)
        for name, t in done.items():
            per_node[name].append(t)
        one_peer, _ = converge(pair, f"bench/conv/{tag}-{run}/")
        pair_s.append(one_peer)
        say(f"  convergence run {run + 1}/{runs}: ring {total:.3f}s, one peer {one_peer:.3f}s")
    return ring_s, pair_s, per_node


# ---------------------------------------------------------------------- process plumbing


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@contextmanager
def no_interrupts() -> Iterator[None]:
    """Teardown must run to the end even if Ctrl-C is pressed again."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def on_sigterm(_signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt("SIGTERM")


def existing_namespaces(nodes: int) -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False)
    present = {line.split()[0] for line in out.stdout.splitlines() if line.strip()}
    return sorted(f"kvmesh-n{i}" for i in range(1, nodes + 1) if f"kvmesh-n{i}" in present)


# ---------------------------------------------------------------------- report


def build_result(config: ConfigSamples | None, hop_ms: list[float], ring_s: list[float],
                 pair_s: list[float], per_node: dict[str, list[float]], nodes: int,
                 far: str) -> dict[str, float]:
    result: dict[str, float] = {"nodes": nodes, "farthest_hops": nodes // 2}
    hop_p50 = percentile(hop_ms, 50)
    result["hop_to_farthest_p50_ms"] = round(hop_p50, 2)
    result["hop_to_farthest_p90_ms"] = round(percentile(hop_ms, 90), 2)
    if config is not None:
        p50 = percentile(config.total_ms, 50)
        result["config_to_applied_p50_ms"] = round(p50, 2)
        result["config_to_applied_p90_ms"] = round(percentile(config.total_ms, 90), 2)
        result["config_to_applied_samples"] = len(config.total_ms)
        result["config_to_applied_ratio"] = round(p50 / hop_p50, 1)
        for name, values in config.segments_ms.items():
            result[f"config_to_applied_{name}_p50_ms"] = round(percentile(values, 50), 2)
    conv, one_peer = median(ring_s), median(pair_s)
    result["convergence_10k_keys_s"] = round(conv, 3)
    result["convergence_10k_keys_runs"] = len(ring_s)
    result["convergence_10k_keys_one_peer_s"] = round(one_peer, 3)
    result["convergence_10k_keys_ratio"] = round(conv / one_peer, 2)
    for name, values in per_node.items():
        result[f"convergence_10k_keys_{name}_s"] = round(median(values), 3)
    return result


def verdict(metric: str, value: float) -> str:
    target = TARGETS[metric]
    return f"<= {target:g}  {'ok' if value <= target else 'MISSED'}"


def print_table(result: dict[str, float], far: str, notes: list[str]) -> None:
    rows: list[tuple[str, str, str, str]] = [("metric", "value", "target", "baseline / ratio")]
    if "config_to_applied_p50_ms" in result:
        hop = result["hop_to_farthest_p50_ms"]
        rows.append(("config_to_applied_p50_ms", f"{result['config_to_applied_p50_ms']:.1f}",
                     verdict("config_to_applied_p50_ms", result["config_to_applied_p50_ms"]),
                     f"hop_to_farthest_p50_ms {hop:.2f} -> x{result['config_to_applied_ratio']}"))
        rows.append(("config_to_applied_p90_ms", f"{result['config_to_applied_p90_ms']:.1f}",
                     "", f"hop_to_farthest_p90_ms {result['hop_to_farthest_p90_ms']:.2f}"))
        for name in SEGMENTS:
            rows.append((f"  {name}_p50_ms", f"{result[f'config_to_applied_{name}_p50_ms']:.1f}",
                         "", ""))
    else:
        rows.append(("hop_to_farthest_p50_ms", f"{result['hop_to_farthest_p50_ms']:.2f}", "", ""))
    rows.append(("convergence_10k_keys_s", f"{result['convergence_10k_keys_s']:.3f}",
                 verdict("convergence_10k_keys_s", result["convergence_10k_keys_s"]),
                 f"one_peer_s {result['convergence_10k_keys_one_peer_s']:.3f} -> "
                 f"x{result['convergence_10k_keys_ratio']}"))
    nodes = int(result["nodes"])
    for i in range(2, nodes + 1):
        rows.append((f"  n{i}_complete_s", f"{result[f'convergence_10k_keys_n{i}_s']:.3f}",
                     "", ""))
    widths = [max(len(row[c]) for row in rows) for c in range(4)]
    print(f"cluster_bench: {nodes}-node ring, farthest node {far} "
          f"({nodes // 2} hops each way)")
    for row in rows:
        print("  ".join(cell.ljust(widths[c]) for c, cell in enumerate(row)).rstrip())
    samples = int(result.get("config_to_applied_samples", 0))
    runs = int(result["convergence_10k_keys_runs"])
    print(f"config_to_applied: {samples} samples (after {WARMUP_SAMPLES} warm-up); "
          f"convergence: median of {runs} run(s)")
    for note in notes:
        print(f"note: {note}")


# ---------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="4 nodes, 5 samples, 1 run")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--nodes", type=int, default=None, help="ring size [8; quick 4]")
    parser.add_argument("--samples", type=int, default=None, help="config samples [20; quick 5]")
    parser.add_argument("--runs", type=int, default=None, help="convergence runs [3; quick 1]")
    parser.add_argument("--no-namespaces", action="store_true",
                        help="no per-node namespaces: skips config_to_applied")
    args = parser.parse_args(argv)
    nodes = args.nodes or (4 if args.quick else 8)
    samples = args.samples or (5 if args.quick else 20)
    runs = args.runs or (1 if args.quick else 3)
    if nodes < 3:
        parser.error("--nodes must be >= 3 (a ring)")

    notes: list[str] = []
    namespaces = os.geteuid() == 0 and not args.no_namespaces
    if not namespaces:
        notes.append("config_to_applied NOT measured: needs root and per-node namespaces "
                     "(Linux southbound); only the hop baseline and convergence were")
    elif taken := existing_namespaces(nodes):
        say(f"error: namespace(s) {', '.join(taken)} exist (a kvmesh cluster is running?): "
            f"stop it with `kvmesh cluster down` or use --no-namespaces")
        return 1

    signal.signal(signal.SIGTERM, on_sigterm)
    run_dir = Path(tempfile.mkdtemp(prefix="kvmesh-cluster-bench-"))
    ok = False
    try:
        with running_cluster(run_dir / "ring", nodes, "ring", namespaces) as ring:
            far = farthest_node(list(ring.nodes))
            say(f"config_to_applied: {samples} samples (+{WARMUP_SAMPLES} warm-up), n1 -> {far}")
            config = measure_config(ring, samples, hop_only=not namespaces)
            with running_cluster(run_dir / "pair", 2, "chain", False) as pair:
                say(f"convergence: {runs} run(s) of {N_KEYS} keys")
                ring_s, pair_s, per_node = measure_convergence(ring, pair, runs)
        result = build_result(config if namespaces else None, config.hop_ms, ring_s, pair_s,
                              per_node, nodes, far)
        ok = True
    except KeyboardInterrupt:
        say("interrupted: cluster torn down")
        return 130
    except (BenchError, cluster.ClusterError) as exc:
        say(f"error: {exc} (logs kept in {run_dir})")
        return 1
    finally:
        if ok:
            shutil.rmtree(run_dir, ignore_errors=True)
    if args.json:
        print(json.dumps(result, sort_keys=True))
    else:
        print_table(result, far, notes)
    return 0


if __name__ == "__main__":
    sys.exit(main())

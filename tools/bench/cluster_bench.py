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
  flood_out   set on n1 -> the config key published by the farthest node (KvStore flood)
  nb_wait     -> start of the agent's transaction (agent: stream drain + coalescing)
  txn         -> end of that transaction (scheduler + netlink), from the agent's txn history
  status_out  -> the status key published by the farthest node (status thread + KEY_SET)
  flood_back  -> the status key published by n1 (KvStore flood)
Transaction times are the agent's wall clock, mapped to this process's monotonic clock.
Convergence, also reported: when each node held every key, the CPU time of the node processes,
of their agents and of this process during the run, and how many key-values the nodes received
per key set (floods on a ring deliver some keys twice).

Operator workflow (issue 11), on the farthest node, written through n1 (needs namespaces):
  apply_1000_values_wait_s  `kvmesh apply -f FILE --wait` of 1000 new values (600 veth ends,
                            300 with an address, and 400 routes via those addresses), from the
                            CLI's start to its exit (every value CONFIGURED)            <= 3
  plan_1000_s               `kvmesh plan -f FILE` of the same file (desired-state diff and the
                            node's scheduler plan of 1000 creates), start to exit       <= 1
  baselines: cli_startup_s (`kvmesh model list`: interpreter + imports), and
    apply_1000_values_raw_s: the same 1000 values written by this process in one KEY_SET,
    until every status is CONFIGURED (no CLI) -> the ratio is the CLI's own cost.
  Each run starts from an empty node (the previous run's values removed with --replace).

Footprint (issue 21), of an idle 3-node chain 10 s after every agent is ready (medians over the
nodes; `--only-footprint` for just these):
  rss_node_idle_mib         RSS of a KvStore node process                               <= 30
  rss_agent_idle_mib        RSS of its agent process                                    <= 45
  cpu_idle_pct_per_node     CPU of node + agent over 30 s, % of one core
  cli_key_get_s             `kvmesh key get` against a live node, median of 10          <= 0.2

Needs root for the per-node network namespaces (the Linux southbound). Without root, or with
--no-namespaces, config_to_applied cannot be measured (agents have no southbound): only the hop
baseline and convergence are, and the output says so.

Usage: cluster_bench.py [--quick] [--json] [--nodes N] [--samples N] [--runs N] [--no-namespaces]
                        [--only-operator]
  --quick: a 4-node ring (farthest node n3), 5 samples, 1 convergence run: well under a minute.
  --json: one JSON object, metric name -> number (every figure above, by its name).
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
from procstat import (  # noqa: E402  (tools/bench/procstat.py)
    CLOCK_TICKS,
    ProcStatError,
    cpu_seconds,
    cpu_ticks,
    node_agent_pids,
    rss_mib,
)
from scratch import keep, private_tempdir  # noqa: E402  (tools/bench/scratch.py)

from kvmesh import cluster  # noqa: E402
from kvmesh.agent.desired import encode_config_value  # noqa: E402
from kvmesh.agent.keys import config_key, device_key, status_key  # noqa: E402
from kvmesh.agent.status import decode_status  # noqa: E402
from kvmesh.rest_client import AgentRest  # noqa: E402
from kvstore import wire  # noqa: E402
from kvstore.client import KvStoreClient, make_value  # noqa: E402
from kvstore.curve import ClientCurve, apply_client  # noqa: E402
from kvstore.gen.kvstore_thrift.ttypes import Value  # noqa: E402
from kvstore.signature import store_signature  # noqa: E402

TARGETS = {"config_to_applied_p50_ms": 150.0, "convergence_10k_keys_s": 2.0,
           "apply_1000_values_wait_s": 3.0, "plan_1000_s": 1.0}
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

    def add(self, name: str, pub_url: str, prefixes: tuple[str, ...],
            curve: ClientCurve | None = None) -> None:
        """Subscribe to `name`'s stream (`curve`: the operator's keys, on a secured cluster;
        without them the CurveZMQ handshake fails and nothing arrives)."""
        sock = self._context.socket(zmq.SUB)
        sock.setsockopt(zmq.LINGER, 0)
        if curve is not None:
            apply_client(sock, curve.key_pair, curve.server_key)
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


def connect_streams(streams: Streams, client: KvStoreClient, originator: str) -> None:
    """ZeroMQ subscriptions take a moment to reach the publisher: publish probes until every
    stream has delivered one, so no sample's event can be missed. `originator`: the probes'
    originator (a leaf's name makes them part of that leaf's share)."""
    pending = streams.names
    for attempt in range(100):
        key = f"{PROBE_PREFIX}{attempt}"
        client.set({key: make_value(b"probe", version=1, originator_id=originator)})
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
def running_cluster(run_dir: Path, nodes: int, topology: str, namespaces: bool, *,
                    isolated: bool = False, core: int | None = None,
                    timeout_s: float = 60.0) -> Iterator[cluster.ClusterState]:
    """`cluster.up` (loopback, or `isolated`; `core`: full nodes, the others leaves) and, in
    any case, `cluster.down` at the end."""
    # Namespaces named after this process: never those of a user's `kvmesh cluster up`.
    netns_prefix = f"kvbench{os.getpid()}"
    where = ("isolated" if isolated else
             f"namespaces {netns_prefix}-n1.." if namespaces else "no namespaces")
    shape = f"{topology} core of {core} + leaves" if core is not None and core < nodes \
        else topology
    say(f"starting a {nodes}-node {shape} in {run_dir} ({where})")
    started = time.monotonic()
    state = cluster.up(nodes, topology, run_dir=run_dir, namespaces=namespaces,
                       netns_prefix=netns_prefix, isolated=isolated, core=core,
                       timeout=timeout_s)  # a failed or interrupted `up` takes itself down
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


@dataclass(frozen=True)
class ConfigMarks:
    """Monotonic times of one config sample, as seen by this process."""

    model_key: str
    start: float
    config_at_far: float
    status_at_far: float
    status_at_origin: float


SEGMENTS = ("flood_out", "nb_wait", "txn", "status_out", "flood_back")


def is_configured(event: Event, key: str) -> bool:
    if event.key != key or not event.value.value:
        return False
    record = decode_status(event.value.value)
    return record is not None and record.get("state") == "CONFIGURED"


def measure_config(state: cluster.ClusterState, samples: int, hop_only: bool,
                   origin: str | None = None, far: str | None = None) -> ConfigSamples:
    """Config samples set on `origin` (the first node) for `far` (the ring's farthest node),
    interleaved with hop samples. The probe and hop keys are originated by `far`'s name: a
    leaf's share always includes what it originates, so a leaf `far` receives them too."""
    names = list(state.nodes)
    origin = origin or names[0]
    far = far or farthest_node(names)
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()
    client = state.client(origin, timeout_s=10.0)
    streams = Streams(context)
    result = ConfigSamples([], [], {s: [] for s in SEGMENTS})
    marks: list[ConfigMarks] = []
    try:
        if not hop_only:
            wait_devices_known(client, names)
        watched = (PROBE_PREFIX, "bench/hop/", config_key(far, ""), status_key(far, ""))
        streams.add(origin, state.nodes[origin].pub_url, watched, state.curve(origin))
        streams.add(far, state.nodes[far].pub_url, watched, state.curve(far))
        connect_streams(streams, client, far)
        for i in range(WARMUP_SAMPLES + samples):
            counted = i >= WARMUP_SAMPLES
            hop = hop_sample(client, streams, far, i)
            if counted:
                result.hop_ms.append(hop)
            if hop_only:
                continue
            sample = config_sample(client, streams, origin, far, i)
            if counted:
                result.total_ms.append((sample.status_at_origin - sample.start) * 1000)
                marks.append(sample)
    finally:
        streams.close()
        client.close()
    if marks:
        # Read after sampling so the HTTP requests do not load the agent during samples.
        txns = transaction_times(cluster.agent_rest(state, far, timeout_s=10))
        for sample in marks:
            for name, ms in split(sample, txns[sample.model_key]).items():
                result.segments_ms[name].append(ms)
    return result


def hop_sample(client: KvStoreClient, streams: Streams, far: str, i: int) -> float:
    """A plain key set on the client's node until `far` publishes it (originated by `far`'s
    name, so that a leaf keeps it)."""
    key = f"bench/hop/{i}"
    value = make_value(b"h" * VALUE_BYTES, version=1, originator_id=far)
    start = time.monotonic()
    client.set({key: value})
    hit = streams.wait({"seen": lambda e: e.stream == far and e.key == key}, SAMPLE_TIMEOUT_S)
    return (hit["seen"] - start) * 1000


def config_sample(client: KvStoreClient, streams: Streams, origin: str, far: str,
                  i: int) -> ConfigMarks:
    """A fresh bridge per sample, so every sample is a create (and none waits for a delete)."""
    model_key = f"linux/interface/kvb{i}"
    ckey, skey = config_key(far, model_key), status_key(far, model_key)
    value = make_value(encode_config_value(BRIDGE), version=1, originator_id=origin)
    start = time.monotonic()
    client.set({ckey: value})
    hit = streams.wait({
        "config@far": lambda e: e.stream == far and e.key == ckey,
        "status@far": lambda e: e.stream == far and is_configured(e, skey),
        "status@origin": lambda e: e.stream == origin and is_configured(e, skey),
    }, SAMPLE_TIMEOUT_S)
    return ConfigMarks(model_key, start, hit["config@far"], hit["status@far"],
                       hit["status@origin"])


def transaction_times(agent: AgentRest) -> dict[str, tuple[float, float]]:
    """Model key -> (start, end) of the agent transaction that applied it, in this process's
    monotonic clock (the agent records wall-clock times)."""
    records = agent.json("GET", "/scheduler/txn-history")
    offset = time.time() - time.monotonic()
    times: dict[str, tuple[float, float]] = {}
    for record in records:
        if record.get("end") is None:
            continue
        for value in record.get("values", []):
            times.setdefault(value["key"], (record["start"] - offset, record["end"] - offset))
    return times


def split(sample: ConfigMarks, txn: tuple[float, float]) -> dict[str, float]:
    marks = [sample.start, sample.config_at_far, txn[0], txn[1], sample.status_at_far,
             sample.status_at_origin]
    return {name: (marks[n + 1] - marks[n]) * 1000 for n, name in enumerate(SEGMENTS)}


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
    key_vals = client.dump(prefix)
    return store_signature(key_vals), len(key_vals)


@dataclass
class ConvergeRun:
    total_s: float
    complete_s: dict[str, float]  # when each node first held every key
    cpu_nodes_s: float  # CPU time of the KvStore node processes during the run
    cpu_agents_s: float  # ... and of their agents
    cpu_bench_s: float  # ... and of this process (the client and the completion polling)
    received_kv: int  # key-values received from peers, summed over the nodes


def received_kv(clients: dict[str, KvStoreClient]) -> int:
    return sum(c.counters().get("kvstore.received_key_vals", 0) for c in clients.values())


def num_lasting_keys(client: KvStoreClient) -> int:
    """Keys with an infinite TTL: the run's keys are such, and their count only grows while
    they arrive. The total would not do: finite-TTL keys held when the run starts (an agent's
    status tombstones, 5 s; the expired revisions `apply` leaves, 60 s) may expire during the
    run, and a node holding every key of the run then never counts `base + N_KEYS` (seen: 'no
    convergence within 120s (complete: [])' right after the operator phase, not even on n1).
    A counter, not NODE_INFO: NODE_INFO computes the root digest, and polling it would make
    every node refresh its digest tree over and over while the keys arrive."""
    counters = client.counters()
    return counters.get("kvstore.num_keys", 0) - counters.get("kvstore.num_finite_ttl_keys", 0)


def converge(state: cluster.ClusterState, prefix: str, nodes: list[str] | None = None,
             poll_s: float = 0.002,
             timeout_s: float = CONVERGENCE_TIMEOUT_S) -> ConvergeRun:
    """Seconds from the first KEY_SET on the first node until every node of `nodes` (all) holds
    the N_KEYS keys with equal signatures. `poll_s`: between two rounds of counter reads (a
    round over many nodes costs this process CPU that the nodes would otherwise have)."""
    names = list(state.nodes)
    origin = names[0]
    pids = [info.pids["node"] for info in state.nodes.values() if "node" in info.pids]
    clients = {name: state.client(name, timeout_s=30.0) for name in nodes or names}
    try:
        base = {name: num_lasting_keys(c) for name, c in clients.items()}
        received_before = received_kv(clients)
        batches = key_batches(prefix, origin)
        done: dict[str, float] = {}
        cpu_before = cpu_seconds(pids)
        bench_before = time.process_time()
        start = time.monotonic()
        for batch in batches:
            refused = clients[origin].set(batch)
            if refused:
                raise BenchError(f"{len(refused)} key(s) refused, e.g. {next(iter(refused))}")
        deadline = start + timeout_s
        first_check = True
        while True:
            for name, c in clients.items():
                if name not in done and num_lasting_keys(c) >= base[name] + N_KEYS:
                    done[name] = time.monotonic() - start
            if len(done) == len(clients):
                # Counts are only the cheap pre-check: the `kvmesh signature` of the prefix
                # must be the same everywhere (a count could hide a stale or missing value).
                sigs = {signature_of(c, prefix) for c in clients.values()}
                if len(sigs) == 1 and next(iter(sigs))[1] == N_KEYS:
                    end = max(done.values()) if first_check else time.monotonic() - start
                    break
                first_check = False
            if time.monotonic() > deadline:
                held = {name: signature_of(c, prefix)[1] for name, c in clients.items()}
                raise BenchError(f"no convergence within {timeout_s:g}s "
                                 f"(complete: {sorted(done)}; keys of the run held: {held})")
            time.sleep(poll_s)  # polling interval: keeps the poller off a busy 2-core machine
        cpu_after = cpu_seconds(pids)
        return ConvergeRun(end, done, cpu_after[0] - cpu_before[0], cpu_after[1] - cpu_before[1],
                           time.process_time() - bench_before,
                           received_kv(clients) - received_before)
    finally:
        for c in clients.values():
            c.close()


@dataclass
class ConvergenceSamples:
    ring: list[ConvergeRun]
    pair: list[ConvergeRun]


def measure_convergence(ring: cluster.ClusterState, pair: cluster.ClusterState,
                        runs: int) -> ConvergenceSamples:
    """Runs alternate between the ring and the pair so both see the same machine load."""
    result = ConvergenceSamples([], [])
    tag = os.getpid()
    for run in range(runs):
        prefix = f"bench/conv/{tag}-{run}/"
        result.ring.append(converge(ring, prefix))
        result.pair.append(converge(pair, prefix))
        say(f"  convergence run {run + 1}/{runs}: ring {result.ring[-1].total_s:.3f}s, "
            f"one peer {result.pair[-1].total_s:.3f}s")
    return result


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


# ---------------------------------------------------------------------- operator workflow


def operator_values() -> dict[str, dict[str, object]]:
    """1000 values: 300 veth pairs (600 interfaces, the first end of each with a /30), and
    400 routes via the far end of the first 200 pairs' subnets."""
    values: dict[str, dict[str, object]] = {}
    for i in range(300):
        a, b = f"oa{i}", f"ob{i}"
        net = 4 * i
        values[f"linux/interface/{a}"] = {
            "type": "veth", "veth": {"peer": b},
            "addresses": [f"10.{100 + net // 65536}.{net // 256 % 256}.{net % 256 + 1}/30"]}
        values[f"linux/interface/{b}"] = {"type": "veth", "veth": {"peer": a}}
    for j in range(400):
        i = j // 2
        net = 4 * i
        gateway = f"10.{100 + net // 65536}.{net // 256 % 256}.{net % 256 + 2}"
        values[f"linux/route/main/172.{16 + j // 256}.{j % 256}.0/24/oa{i}"] = {
            "gateway": gateway}
    assert len(values) == 1000
    return values


def kvmesh_cli(url: str, *args: str, timeout_s: float = 300.0) -> float:
    """Wall time of one `kvmesh` run (raises BenchError unless it exits 0)."""
    import subprocess

    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "kvmesh", "--url", url, *args],
                          capture_output=True, text=True, timeout=timeout_s)
    elapsed = time.monotonic() - started
    if done.returncode != 0:
        raise BenchError(f"kvmesh {' '.join(args)}: exit {done.returncode}: "
                         f"{(done.stderr or done.stdout)[-2000:]}")
    return elapsed


# ---------------------------------------------------------------------- footprint (issue 21)

IDLE_SETTLE_S = 10.0  # "10 s after ready": what an operator sizing a deployment would measure
IDLE_CPU_WINDOW_S = 30.0
CLI_KEY_GET_RUNS = 10


def idle_cpu_pct(pairs: list[tuple[int, int]], window_s: float) -> list[float]:
    """The CPU of each (node, agent) pair over `window_s`, % of one core."""
    before = [cpu_ticks(n) + cpu_ticks(a) for n, a in pairs]
    time.sleep(window_s)  # the measurement window itself
    after = [cpu_ticks(n) + cpu_ticks(a) for n, a in pairs]
    return [100.0 * (b - a) / CLOCK_TICKS / window_s for a, b in zip(before, after, strict=True)]


def measure_footprint(run_dir: Path, namespaces: bool) -> dict[str, float]:
    """An idle 3-node chain, IDLE_SETTLE_S after every agent's device is KNOWN: the medians
    over the nodes of each process's RSS, the CPU of node + agent over IDLE_CPU_WINDOW_S (% of
    one core), and `kvmesh key get` against a live node (median of CLI_KEY_GET_RUNS runs)."""
    with running_cluster(run_dir, 3, "chain", namespaces) as state:
        os.environ.update(cluster.client_env(Path(state.run_dir), "n1"))
        with state.client("n1") as client:
            wait_devices_known(client, list(state.nodes))
            client.set({"bench/footprint": make_value(b"x", version=1, originator_id="bench")})
        say(f"footprint: idle for {IDLE_SETTLE_S:.0f} s, then CPU over "
            f"{IDLE_CPU_WINDOW_S:.0f} s")
        time.sleep(IDLE_SETTLE_S)  # the measurement is of an idle cluster: nothing to wait on
        pairs = list(node_agent_pids(state).values())
        node_rss = [rss_mib(node) for node, _agent in pairs]
        agent_rss = [rss_mib(agent) for _node, agent in pairs]
        cpu_pct = idle_cpu_pct(pairs, IDLE_CPU_WINDOW_S)
        n1 = state.nodes["n1"].cmd_url
        key_get = [kvmesh_cli(n1, "key", "get", "bench/footprint")
                   for _ in range(CLI_KEY_GET_RUNS)]
    return {
        "rss_node_idle_mib": round(median(node_rss), 1),
        "rss_agent_idle_mib": round(median(agent_rss), 1),
        "cpu_idle_pct_per_node": round(median(cpu_pct), 2),
        "cli_key_get_s": round(median(key_get), 3),
    }


def raw_apply(client: KvStoreClient, node: str, values: dict[str, dict[str, object]],
              timeout_s: float = 300.0) -> float:
    """The baseline: the same values in one KEY_SET from this process, until all CONFIGURED."""
    origin = client.node_info().name
    keys = {config_key(node, k): v for k, v in values.items()}
    held = client.get(list(keys))
    started = time.monotonic()
    refused = client.set({key: make_value(encode_config_value(v), version=(
        held[key].version + 1 if key in held else 1), originator_id=origin)
        for key, v in keys.items()})
    if refused:
        raise BenchError(f"raw apply: {len(refused)} key(s) refused")
    prefix = status_key(node, "")
    while True:
        found = client.dump(prefix=prefix)
        states = {k[len(prefix):]: (decode_status(v.value) or {}).get("state")
                  for k, v in found.items()}
        if all(states.get(k) == "CONFIGURED" for k in values):
            return time.monotonic() - started
        if time.monotonic() - started > timeout_s:
            raise BenchError("raw apply: values not CONFIGURED in time")
        time.sleep(0.02)  # polling interval of the condition, not a synchronisation


def clear_node(url: str, node: str, state_dir: Path) -> None:
    empty = state_dir / "empty.json"
    empty.write_text(json.dumps({"nodes": {node: {}}}))
    kvmesh_cli(url, "apply", "-f", str(empty), "--replace", "--wait", "--timeout", "300")


def measure_operator(state: cluster.ClusterState, runs: int, work: Path) -> dict[str, float]:
    n1 = state.nodes["n1"].cmd_url
    far = farthest_node(list(state.nodes))
    work.mkdir(parents=True, exist_ok=True)
    values = operator_values()
    path = work / "state1000.json"
    path.write_text(json.dumps({"nodes": {far: values}}))
    samples: dict[str, list[float]] = {"plan": [], "apply": [], "raw": [], "startup": []}
    # The CLI runs as the cluster's operator would: `eval "$(kvmesh cluster env)"` (n1's keys).
    os.environ.update(cluster.client_env(Path(state.run_dir), "n1"))
    with state.client("n1") as client:
        wait_devices_known(client, list(state.nodes))
        for run in range(runs):
            say(f"operator run {run + 1}/{runs}: plan + apply --wait of 1000 values on {far}")
            clear_node(n1, far, work)
            samples["startup"].append(kvmesh_cli(n1, "model", "list"))
            samples["plan"].append(kvmesh_cli(n1, "plan", "-f", str(path)))
            samples["apply"].append(kvmesh_cli(n1, "apply", "-f", str(path), "--wait",
                                               "--timeout", "300"))
            say(f"  plan {samples['plan'][-1]:.3f}s, apply --wait {samples['apply'][-1]:.3f}s")
            clear_node(n1, far, work)
            samples["raw"].append(raw_apply(client, far, values))
        clear_node(n1, far, work)
    apply_s, raw_s = median(samples["apply"]), median(samples["raw"])
    return {
        "apply_1000_values_wait_s": round(apply_s, 3),
        "plan_1000_s": round(median(samples["plan"]), 3),
        "cli_startup_s": round(median(samples["startup"]), 3),
        "apply_1000_values_raw_s": round(raw_s, 3),
        "apply_1000_values_ratio_vs_raw": round(apply_s / raw_s, 2),
        "operator_runs": runs,
    }


def print_operator(result: dict[str, float]) -> None:
    print(f"operator workflow, 1000 values on one node (median of {result['operator_runs']:g} "
          f"run(s)):")
    for metric in ("apply_1000_values_wait_s", "plan_1000_s"):
        print(f"  {metric:<26} {result[metric]:.3f}  {verdict(metric, result[metric])}")
    print(f"  baselines: apply_1000_values_raw_s {result['apply_1000_values_raw_s']:.3f} "
          f"(-> x{result['apply_1000_values_ratio_vs_raw']}), cli_startup_s "
          f"{result['cli_startup_s']:.3f}")


# ---------------------------------------------------------------------- report


def build_result(config: ConfigSamples, convergence: ConvergenceSamples, nodes: int,
                 with_config: bool) -> dict[str, float]:
    result: dict[str, float] = {"nodes": nodes, "farthest_hops": nodes // 2}
    hop_p50 = percentile(config.hop_ms, 50)
    result["hop_to_farthest_p50_ms"] = round(hop_p50, 2)
    result["hop_to_farthest_p90_ms"] = round(percentile(config.hop_ms, 90), 2)
    if with_config:
        p50 = percentile(config.total_ms, 50)
        result["config_to_applied_p50_ms"] = round(p50, 2)
        result["config_to_applied_p90_ms"] = round(percentile(config.total_ms, 90), 2)
        result["config_to_applied_samples"] = len(config.total_ms)
        result["config_to_applied_ratio"] = round(p50 / hop_p50, 1)
        for name, values in config.segments_ms.items():
            result[f"config_to_applied_{name}_p50_ms"] = round(percentile(values, 50), 2)
    ring, pair = convergence.ring, convergence.pair
    conv = median([r.total_s for r in ring])
    one_peer = median([r.total_s for r in pair])
    result["convergence_10k_keys_s"] = round(conv, 3)
    result["convergence_10k_keys_runs"] = len(ring)
    result["convergence_10k_keys_one_peer_s"] = round(one_peer, 3)
    result["convergence_10k_keys_ratio"] = round(conv / one_peer, 2)
    for name in ring[0].complete_s:
        result[f"convergence_10k_keys_{name}_s"] = round(
            median([r.complete_s[name] for r in ring]), 3)
    result["convergence_cpu_nodes_s"] = round(median([r.cpu_nodes_s for r in ring]), 2)
    result["convergence_cpu_agents_s"] = round(median([r.cpu_agents_s for r in ring]), 2)
    result["convergence_cpu_bench_s"] = round(median([r.cpu_bench_s for r in ring]), 2)
    result["convergence_received_kv_per_key"] = round(
        median([r.received_kv / N_KEYS for r in ring]), 2)
    return result


def verdict(metric: str, value: float) -> str:
    target = TARGETS[metric]
    return f"<= {target:g} {'ok' if value <= target else 'MISSED'}"


def print_table(result: dict[str, float], notes: list[str]) -> None:
    nodes = int(result["nodes"])
    rows: list[tuple[str, str, str, str]] = [("metric", "value", "target", "baseline -> ratio")]
    hop = f"hop_to_farthest_p50_ms {result['hop_to_farthest_p50_ms']:.2f}"
    if "config_to_applied_p50_ms" in result:
        p50 = result["config_to_applied_p50_ms"]
        rows.append(("config_to_applied_p50_ms", f"{p50:.1f}",
                     verdict("config_to_applied_p50_ms", p50),
                     f"{hop} -> x{result['config_to_applied_ratio']}"))
        rows.append(("config_to_applied_p90_ms", f"{result['config_to_applied_p90_ms']:.1f}",
                     "", f"hop_to_farthest_p90_ms {result['hop_to_farthest_p90_ms']:.2f}"))
    else:
        rows.append(("hop_to_farthest_p50_ms", f"{result['hop_to_farthest_p50_ms']:.2f}", "", ""))
    conv = result["convergence_10k_keys_s"]
    rows.append(("convergence_10k_keys_s", f"{conv:.3f}", verdict("convergence_10k_keys_s", conv),
                 f"one_peer_s {result['convergence_10k_keys_one_peer_s']:.3f} -> "
                 f"x{result['convergence_10k_keys_ratio']}"))
    widths = [max(len(row[c]) for row in rows) for c in range(4)]
    far = farthest_node([f"n{i}" for i in range(1, nodes + 1)])
    print(f"cluster_bench: {nodes}-node ring, config from n1 for {far} "
          f"({nodes // 2} hops each way)")
    for row in rows:
        print("  ".join(cell.ljust(widths[c]) for c, cell in enumerate(row)).rstrip())
    print("where the time goes:")
    if "config_to_applied_p50_ms" in result:
        print("  config_to_applied p50 ms: " + ", ".join(
            f"{name} {result[f'config_to_applied_{name}_p50_ms']:.1f}" for name in SEGMENTS))
    print("  convergence, each node complete at s: " + ", ".join(
        f"{name} {result[f'convergence_10k_keys_{name}_s']:.3f}"
        for name in (f"n{i}" for i in range(1, nodes + 1))))
    print(f"  convergence CPU s: nodes {result['convergence_cpu_nodes_s']:.2f}, "
          f"agents {result['convergence_cpu_agents_s']:.2f}, "
          f"this process {result['convergence_cpu_bench_s']:.2f}; key-values received per key "
          f"(all nodes) {result['convergence_received_kv_per_key']:.2f}")
    samples = int(result.get("config_to_applied_samples", 0))
    runs = int(result["convergence_10k_keys_runs"])
    print(f"config_to_applied: {samples} samples (after {WARMUP_SAMPLES} warm-up), "
          f"p50/p90 nearest rank; convergence: median of {runs} run(s)")
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
    parser.add_argument("--only-operator", action="store_true",
                        help="only apply_1000_values_wait_s and plan_1000_s")
    parser.add_argument("--only-footprint", action="store_true",
                        help="only the idle footprint: rss_node_idle_mib, rss_agent_idle_mib, "
                        "cpu_idle_pct_per_node, cli_key_get_s")
    args = parser.parse_args(argv)
    private_tempdir("kvbench")
    nodes = args.nodes or (4 if args.quick else 8)
    samples = args.samples or (5 if args.quick else 20)
    runs = args.runs or (1 if args.quick else 3)
    if nodes < 3 or samples < 1 or runs < 1:
        parser.error("--nodes must be >= 3 (a ring); --samples and --runs >= 1")

    notes: list[str] = []
    namespaces = os.geteuid() == 0 and not args.no_namespaces
    if not namespaces:
        notes.append("config_to_applied NOT measured: it needs root for the per-node namespaces "
                     "(Linux southbound); only the hop baseline and convergence were")

    signal.signal(signal.SIGTERM, on_sigterm)
    run_dir = Path(tempfile.mkdtemp(prefix="kvmesh-cluster-bench-"))
    ok = False
    try:
        operator: dict[str, float] = {}
        footprint = {} if args.only_operator else measure_footprint(run_dir / "idle", namespaces)
        if args.only_footprint:
            if args.json:
                print(json.dumps(footprint, sort_keys=True))
            else:
                for name, value in footprint.items():
                    print(f"{name}  {value}")
            ok = True
            return 0
        with running_cluster(run_dir / "ring", nodes, "ring", namespaces) as ring:
            far = farthest_node(list(ring.nodes))
            if namespaces:
                operator = measure_operator(ring, runs, run_dir / "operator")
            if args.only_operator:
                if not namespaces:
                    raise BenchError("the operator metrics need root (namespaces)")
                result: dict[str, float] = {"nodes": nodes, **operator, **footprint}
            else:
                say(f"config_to_applied: {samples} samples (+{WARMUP_SAMPLES} warm-up), "
                    f"n1 -> {far}")
                config = measure_config(ring, samples, hop_only=not namespaces)
                with running_cluster(run_dir / "pair", 2, "chain", False) as pair:
                    say(f"convergence: {runs} run(s) of {N_KEYS} keys")
                    convergence = measure_convergence(ring, pair, runs)
                result = {**build_result(config, convergence, nodes, with_config=namespaces),
                          **operator, **footprint}
        ok = True
    except KeyboardInterrupt:
        say("interrupted: cluster torn down")
        return 130
    except (BenchError, ProcStatError, cluster.ClusterError) as exc:
        say(f"error: {exc} (logs kept in {keep(run_dir)})")
        return 1
    finally:
        if ok:
            shutil.rmtree(run_dir, ignore_errors=True)
    if args.json:
        for note in notes:
            say(f"note: {note}")
        print(json.dumps(result, sort_keys=True))
    else:
        if not args.only_operator:
            print_table(result, notes)
        if "apply_1000_values_wait_s" in result:
            print_operator(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())

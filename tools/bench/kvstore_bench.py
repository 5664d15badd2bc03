#!/usr/bin/env python3
"""KvStore node benchmark: real `kvmesh node run` processes on loopback.

Metrics (targets from the KvStore issues; 2-core machine):
  flood_kv_per_s           a node ingesting 100-kv publications with finite TTLs from one peer
                           and re-flooding them to another (decoded, merged, re-encoded: the
                           path of every status key and every persisted key)    >= 400 000
  flood_forwarded_kv_per_s the same with infinite TTLs: each publication goes on as the bytes
                           it arrived in (kvstore/forward.py)                   report only
  single_key_pub_per_s     flood_kv_per_s with 1-kv publications (the node coalesces them)
                                                                                >= 60 000
  hop_latency_p50_us       one key through a 16-node chain, per hop (p50)       <= 250
  full_sync_100k_1pct_ms   two nodes of 100 k keys, 1 % differ (half newer on each side), from
                           PEER_ADD until both stores agree                     <= 150
  full_sync_1m_10diff_ms   the same with 1 M keys, 10 differ                    <= 100
  bytes_per_key_1m         node RSS growth per key, 1 M keys of 100-byte values <= 520
  flood_durable_kv_per_s   flood_forwarded_kv_per_s on a durability=batch node (infinite TTLs:
                           only those are kept on disk); flood_durable_ratio = over a
                           memory-only node of the same workload, same rounds   ratio >= 0.75
  flood_durable_on_disk_kv_per_s  the same, until the last of it is on disk     report only
  key_set_ack_p50_ms       solicited 1-key KEY_SETs from 16 writers on a durability=sync node,
  key_set_ack_p99_ms       until acknowledged                                   <= 2, <= 10
  restore_1m_keys_s        a node with 1 M keys on disk, from start until it answers  <= 5
  disk_bytes_per_key_1m    its data files per key                               report only
  flood_curve_kv_per_s     flood_kv_per_s with every socket on CurveZMQ (the driver and the sink
                           authenticated as peers); flood_curve_ratio = over the plaintext node
                           of the same run                                      ratio >= 0.7
  hop_latency_curve_p50_us hop_latency_p50_us on a secured chain; hop_latency_curve_ratio = over
                           the plaintext chain of the same run                  ratio <= 1.3
  recv_user_id_ns_per_msg  receiving a small command on a CurveZMQ ROUTER and reading its ZAP
                           User-Id (what a secured node does per message), against the same
                           receive without it (the baseline)
The CurveZMQ pairs (plaintext and secured) and the durable pair (durability=batch and memory only)
run side by side in alternating rounds, so load from elsewhere on a shared machine falls on both
alike.

Workload: flooded publications update existing keys with higher versions (steady state), values
are 100 bytes, peers' hashes are set (as real floods carry them). Every flood metric uses finite
TTLs (FLOOD_TTL_MS, an hour: never expires during a run), so the node decodes, merges and
re-encodes them, except flood_forwarded_kv_per_s, whose infinite TTLs let every 100-kv
publication be forwarded as received, and the durable flood, which keeps them: the durable store
keeps only infinite-TTL keys (finite ones never reach the disk), so it is measured on the
forwarded workload and flood_durable_ratio is taken over flood_forwarded_kv_per_s. The CurveZMQ
pair uses the finite workload, both of its nodes alike. Each ratio thus compares like with like.
Each flood run checks the node's counters: every key-value re-flooded, and
`kvstore.flood.forwarded_publications` grown by every 100-kv publication with infinite TTLs and
by none of the others (finite TTLs, or 1-kv publications).

What bounds flood_kv_per_s: the node's one Python thread (it runs at ~95 % of a core during the
flood). Per 100-kv publication the merge of finite-TTL values (a stored copy with an absolute
expiry each) costs about half, the decode a quarter, the re-encode and the TTL rewrite for the
next hop the rest; the forwarded path skips the re-encode and the TTL rewrite and merges
cheaper.

Baselines measured in the same run (ratio = metric / baseline), each as its metric is (the
rates and sync times: medians of as many runs):
  flood rate, hop latency: a raw pyzmq pipe with the same topology and the same frames (relay
    processes that forward bytes without decoding: the transport's ceiling);
  single-key rate: the same relay, given the node's chance to coalesce: after each blocking
    receive it drains up to DRAIN_LIMIT queued messages (the node's bound per wakeup) and sends
    their payloads concatenated as one message (still decoding nothing);
  full sync: the naive 3-way sync, run alternately with the node's sync on a fresh divergence
    each time: the requester's hashes of its WHOLE store go to the responder (no digest walk),
    the requester merges what comes back and sends back the keys the responder asked for, until
    the root digests agree (timed as the node's sync), i.e. what anti-entropy costs when it
    grows with the store size. It is client-driven (see naive_sync): the benchmark process
    passes the hash list on as bytes and does the merge and the send-back through the Python
    client;
  bytes per key: a bare dict {key: 100-byte value} in a fresh process.

Usage: kvstore_bench.py [--quick] [--json] [--runs N] [--only all|durable]
  --quick: fewer messages and runs, and 200 k instead of 1 M keys for the two 1 M metrics (their
  names then say 200k). Finishes in about a minute.
  --only durable: the durable pair alone (flood_durable_*).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing as mp
import os
import random
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
import zmq  # noqa: E402
from scratch import private_tempdir  # noqa: E402  (tools/bench/scratch.py)

from kvmesh import launch  # noqa: E402
from kvmesh.cluster import OPERATOR_KEY, make_keys, write_node_config  # noqa: E402
from kvstore import requests, wire  # noqa: E402
from kvstore.client import KvStoreClient, check_response  # noqa: E402
from kvstore.curve import (  # noqa: E402
    ClientCurve,
    KeyPair,
    apply_client,
    load_key_pair,
    load_public_key,
)
from kvstore.forward import MIN_FORWARD_KEYS  # noqa: E402
from kvstore.gen.kvstore_thrift.constants import DIGEST_FANOUT, TTL_INFINITY  # noqa: E402
from kvstore.gen.kvstore_thrift.ttypes import (  # noqa: E402
    Command,
    DigestReply,
    KeyDumpParams,
    KeySetParams,
    PeerState,
    Publication,
    Request,
    Response,
    Value,
)
from kvstore.hashing import value_hash  # noqa: E402
from kvstore.node_ports import free_tcp_port  # noqa: E402
from kvstore.shell import DRAIN_LIMIT  # noqa: E402
from kvstore.signature import store_signature  # noqa: E402

VALUE_BYTES = 100
# The flood workload's TTL: finite, so the node re-encodes what it floods (kvstore/forward.py
# forwards only infinite-TTL publications as received), as it does for every status key and every
# persisted key; and long enough never to expire during a run.
FLOOD_TTL_MS = 3_600_000
BENCH_CONFIG = {
    "sync_interval_s": 0,
    "sync_timeout_ms": 30_000,
    "max_message_bytes": 512 * 1024 * 1024,
}


def free_port() -> int:
    return free_tcp_port()


def url() -> str:
    return f"tcp://127.0.0.1:{free_port()}"


def value_of(i: int) -> bytes:
    return (f"{i:010d}" * (VALUE_BYTES // 10 + 1))[:VALUE_BYTES].encode()


def make_value(
    version: int, originator: str, payload: bytes, ttl_ms: int = TTL_INFINITY
) -> Value:
    return Value(version, originator, payload, ttl_ms, 0, value_hash(version, originator, payload))


def median(values: list[float]) -> float:
    return float(statistics.median(values))


# ---------------------------------------------------------------------- node processes


@dataclass
class NodeProc:
    name: str
    cmd_url: str
    pub_url: str
    proc: launch.Launched
    log_path: Path
    curve: ClientCurve | None = None  # the operator's keys for this node (secured cluster)

    def client(self, timeout_s: float = 60.0) -> KvStoreClient:
        return KvStoreClient(self.cmd_url, timeout_s=timeout_s, curve=self.curve)

    def as_peer(self, name: str) -> ClientCurve | None:
        """Keys to talk to this node as peer `name` (None: plaintext)."""
        if self.curve is None:
            return None
        keys = self.log_path.parent / "keys"
        return ClientCurve(load_key_pair(keys / f"{name}.key_secret"), self.curve.server_key)

    def rss_bytes(self) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise RuntimeError("no VmRSS")


@dataclass
class BenchKeys:
    """CurveZMQ keys for a secured bench cluster: every name a peer, plus the operator."""

    workdir: Path
    names: list[str]

    def __post_init__(self) -> None:
        self.auth, self.secrets = make_keys(self.workdir, self.names)

    def pair(self, name: str) -> KeyPair:
        return load_key_pair(self.secrets[name])

    def public(self, name: str) -> bytes:
        return load_public_key(str(self.secrets[name].with_suffix(".key")))


@dataclass
class Cluster:
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="kvbench-")))
    nodes: list[NodeProc] = field(default_factory=list)
    helpers: list[mp.process.BaseProcess] = field(default_factory=list)
    keys: BenchKeys | None = None  # None: plaintext nodes (--insecure)

    def secure(self, names: list[str]) -> BenchKeys:
        self.keys = BenchKeys(self.workdir, names)
        return self.keys

    def start_node(
        self,
        name: str,
        peers: dict[str, str] | None = None,
        cmd_url: str | None = None,
        durability: str | None = None,
        leaf_prefixes: list[str] | None = None,
    ) -> NodeProc:
        """`durability` None: --ephemeral (memory only); else a data dir with that mode.
        `leaf_prefixes`: a leaf node keeping the keys under those prefixes."""
        config: dict[str, object] = dict(BENCH_CONFIG)
        if durability is not None:
            config["durability"] = durability
            config["data_dir"] = str(self.data_dir(name))
        if leaf_prefixes is not None:
            config.update(leaf=True, key_prefix_filters=leaf_prefixes)
        config_path = self.workdir / f"{name}.toml"
        write_node_config(config_path, config)
        cmd_url, pub_url = cmd_url or url(), url()
        spec = launch.NodeSpec(name, cmd_url, pub_url, peers=dict(peers or {}),
                               config=config_path, ephemeral=durability is None)
        curve = None
        if self.keys is not None:
            spec.key_file, spec.authorized_keys = self.keys.secrets[name], self.keys.auth
            curve = ClientCurve(self.keys.pair(OPERATOR_KEY), self.keys.public(name))
        log_path = self.workdir / f"{name}.log"
        node = NodeProc(name, cmd_url, pub_url, launch.start(spec, log_path, cwd=REPO),
                        log_path, curve)
        self.nodes.append(node)
        return node

    def data_dir(self, name: str) -> Path:
        return self.workdir / "data" / name

    def wait_ready(self, node: NodeProc, initial_sync: bool = True, timeout_s: float = 60) -> None:
        node.proc.wait_answering(node.cmd_url, node.curve, initial_sync, timeout_s)

    def spawn(self, target: Callable[..., None], *args: Any) -> mp.process.BaseProcess:
        proc = mp.get_context("spawn").Process(target=target, args=args, daemon=True)
        proc.start()
        self.helpers.append(proc)
        return proc

    def close(self) -> None:
        for node in self.nodes:
            if node.proc.alive():
                node.proc.send_signal(signal.SIGTERM)
        for node in self.nodes:
            node.proc.wait_or_kill(timeout=10)
        for helper in self.helpers:
            if helper.is_alive():
                helper.terminate()
            helper.join(timeout=5)
        self.nodes.clear()
        self.helpers.clear()
        shutil.rmtree(self.workdir, ignore_errors=True)


@contextlib.contextmanager
def cluster() -> Iterator[Cluster]:
    c = Cluster()
    try:
        yield c
    finally:
        c.close()


# ---------------------------------------------------------------------- helper processes


def sink_main(bind_url: str, curve_pair: KeyPair | None, conn: Connection) -> None:
    """A fake peer: answers sync requests as an empty store would, and reports (by pipe) the
    monotonic time at which a KEY_SET containing each requested marker arrives. With
    `curve_pair`, a CurveZMQ server (no ZAP: it takes any client key)."""
    ctx = zmq.Context()
    sock = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.RCVHWM, 0)
    if curve_pair is not None:
        sock.curve_secretkey = curve_pair.secret
        sock.curve_publickey = curve_pair.public
        sock.curve_server = True
    sock.bind(bind_url)
    conn.send("ready")
    marker: bytes | None = None
    poller = zmq.Poller()
    poller.register(sock, zmq.POLLIN)
    while True:
        if conn.poll():
            command = conn.recv()
            if command is None:
                return
            marker = command
            conn.send("armed")  # the driver sends only now: no message can pass unwatched
        if not poller.poll(5):
            continue
        while True:
            try:
                frames = sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
            if len(frames) == 4:  # a sync request from the node: [id, corr, "", request]
                request = wire.decode_request(frames[-1])
                if request.cmd == Command.DIGEST_GET:
                    ids = request.digest.node_ids if request.digest else []
                    children = {
                        child: 0
                        for n in ids
                        for child in range(n * DIGEST_FANOUT + 1, (n + 1) * DIGEST_FANOUT + 1)
                    }
                    reply = Response(digest=DigestReply(digests=children))
                else:
                    reply = Response(publication=Publication(key_vals={}, tobe_updated_keys=[]))
                sock.send_multipart([*frames[:-1], wire.encode(reply)])
            elif marker is not None and marker in frames[-1]:
                conn.send(time.monotonic())
                marker = None


def relay_main(
    bind_url: str, next_url: str, publish: bool, coalesce: bool, conn: Connection
) -> None:
    """Raw pipe hop: forward each request payload unchanged (no decoding) to the next hop, or
    publish it (last hop of the latency chain).

    `coalesce`: the baseline for small publications, which the node coalesces (it drains up to
    DRAIN_LIMIT queued messages per wakeup and floods what they changed as one KEY_SET). The relay
    gets the same chance: after each blocking receive it drains up to DRAIN_LIMIT queued messages
    without waiting and sends their payloads concatenated as one message. It still decodes
    nothing, so this is the transport's ceiling for the same batching; the concatenation is not
    a valid KEY_SET (the sink only looks for its marker in the bytes)."""
    ctx = zmq.Context()
    inbound = ctx.socket(zmq.ROUTER)
    inbound.setsockopt(zmq.RCVHWM, 0)
    inbound.bind(bind_url)
    if publish:
        outbound = ctx.socket(zmq.PUB)
        outbound.bind(next_url)
    else:
        outbound = ctx.socket(zmq.DEALER)
        outbound.setsockopt(zmq.SNDHWM, 0)
        outbound.connect(next_url)
    conn.send("ready")
    while True:
        frames = inbound.recv_multipart()
        if coalesce:
            payloads = [frames[-1]]
            while len(payloads) < DRAIN_LIMIT:
                try:
                    payloads.append(inbound.recv_multipart(zmq.NOBLOCK)[-1])
                except zmq.Again:
                    break
            frames[-1] = b"".join(payloads)
        if publish:
            outbound.send(frames[-1])
        else:
            outbound.send(b"", zmq.SNDMORE)
            outbound.send(frames[-1])


def bare_dict_main(n: int, conn: Connection) -> None:
    """Baseline memory: RSS growth of a plain dict {key: 100-byte value}."""

    def rss() -> int:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        return 0

    before = rss()
    store = {f"key/{i:07d}": value_of(i) for i in range(n)}
    conn.send((rss() - before) / len(store))


def start_helper(c: Cluster, target: Callable[..., None], *args: Any) -> Connection:
    parent, child = mp.get_context("spawn").Pipe()
    c.spawn(target, *args, child)
    if not parent.poll(30) or parent.recv() != "ready":
        raise RuntimeError(f"{target.__name__} did not start")
    return parent


# ---------------------------------------------------------------------- flood throughput


def flood_messages(
    n_msgs: int, kv_per_msg: int, run: int, marker: str, *, ttl_ms: int
) -> list[bytes]:
    """Encoded one-way KEY_SETs as a peer floods them (path ["src"], hashes set, every value
    with `ttl_ms`). Every key appears once per run, with the run's version, so every key-value
    applies and none is coalesced away; run 0 inserts the keys, later runs update them."""
    messages = []
    for m in range(n_msgs):
        key_vals = {}
        for j in range(kv_per_msg):
            i = m * kv_per_msg + j
            key_vals[f"flood/{i:07d}"] = make_value(run + 1, "src", value_of(i), ttl_ms)
        if m == n_msgs - 1:
            key_vals[marker] = make_value(1, "src", b"end", ttl_ms)
        request = Request(
            cmd=Command.KEY_SET,
            key_set=KeySetParams(key_vals=key_vals, solicit_response=False, node_ids=["src"]),
        )
        messages.append(wire.encode(request))
    return messages


def drive(
    target_url: str,
    messages: list[bytes],
    sink: Connection,
    marker: str,
    curve: ClientCurve | None = None,
) -> float:
    """Send every message to `target_url`; return seconds until the sink saw the marker."""
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.SNDHWM, 0)
    sock.setsockopt(zmq.LINGER, 0)
    if curve is not None:
        apply_client(sock, curve.key_pair, curve.server_key)
    sock.connect(target_url)
    try:
        time.sleep(0.05)  # let the connection come up, so the first sends are not queued
        sink.send(marker.encode())
        if not sink.poll(30) or sink.recv() != "armed":
            raise RuntimeError("the sink did not take the marker")
        start = time.monotonic()
        for payload in messages:
            sock.send(b"", zmq.SNDMORE)
            sock.send(payload)
        if not sink.poll(120):
            raise RuntimeError("the sink never saw the last publication")
        return float(sink.recv()) - start
    finally:
        sock.close(linger=0)


def wait_written(node: NodeProc, timeout_s: float = 300) -> None:
    """Until the node's writer has nothing pending."""
    deadline = time.monotonic() + timeout_s
    with node.client() as client:
        while time.monotonic() < deadline:
            counters = client.counters()
            if counters.get("kvstore.storage.pending_rows", 0) == 0 and counters.get(
                "kvstore.storage.rows_written", 0
            ):
                return
            time.sleep(0.01)
    raise RuntimeError("the writer never caught up")


@dataclass
class FloodSubject:
    """A node flooded by a driver (as peer "src") and re-flooding to a sink (peer "sink")."""

    node: NodeProc
    sink: Connection
    sink_url: str
    src: ClientCurve | None
    durable: bool = False


def flood_subject(c: Cluster, secure: bool, durability: str | None = None) -> FloodSubject:
    """`secure`: the node, the driver and the sink on CurveZMQ (all three authenticated);
    `durability`: the node's, None for memory only."""
    sink_url = url()
    keys = c.secure(["subject", "src", "sink"]) if secure else None
    sink = start_helper(c, sink_main, sink_url, keys.pair("sink") if keys else None)
    node = c.start_node("subject", peers={"sink": sink_url}, durability=durability)
    c.wait_ready(node)
    return FloodSubject(node, sink, sink_url, node.as_peer("src"), durability is not None)


def flood_run(
    subject: FloodSubject, kv_per_msg: int, n_msgs: int, run: int, ttl_ms: int
) -> tuple[float, float]:
    """One run: (rate as the next node sees it, rate until the last of it is on disk; the same
    for a memory-only node), key-values per second. Run 0 inserts the keys (the warm-up).

    Checks by the node's counters that it re-flooded every key-value, and that it took the path
    the workload is meant to measure: publications of MIN_FORWARD_KEYS or more key-values with
    infinite TTLs are each forwarded as received; anything else is re-encoded (none forwarded)."""
    total = n_msgs * kv_per_msg
    node = subject.node
    marker = f"~end~node~{run}"
    messages = flood_messages(n_msgs, kv_per_msg, run, marker, ttl_ms=ttl_ms)
    forwarding = ttl_ms == TTL_INFINITY and kv_per_msg >= MIN_FORWARD_KEYS
    with node.client() as client:
        before = client.counters()
    # The warm-up (run 0) is not timed on disk: its writes are what the first wait drains.
    on_disk = subject.durable and run > 0
    if on_disk:
        wait_written(node)
    started = time.monotonic()
    seconds = drive(node.cmd_url, messages, subject.sink, marker, subject.src)
    disk_seconds = seconds
    if on_disk:
        wait_written(node)
        disk_seconds = time.monotonic() - started
    with node.client() as client:
        after = client.counters()

    def grew(counter: str) -> int:
        return after.get(counter, 0) - before.get(counter, 0)

    sent = grew("kvstore.sent_key_vals")
    if sent != total + 1:
        raise RuntimeError(f"node re-flooded {sent} key-values, expected {total + 1}")
    forwarded = grew("kvstore.flood.forwarded_publications")
    if forwarded != (n_msgs if forwarding else 0):
        raise RuntimeError(
            f"node forwarded {forwarded} of {n_msgs} publications as received, expected"
            f" {'all' if forwarding else 'none'} (ttl_ms={ttl_ms}, {kv_per_msg} key-values each)"
        )
    return total / seconds, total / disk_seconds


def bench_flood_durable(kv_per_msg: int, n_msgs: int, runs: int) -> tuple[float, float, float]:
    """With durability=batch: (flood rate as the next node sees it, rate until the last of it is
    on disk, rate of a memory-only node in the same rounds), key-values per second, medians of
    `runs`. Infinite TTLs: the durable store keeps only infinite-TTL keys (kvstore/storage.py),
    so finite ones would never reach the disk. The two nodes run side by side in alternating
    rounds (see `alternate`)."""
    with cluster() as memory_cluster, cluster() as durable_cluster:
        memory = flood_subject(memory_cluster, secure=False)
        durable = flood_subject(durable_cluster, secure=False, durability="batch")
        memory_rates, durable_rates = alternate(
            [memory, durable], kv_per_msg, n_msgs, runs, TTL_INFINITY)
    return (median([rate for rate, _disk in durable_rates]),
            median([disk for _rate, disk in durable_rates]),
            median([rate for rate, _disk in memory_rates]))


def alternate(
    subjects: list[FloodSubject], kv_per_msg: int, n_msgs: int, runs: int, ttl_ms: int
) -> list[list[tuple[float, float]]]:
    """`flood_run` on each subject in turn, `runs` rounds after a warm-up, in an order that
    alternates, so that load from elsewhere on a shared machine hits them alike; each
    subject's (rate, rate on disk) per round. Stops the subjects' sinks."""
    for subject in subjects:
        flood_run(subject, kv_per_msg, n_msgs, 0, ttl_ms)
    rates: list[list[tuple[float, float]]] = [[] for _ in subjects]
    for run in range(1, runs + 1):
        order = list(enumerate(subjects))
        for index, subject in order if run % 2 else reversed(order):
            rates[index].append(flood_run(subject, kv_per_msg, n_msgs, run, ttl_ms))
    for subject in subjects:
        subject.sink.send(None)
    return rates


def bench_flood(
    kv_per_msg: int,
    n_msgs: int,
    runs: int,
    ttl_ms: int = FLOOD_TTL_MS,
) -> tuple[float, float]:
    """(node rate, raw pipe rate) in key-values per second, medians of `runs`. Publications
    smaller than MIN_FORWARD_KEYS, which the node coalesces, get the coalescing
    relay as their baseline (see relay_main)."""
    total = n_msgs * kv_per_msg
    with cluster() as c:
        subject = flood_subject(c, secure=False)
        # Run 0 (not timed) inserts the keys: the timed runs measure the steady state.
        flood_run(subject, kv_per_msg, n_msgs, 0, ttl_ms)
        rates = [flood_run(subject, kv_per_msg, n_msgs, run, ttl_ms) for run in range(1, runs + 1)]
        node_rates = [rate for rate, _disk in rates]
        relay_url = url()
        coalesce = kv_per_msg < MIN_FORWARD_KEYS
        start_helper(c, relay_main, relay_url, subject.sink_url, False, coalesce)
        raw_rates = []
        for run in range(runs):
            marker = f"~end~raw~{run}"
            messages = flood_messages(n_msgs, kv_per_msg, run, marker, ttl_ms=ttl_ms)
            raw_rates.append(total / drive(relay_url, messages, subject.sink, marker))
        subject.sink.send(None)
    return median(node_rates), median(raw_rates)


def bench_flood_curve(
    kv_per_msg: int, n_msgs: int, runs: int, ttl_ms: int = FLOOD_TTL_MS
) -> tuple[float, float]:
    """(plaintext node rate, CurveZMQ node rate): both set up side by side and measured in
    alternation, so that load from elsewhere on a shared machine hits both alike."""
    with cluster() as plain_cluster, cluster() as curve_cluster:
        plain = flood_subject(plain_cluster, secure=False)
        curve = flood_subject(curve_cluster, secure=True)
        plain_rates, curve_rates = alternate([plain, curve], kv_per_msg, n_msgs, runs, ttl_ms)
    return (median([rate for rate, _disk in plain_rates]),
            median([rate for rate, _disk in curve_rates]))


# ---------------------------------------------------------------------- hop latency


def publication_version(data: bytes) -> int | None:
    value = (wire.decode_publication(data).key_vals or {}).get("lat")
    return None if value is None else value.version


def request_version(data: bytes) -> int | None:
    key_set = wire.decode_request(data).key_set
    value = (key_set.key_vals or {}).get("lat") if key_set else None
    return None if value is None else value.version


def chain_latency(*args: Any, **kwargs: Any) -> float:
    """p50 per-hop latency (µs): the median of `chain_latencies`."""
    return median(chain_latencies(*args, **kwargs))


def chain_latencies(
    entry_url: str,
    pub_url: str,
    samples: int,
    hops: int,
    version_of: Callable[[bytes], int | None] = publication_version,
    curves: tuple[ClientCurve | None, ClientCurve | None] = (None, None),
) -> list[float]:
    """Per-hop latencies (µs) of one-key publications sent in at `entry_url` and seen on
    `pub_url`, one at a time. `curves`: the sender's and the subscriber's keys (secured)."""
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()
    sender = ctx.socket(zmq.DEALER)
    sender.setsockopt(zmq.LINGER, 0)
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    for sock, curve in zip((sender, sub), curves, strict=True):
        if curve is not None:
            apply_client(sock, curve.key_pair, curve.server_key)
    sender.connect(entry_url)
    sub.connect(pub_url)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    payload = value_of(7)

    def send(version: int) -> None:
        request = Request(
            cmd=Command.KEY_SET,
            key_set=KeySetParams(
                key_vals={"lat": Value(version, "src", payload, TTL_INFINITY, 0)},
                solicit_response=False,
                node_ids=[],
            ),
        )
        sender.send(b"", zmq.SNDMORE)
        sender.send(wire.encode(request))

    def wait_for(version: int, timeout_ms: int) -> bool:
        marker = b"lat"
        deadline = time.monotonic() + timeout_ms / 1000
        while time.monotonic() < deadline:
            if sub.poll(max(1, int((deadline - time.monotonic()) * 1000))):
                data = sub.recv()
                if marker in data and version_of(data) == version:
                    return True
        return False

    try:
        # Above any version an earlier measurement on the same nodes used.
        version = time.monotonic_ns() // 1000
        first = version
        # Warm up until the subscription is attached end to end.
        while True:
            send(version)
            if wait_for(version, 500):
                break
            version += 1
            if version > first + 100:
                raise RuntimeError("no publication came out of the chain")
        latencies: list[float] = []
        for _ in range(samples):
            version += 1
            start = time.perf_counter()
            send(version)
            if not wait_for(version, 5000):
                raise RuntimeError("publication lost in the chain")
            latencies.append((time.perf_counter() - start) * 1e6 / hops)
        return latencies
    finally:
        sender.close(linger=0)
        sub.close(linger=0)


def start_chain(c: Cluster, n_nodes: int, secure: bool = False) -> list[NodeProc]:
    urls = [url() for _ in range(n_nodes)]
    if secure:
        c.secure([f"n{i}" for i in range(n_nodes)])
    nodes = []
    for i in range(n_nodes):
        peers = {f"n{j}": urls[j] for j in (i - 1, i + 1) if 0 <= j < n_nodes}
        nodes.append(c.start_node(f"n{i}", peers=peers, cmd_url=urls[i]))
    for node in nodes:
        c.wait_ready(node)
    return nodes


def bench_latency(n_nodes: int, samples: int) -> tuple[float, float]:
    """(node chain p50, raw relay chain p50) per hop."""
    hops = n_nodes - 1
    with cluster() as c:
        nodes = start_chain(c, n_nodes)
        node_p50 = chain_latency(nodes[0].cmd_url, nodes[-1].pub_url, samples, hops)
        relay_urls = [url() for _ in range(n_nodes)]
        raw_pub = url()
        for i in range(n_nodes):
            last = i == n_nodes - 1
            next_url = raw_pub if last else relay_urls[i + 1]
            start_helper(c, relay_main, relay_urls[i], next_url, last, False)
        raw_p50 = chain_latency(relay_urls[0], raw_pub, samples, hops, request_version)
    return node_p50, raw_p50


def retry_port_race(bench: Callable[..., tuple[float, float]], *args: Any) -> tuple[float, float]:
    """Run `bench`, again (up to 3 times) when a node lost a free port to another process
    between allocation and bind (32 nodes start at once on a machine shared with others)."""
    for attempt in range(3):
        try:
            return bench(*args)
        except RuntimeError as exc:
            if "cannot bind" not in str(exc) or attempt == 2:
                raise
    raise AssertionError("unreachable")


def bench_latency_curve(n_nodes: int, samples: int, rounds: int = 5) -> tuple[float, float]:
    """(plaintext chain p50, CurveZMQ chain p50) per hop: two chains side by side, sampled in
    alternating rounds (see bench_flood_curve)."""
    hops = n_nodes - 1
    with cluster() as plain_cluster, cluster() as curve_cluster:
        chains = {False: start_chain(plain_cluster, n_nodes),
                  True: start_chain(curve_cluster, n_nodes, secure=True)}
        latencies: dict[bool, list[float]] = {False: [], True: []}
        for round_ in range(rounds):
            for secure in ((False, True) if round_ % 2 else (True, False)):
                nodes = chains[secure]
                latencies[secure] += chain_latencies(
                    nodes[0].cmd_url, nodes[-1].pub_url, max(1, samples // rounds), hops,
                    curves=(nodes[0].curve, nodes[-1].curve))
    return median(latencies[False]), median(latencies[True])


# ---------------------------------------------------------------------- full sync


def load(node: NodeProc, n_keys: int, batch: int = 5_000) -> None:
    with node.client() as client:
        for start in range(0, n_keys, batch):
            key_vals = {
                f"key/{i:07d}": make_value(1, "loader", value_of(i))
                for i in range(start, min(n_keys, start + batch))
            }
            client.set(key_vals)


def digest(node: NodeProc) -> int:
    with node.client() as client:
        return int(client.node_info(refresh=True).digest)


def diverge(
    a: NodeProc, b: NodeProc, n_keys: int, n_diff: int, version: int, rng: random.Random
) -> None:
    """n_diff keys differ: half newer on a, half newer on b (so the sync must go both ways)."""
    keys = rng.sample(range(n_keys), n_diff)
    for node, part in ((a, keys[: n_diff // 2]), (b, keys[n_diff // 2 :])):
        with node.client() as client:
            client.set({f"key/{i:07d}": make_value(version, node.name, b"changed") for i in part})


# An encoded map<string, Value> with no entry: key and value type ids (STRING 11, STRUCT 12), then
# the entry count.
_EMPTY_HASH_MAP = bytes([11, 12]) + bytes(4)


def around_map(template: bytes) -> tuple[bytes, bytes]:
    """The bytes before and after the one empty map<string, Value> in an encoded `template`."""
    at = template.find(_EMPTY_HASH_MAP)
    if at < 0 or template.find(_EMPTY_HASH_MAP, at + 1) >= 0:
        raise RuntimeError("unexpected encoding layout")
    return template[:at], template[at + len(_EMPTY_HASH_MAP) :]


HASH_DUMP = wire.encode(requests.key_dump(hashes_only=True))
HASH_DUMP_REPLY = around_map(wire.encode(Response(publication=Publication(key_vals={}))))
KEY_DUMP_HASHES = around_map(
    wire.encode(Request(cmd=Command.KEY_DUMP, key_dump=KeyDumpParams(key_val_hashes={})))
)


def hashes_as_key_dump(reply: bytes) -> bytes:
    """A HASH_DUMP reply turned, without decoding it, into the KEY_DUMP request that carries the
    same hashes (the hash map's bytes spliced between the request's own head and tail)."""
    head, tail = HASH_DUMP_REPLY
    if not reply.startswith(head) or not reply.endswith(tail):
        raise RuntimeError("HASH_DUMP reply not laid out as Response(publication(key_vals))")
    hashes = memoryview(reply)[len(head) : len(reply) - len(tail)]
    return b"".join((KEY_DUMP_HASHES[0], hashes, KEY_DUMP_HASHES[1]))


def raw_request(node: NodeProc, payload: bytes, timeout_s: float = 60) -> bytes:
    """Send one encoded request to `node`; return its reply undecoded."""
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    if node.curve is not None:
        apply_client(sock, node.curve.key_pair, node.curve.server_key)
    sock.connect(node.cmd_url)
    try:
        sock.send_multipart([b"", payload])
        if not sock.poll(int(timeout_s * 1000)):
            raise RuntimeError(f"{node.name}: no reply within {timeout_s} s")
        return sock.recv_multipart()[-1]
    finally:
        sock.close(linger=0)


def check_hashes_splice(node: NodeProc) -> None:
    """That hashes_as_key_dump carries exactly the hashes of the node's HASH_DUMP reply."""
    reply = raw_request(node, HASH_DUMP)
    request = wire.decode_request(hashes_as_key_dump(reply))
    hashes = request.key_dump.key_val_hashes if request.key_dump else None
    sent = wire.decode_response(reply).publication
    if request.cmd != Command.KEY_DUMP or sent is None or hashes != sent.key_vals:
        raise RuntimeError("the spliced KEY_DUMP does not carry the HASH_DUMP's hashes")


def naive_sync(a: NodeProc, b: NodeProc, timeout_s: float = 120) -> float:
    """The naive 3-way sync of `a` (requester) with `b` (responder): a's hashes of its WHOLE
    store go to b (a KEY_DUMP with key_val_hashes, which b answers as it answers a node's sync);
    a merges the key-values b returns and sends b back the keys b asked for
    (tobe_updated_keys) with a KEY_SET; repeated until the root digests agree. Returns the ms
    from the start until they do.

    Driven from this process (the nodes have no naive sync of their own): the hashes a encodes
    in its HASH_DUMP reply go on to b as the bytes of the KEY_DUMP (spliced, not decoded here:
    a node would encode them once and send them, as a does), so the driver adds a loopback hop
    but no per-key work; b's reply is decoded here and set on a through the Python client, and
    the values b asked for are read from a (KEY_GET) and set on b."""
    with a.client() as ca, b.client() as cb:
        if ca.peers() or cb.peers():
            raise RuntimeError("the naive sync needs unpeered nodes (a flood would help it)")
        start = time.monotonic()
        while time.monotonic() - start < timeout_s:
            key_dump = hashes_as_key_dump(raw_request(a, HASH_DUMP))
            reply = check_response(cb.request_raw(key_dump)).publication
            if reply is None:
                raise RuntimeError("KEY_DUMP with hashes returned no publication")
            refused = ca.set(reply.key_vals) if reply.key_vals else {}
            wanted = reply.tobe_updated_keys or []
            if wanted:
                refused |= cb.set(ca.get(wanted))
            if refused:
                raise RuntimeError(f"naive sync: {len(refused)} key-values refused, {refused}")
            if ca.node_info(refresh=True).digest == cb.node_info(refresh=True).digest:
                return (time.monotonic() - start) * 1000
    raise RuntimeError("naive sync: the stores never agreed")


def bench_full_sync(n_keys: int, n_diff: int, runs: int) -> tuple[float, float]:
    """(median ms from PEER_ADD until both stores agree, median ms of the naive whole-store
    3-way sync until they agree), each over `runs` runs, alternating, each on a fresh
    divergence."""
    rng = random.Random(7)
    with cluster() as c:
        a = c.start_node("a")
        b = c.start_node("b")
        c.wait_ready(a)
        c.wait_ready(b)
        load(a, n_keys)
        load(b, n_keys)
        if digest(a) != digest(b):
            raise RuntimeError("stores differ after loading")
        # The root digests are the fast probe timed below; that the stores really hold the same
        # data is checked by the store signature (kvstore.signature: it covers the value bytes)
        # after the first run of either sync. Skipped for the 1 M-key store, whose two full dumps
        # would take longer than the whole benchmark.
        check = n_keys <= 200_000
        if check:
            check_hashes_splice(a)
        times = []
        naive_times = []
        version = 1
        for run in range(runs):
            version += 1
            diverge(a, b, n_keys, n_diff, version, rng)
            with a.client() as ca, b.client() as cb:
                start = time.monotonic()
                ca.add_peer("b", b.cmd_url)
                while ca.node_info(refresh=True).digest != cb.node_info(refresh=True).digest:
                    if time.monotonic() - start > 60:
                        raise RuntimeError("stores never agreed")
                elapsed = time.monotonic() - start
                ca.del_peers(["b"])
            times.append(elapsed * 1000)
            if check and run == 0:
                same_stores(a, b, "full sync")
            # Baseline: the naive exchange, with the hashes of the whole store.
            version += 1
            diverge(a, b, n_keys, n_diff, version, rng)
            naive_times.append(naive_sync(a, b))
            if check and run == 0:
                same_stores(a, b, "naive sync")
    return median(times), median(naive_times)


def same_stores(a: NodeProc, b: NodeProc, what: str) -> None:
    with a.client() as ca, b.client() as cb:
        if store_signature(ca.dump()) != store_signature(cb.dump()):
            raise RuntimeError(f"{what}: root digests agree but the store signatures differ")


# ---------------------------------------------------------------------- durable store


def ack_latencies(node: NodeProc, writers: int, seconds: float) -> list[float]:
    """Milliseconds per solicited single-key KEY_SET, from `writers` concurrent clients."""
    samples: list[float] = []
    lock = threading.Lock()
    stop_at = time.monotonic() + seconds

    def writer(index: int) -> None:
        mine: list[float] = []
        with node.client() as client:
            version = 0
            while time.monotonic() < stop_at:
                version += 1
                value = make_value(version, "w", value_of(version))
                start = time.perf_counter()
                client.set({f"ack/{index}/{version % 64}": value})
                mine.append((time.perf_counter() - start) * 1000)
        with lock:
            samples.extend(mine)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sorted(samples)


def bench_key_set_ack(writers: int, seconds: float) -> tuple[float, float, float]:
    """Solicited single-key KEY_SETs from `writers` concurrent clients on a durability=sync
    node: (p50 ms, p99 ms) of the acknowledgement, and the p50 of the same on an ephemeral
    node (the cost of waiting for the disk)."""
    with cluster() as c:
        node = c.start_node("acker", durability="sync")
        c.wait_ready(node)
        samples = ack_latencies(node, writers, seconds)
        with node.client() as client:
            commits = client.counters()["kvstore.storage.commits"]
        if commits >= len(samples):
            raise RuntimeError("no group commit: one commit per acknowledgement")
        off = c.start_node("acker-off")
        c.wait_ready(off)
        baseline = ack_latencies(off, writers, seconds)
    return (samples[len(samples) // 2], samples[int(len(samples) * 0.99)],
            baseline[len(baseline) // 2])


def answers_with_keys(node: NodeProc, timeout_s: float) -> int:
    """Wait until the node answers (COUNTERS_GET: NODE_INFO would also compute the digest
    tree, which is not what "answers" means); return its key count."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if node.proc.poll() is not None:
            raise RuntimeError(f"{node.name} exited:\n{node.log_path.read_text()}")
        try:
            with KvStoreClient(node.cmd_url, timeout_s=0.2) as client:
                return int(client.counters()["kvstore.num_keys"])
        except Exception:
            time.sleep(0.01)
    raise RuntimeError(f"{node.name} did not answer")


def bench_restore(n_keys: int) -> tuple[float, float, float]:
    """A data dir holding `n_keys` keys (100-byte values): (seconds from the start of a node
    process until it answers, that for an ephemeral node, disk bytes per key)."""
    with cluster() as c:
        node = c.start_node("restore", durability="batch")
        c.wait_ready(node)
        load(node, n_keys, batch=10_000)
        node.proc.send_signal(signal.SIGTERM)  # a clean stop writes what is pending
        node.proc.wait(timeout=300)
        data = c.data_dir("restore")
        disk = sum(f.stat().st_size for f in data.glob("kvstore.sqlite3*"))
        times = []
        for name, durability in (("restore", "batch"), ("empty", None)):
            start = time.monotonic()
            again = c.start_node(name, durability=durability)
            keys = answers_with_keys(again, timeout_s=300)
            times.append(time.monotonic() - start)
            if durability is not None and keys != n_keys:
                raise RuntimeError(f"{keys} of {n_keys} keys restored")
    return times[0], times[1], disk / n_keys


# ---------------------------------------------------------------------- memory


def bench_memory(n_keys: int) -> tuple[float, float]:
    with cluster() as c:
        node = c.start_node("mem")
        c.wait_ready(node)
        before = node.rss_bytes()
        load(node, n_keys, batch=2_000)
        with node.client() as client:
            if client.node_info(refresh=True).num_keys != n_keys:
                raise RuntimeError("not every key was stored")
        per_key = (node.rss_bytes() - before) / n_keys
        conn = start_helper_noready(c, bare_dict_main, n_keys)
        baseline = float(conn.recv()) if conn.poll(300) else float("nan")
    return per_key, baseline


# ---------------------------------------------------------------------- leaf nodes

LEAF_PREFIX = "config/leaf/"


def join_time_s(c: Cluster, mesh_node: NodeProc, joiner: NodeProc, n_keys: int) -> float:
    """Seconds from the PEER_ADDs (both sides) until `joiner` holds `n_keys` keys and the
    mesh node has it INITIALIZED."""
    with mesh_node.client() as cm, joiner.client() as cj:
        start = time.monotonic()
        cm.add_peer(joiner.name, joiner.cmd_url)
        cj.add_peer(mesh_node.name, mesh_node.cmd_url)
        while (cj.node_info(refresh=True).num_keys != n_keys
               or cm.peers()[joiner.name].state != PeerState.INITIALIZED
               or cj.peers()[mesh_node.name].state != PeerState.INITIALIZED):
            if time.monotonic() - start > 120:
                raise RuntimeError(f"{joiner.name} never synced")
            time.sleep(0.002)
        return time.monotonic() - start


def bench_leaf(n_keys: int, n_match: int) -> tuple[float, float, float, float]:
    """A leaf joins a node of `n_keys` keys of which `n_match` are its share: (seconds until it
    holds them, the same for a full node joining a node of only those keys; the leaf's RSS in
    MiB over an empty node's after the sync, the empty node's RSS in MiB)."""
    with cluster() as c:
        full = c.start_node("full")
        empty = c.start_node("empty")
        leaf = c.start_node("leaf", leaf_prefixes=[LEAF_PREFIX])
        share = c.start_node("share")
        joiner = c.start_node("joiner")
        for node in (full, empty, leaf, share, joiner):
            c.wait_ready(node)
        load(full, n_keys - n_match)
        mine = {f"{LEAF_PREFIX}{i:05d}": make_value(1, "loader", value_of(i))
                for i in range(n_match)}
        for node in (full, share):
            with node.client() as client:
                client.set(mine)
            # A running mesh has read its digests (anti-entropy, NODE_INFO): the lazy refresh
            # after a bulk load of 1 M keys is not a join's cost (as in bench_full_sync).
            digest(node)
        leaf_s = join_time_s(c, full, leaf, n_match)
        baseline_s = join_time_s(c, share, joiner, n_match)
        with leaf.client() as client:
            if set(client.dump()) != set(mine):
                raise RuntimeError("the leaf does not hold exactly its share")
        mib = 1024 * 1024
        return (leaf_s, baseline_s, (leaf.rss_bytes() - empty.rss_bytes()) / mib,
                empty.rss_bytes() / mib)


def start_helper_noready(c: Cluster, target: Callable[..., None], *args: Any) -> Connection:
    parent, child = mp.get_context("spawn").Pipe()
    c.spawn(target, *args, child)
    return parent


# ---------------------------------------------------------------------- ZAP User-Id cost


def bench_user_id_cost(n_msgs: int, runs: int) -> tuple[float, float]:
    """(ns per message received plus its ZAP User-Id read, ns per message received): the
    per-message part of authorising commands on a secured node, on one in-process CurveZMQ
    ROUTER. The receive is timed first; the User-Id lookups on the same frames after it, so
    transport noise does not swamp the difference."""
    from kvstore.curve import NodeSecurity

    workdir = Path(tempfile.mkdtemp(prefix="kvbench-zap-"))
    keys = BenchKeys(workdir, ["server", "client"])
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    security = NodeSecurity(str(keys.secrets["server"]), str(keys.auth), "server")
    security.start(ctx)
    router = ctx.socket(zmq.ROUTER)
    router.setsockopt(zmq.RCVHWM, 0)
    security.make_server(router)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    dealer = ctx.socket(zmq.DEALER)
    dealer.setsockopt(zmq.SNDHWM, 0)
    apply_client(dealer, keys.pair("client"), keys.public("server"))
    dealer.connect(f"tcp://127.0.0.1:{port}")
    payload = b"x" * 200
    recv_ns: list[float] = []
    get_ns: list[float] = []
    try:
        for _run in range(runs):
            for _ in range(n_msgs):
                dealer.send_multipart([b"", payload])
            frames: list[zmq.Frame] = []
            start = time.perf_counter()
            while len(frames) < n_msgs:
                router.poll(1000)
                while True:
                    try:
                        frame = router.recv(zmq.NOBLOCK, copy=False)
                    except zmq.Again:
                        break
                    while frame.more:
                        frame = router.recv(zmq.NOBLOCK, copy=False)
                    frames.append(frame)
            recv_ns.append((time.perf_counter() - start) * 1e9 / n_msgs)
            start = time.perf_counter()
            for frame in frames:
                frame.get("User-Id")
            get_ns.append((time.perf_counter() - start) * 1e9 / n_msgs)
    finally:
        dealer.close(linger=0)
        router.close(linger=0)
        security.stop()
        ctx.term()
        shutil.rmtree(workdir, ignore_errors=True)
    return median(recv_ns) + median(get_ns), median(recv_ns)


# ---------------------------------------------------------------------- report


@dataclass
class Metric:
    name: str
    value: float
    target: float | None
    higher_is_better: bool
    baseline_name: str
    baseline: float
    ratio_name: str | None = None  # also print the ratio under this name in --json

    @property
    def met(self) -> bool | None:
        if self.target is None:
            return None  # reported, no target
        return self.value >= self.target if self.higher_is_better else self.value <= self.target

    @property
    def ratio(self) -> float:
        return self.value / self.baseline if self.baseline else float("nan")


def fmt_num(x: float) -> str:
    if x != x:  # NaN
        return "-"
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    return f"{x:.3g}" if abs(x) < 10 else f"{x:.1f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller, faster run")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--runs", type=int, default=None, help="repetitions per metric")
    parser.add_argument("--only", default="all", choices=("all", "durable"),
                        help="measure only these metrics (durable: the durable flood and its "
                        "memory-only baseline)")
    args = parser.parse_args()
    private_tempdir("kvbench")
    quick = args.quick
    runs = args.runs or (2 if quick else 5)

    metrics: list[Metric] = []
    started = time.monotonic()

    def progress(message: str) -> None:
        if not args.json:
            print(f"[{time.monotonic() - started:5.1f}s] {message}", file=sys.stderr)


    if args.only == "all":
        progress("flood (100-kv publications, finite TTL: re-encoded)...")
        node, raw = bench_flood(100, 500 if quick else 2_000, runs)
        metrics.append(Metric("flood_kv_per_s", node, 400_000, True, "raw pyzmq relay", raw))
        progress("flood (100-kv publications, infinite TTL: forwarded as received)...")
        node, raw = bench_flood(100, 500 if quick else 2_000, runs, ttl_ms=TTL_INFINITY)
        metrics.append(Metric("flood_forwarded_kv_per_s", node, None, True, "raw pyzmq relay",
                              raw))
    # The durable flood has infinite TTLs (see bench_flood_durable): its memory-only
    # counterpart is the forwarded flood, run in the same rounds.
    progress("flood (100-kv publications, infinite TTL), durability=batch and memory only...")
    durable, on_disk, flood_off = bench_flood_durable(100, 500 if quick else 2_000, runs)
    metrics.append(Metric("flood_durable_kv_per_s", durable, 0.75 * flood_off, True,
                          "memory only, same rounds", flood_off, "flood_durable_ratio"))
    metrics.append(Metric("flood_durable_on_disk_kv_per_s", on_disk, None, True,
                          "memory only, same rounds", flood_off))
    if args.only == "all":
        measure_the_rest(metrics, quick, runs, progress)
    print_metrics(metrics, args.json, quick, runs)
    return 0


def measure_the_rest(
    metrics: list[Metric], quick: bool, runs: int, progress: Callable[[str], None]
) -> None:
    """Every metric after the durable flood's (see `--only`)."""
    big = 200_000 if quick else 1_000_000
    big_label = "200k" if quick else "1m"
    progress("KEY_SET acknowledgement, durability=sync, 16 writers...")
    p50, p99, p50_off = bench_key_set_ack(16, 2.0 if quick else 5.0)
    metrics.append(Metric("key_set_ack_p50_ms", p50, 2, False, "memory only p50", p50_off))
    metrics.append(Metric("key_set_ack_p99_ms", p99, 10, False, "memory only p50", p50_off))
    progress(f"restore {big_label} keys...")
    restore_s, empty_s, disk_per_key = bench_restore(big)
    metrics.append(Metric(f"restore_{big_label}_keys_s", restore_s, 5, False,
                          "start of an empty node", empty_s))
    metrics.append(Metric(f"disk_bytes_per_key_{big_label}", disk_per_key, None, False,
                          "key + value bytes", 12 + VALUE_BYTES))
    progress("flood (1-kv publications, finite TTL)...")
    node, raw = bench_flood(1, 10_000 if quick else 50_000, runs)
    metrics.append(Metric("single_key_pub_per_s", node, 60_000, True,
                          "raw pyzmq relay, coalescing", raw))
    progress("flood, plaintext and CurveZMQ side by side (100-kv publications, finite TTL)...")
    plain_flood, curve_flood = retry_port_race(bench_flood_curve, 100, 500 if quick else 2_000,
                                               runs + 1)
    metrics.append(Metric("flood_curve_kv_per_s", curve_flood, 0.7 * plain_flood, True,
                          "plaintext node, same rounds", plain_flood,
                          ratio_name="flood_curve_ratio"))
    progress("16-node chain latency...")
    node, raw = bench_latency(16, 50 if quick else 300)
    metrics.append(Metric("hop_latency_p50_us", node, 250, False, "raw pyzmq relay chain", raw))
    progress("16-node chains, plaintext and CurveZMQ side by side...")
    plain_p50, curve_p50 = retry_port_race(bench_latency_curve, 16, 50 if quick else 300)
    metrics.append(Metric("hop_latency_curve_p50_us", curve_p50, 1.3 * plain_p50, False,
                          "plaintext chain, same rounds", plain_p50,
                          ratio_name="hop_latency_curve_ratio"))
    progress("ZAP User-Id per message...")
    with_user, without = bench_user_id_cost(50_000 if quick else 200_000, runs)
    metrics.append(Metric("recv_user_id_ns_per_msg", with_user, 1.2 * without, False,
                          "the same receive without User-Id", without))
    progress("full sync 100k / 1%...")
    node, naive = bench_full_sync(100_000, 1_000, runs)
    metrics.append(
        Metric("full_sync_100k_1pct_ms", node, 150, False, "naive whole-store 3-way", naive)
    )
    progress(f"full sync {big_label} / 10 keys...")
    node, naive = bench_full_sync(big, 10, max(2, runs - 2))
    metrics.append(
        Metric(
            f"full_sync_{big_label}_10diff_ms", node, 100, False, "naive whole-store 3-way", naive
        )
    )
    progress(f"leaf joining {big_label} keys, 1000 its share...")
    leaf_s, share_s, leaf_mib, empty_mib = bench_leaf(big, 1_000)
    metrics.append(Metric(f"leaf_full_sync_{big_label}_s", leaf_s, 1.0, False,
                          "full node joining a node of only those 1000 keys", share_s))
    metrics.append(Metric("leaf_rss_mib", leaf_mib, 10.0, False, "empty node RSS MiB",
                          empty_mib))
    progress(f"memory {big_label} keys...")
    node, bare = bench_memory(big)
    metrics.append(Metric(f"bytes_per_key_{big_label}", node, 520, False, "bare dict", bare))



def print_metrics(metrics: list[Metric], as_json: bool, quick: bool, runs: int) -> None:
    if as_json:
        out: dict[str, float] = {}
        for m in metrics:
            out[m.name] = round(m.value, 3)
            out[f"{m.name}_baseline"] = round(m.baseline, 3)
            out[f"{m.name}_ratio"] = round(m.ratio, 3)
            if m.ratio_name:
                out[m.ratio_name] = round(m.ratio, 3)
        print(json.dumps(out))
        return
    rows = [
        (
            m.name,
            fmt_num(m.value),
            "-" if m.target is None
            else ("≥ " if m.higher_is_better else "≤ ") + fmt_num(m.target),
            {True: "yes", False: "NO", None: "-"}[m.met],
            m.baseline_name,
            fmt_num(m.baseline),
            f"{m.ratio:.2f}",
        )
        for m in metrics
    ]
    headers = ("metric", "value", "target", "met", "baseline", "baseline value", "ratio")
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers))]
    print(f"KvStore benchmark ({'quick, ' if quick else ''}medians of {runs} runs, "
          f"{os.cpu_count()} CPUs)")
    for row in [headers, tuple("-" * w for w in widths), *rows]:
        print("  ".join(str(cell).ljust(widths[i]) for i, cell in enumerate(row)).rstrip())


if __name__ == "__main__":
    sys.exit(main())

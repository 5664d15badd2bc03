#!/usr/bin/env python3
"""The node's flood path without sockets, stage by stage: what bounds `flood_kv_per_s`.

One process runs what a node runs for each 100-kv publication a peer floods to it, through the
same code (`kvstore.wire`, `kvstore.flood.FloodProtocol`, `KvStoreDb.merge_decoded`), with one
initialized peer to flood on to, and times each stage:

  decode   the Thrift C decoder (`wire.decode_request`)
  receive  `FloodProtocol.receive`: loop check, time in transit charged to finite TTLs
  merge    `KvStoreDb.merge_decoded`: the CRDT decision, every hash recomputed, indexes
  flood    `FloodProtocol.flood`: targets, then forward as received (infinite TTL) or
           `prepare_flood` + re-encode (finite TTL)

Metrics (microseconds per key-value, medians of --runs runs of 200 publications each into a
20 k-key store, in the steady state: every key-value updates an existing key), for
`<kind>` = finite (TTL 1 h: re-encoded) and forwarded (infinite TTL: forwarded as received):
  core_<kind>_<stage>_us_per_kv, core_<kind>_us_per_kv (the sum),
  core_<kind>_kv_per_s (1 / the sum: the ceiling of a node's flood rate, sockets not counted)
  hash_us_per_kv: the xxh3 of one value as the merge computes it (part of merge).

Usage: merge_bench.py [--runs N] [--json]
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from scratch import private_tempdir

from kvstore import wire
from kvstore.db import KvStoreDb
from kvstore.flood import FloodProtocol, encode_key_set
from kvstore.forward import Received
from kvstore.hashing import value_hash
from kvstore.node import GC_THRESHOLDS
from kvstore.peers import PeerTable
from kvstore.value import TTL_INFINITY, Value

KEYS = 20_000
PER_PUBLICATION = 100
PUBLICATIONS = 200
PAYLOAD = b"x" * 100
FINITE_TTL_MS = 3_600_000
STAGES = ("decode", "receive", "merge", "flood")
WALL = 1_700_000_000_000


def publications(ttl: int, first_version: int) -> list[bytes]:
    """One-way KEY_SETs as peer "src" floods them (hashes set, as real floods carry them)."""
    keys = [f"key/{i:07d}" for i in range(KEYS)]
    out = []
    for n in range(PUBLICATIONS):
        version = first_version + n
        first = (n * PER_PUBLICATION) % KEYS
        h = value_hash(version, "src", PAYLOAD)
        key_vals = {k: Value(version, "src", PAYLOAD, ttl, 0, h)
                    for k in keys[first : first + PER_PUBLICATION]}
        out.append(encode_key_set(key_vals, ["src"], WALL))
    return out


def node_core() -> FloodProtocol:
    """A node "me" holding the KEYS, with peers "src" (the sender) and "sink" initialized."""
    db = KvStoreDb("me")
    db.merge({f"key/{i:07d}": Value(1, "src", b"y", TTL_INFINITY, 0) for i in range(KEYS)}, 0)
    table = PeerTable(initial_backoff_ms=100, max_backoff_ms=1000, rng=random.Random(1))
    for name in ("src", "sink"):
        table.add(name, 0)
    for peer in table.start_syncs(0):
        table.sync_succeeded(peer.name, peer.sync_id, 0)
    return FloodProtocol("me", db, table, Counter(), max_clock_skew_ms=1000)


def one_run(ttl: int) -> dict[str, float]:
    """Seconds per stage for PUBLICATIONS publications."""
    core = node_core()
    data = publications(ttl, first_version=2)
    spent = dict.fromkeys(STAGES, 0.0)
    clock = time.perf_counter
    now = 1_000
    for payload in data:
        t0 = clock()
        request = wire.decode_request(payload)
        t1 = clock()
        assert request.key_set is not None
        intake = core.receive(request.key_set, WALL + 1)
        t2 = clock()
        result = core.db.merge_decoded(intake.key_vals, now)
        t3 = clock()
        sends = core.flood(intake.path, result.delta, [Received(payload, request)], now, WALL + 1)
        t4 = clock()
        if sum(send.key_count for send in sends) != PER_PUBLICATION:
            raise RuntimeError("not every key-value was flooded on")
        spent["decode"] += t1 - t0
        spent["receive"] += t2 - t1
        spent["merge"] += t3 - t2
        spent["flood"] += t4 - t3
    forwarded = core.counters["kvstore.flood.forwarded_publications"]
    if forwarded != (PUBLICATIONS if ttl == TTL_INFINITY else 0):
        raise RuntimeError(f"{forwarded} publications forwarded as received")
    return spent


def hash_seconds(n: int) -> float:
    start = time.perf_counter()
    for version in range(1, n + 1):
        value_hash(version, "src", PAYLOAD)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    private_tempdir("kvbench")
    gc.set_threshold(*GC_THRESHOLDS)  # as in a node process
    per_kv = 1e6 / (PUBLICATIONS * PER_PUBLICATION)
    result: dict[str, float] = {}
    samples: dict[str, dict[str, list[float]]] = {
        kind: {stage: [] for stage in STAGES} for kind in ("finite", "forwarded")}
    for _ in range(args.runs):
        for kind, ttl in (("finite", FINITE_TTL_MS), ("forwarded", TTL_INFINITY)):
            for stage, seconds in one_run(ttl).items():
                samples[kind][stage].append(seconds * per_kv)
    for kind, stages in samples.items():
        total = 0.0
        for stage, values in stages.items():
            median = statistics.median(values)
            result[f"core_{kind}_{stage}_us_per_kv"] = round(median, 3)
            total += median
        result[f"core_{kind}_us_per_kv"] = round(total, 3)
        result[f"core_{kind}_kv_per_s"] = round(1e6 / total)
    n = PUBLICATIONS * PER_PUBLICATION
    result["hash_us_per_kv"] = round(
        statistics.median(hash_seconds(n) for _ in range(args.runs)) * 1e6 / n, 3)
    if args.json:
        print(json.dumps(result))
    else:
        for name, value in result.items():
            print(f"{name:36} {value:,}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

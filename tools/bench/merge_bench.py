#!/usr/bin/env python3
"""The cost of verifying every hash: wire decode + merge of peer publications, in one process.

Metrics:
  merge_verify_kv_per_s   decode + merge of 100-kv publications (100-byte values, hashes set, as
                          peers flood them) with `verify_hashes=True`, as the node runs
  merge_trust_kv_per_s    the same with the hashes trusted (the baseline, same run)
  merge_verify_ratio      verify / trust

Each figure is the best of --runs repetitions (200 publications each, into a fresh 20 k-key
store), alternating the two modes: on a shared machine the best run is the one least disturbed
by other work. Usage: merge_bench.py [--runs N] [--json]
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from kvstore import wire
from kvstore.db import KvStoreDb
from kvstore.gen.kvstore_thrift.ttypes import Publication
from kvstore.hashing import value_hash
from kvstore.node import GC_THRESHOLDS
from kvstore.value import TTL_INFINITY, Value

KEYS = 20_000
PER_PUBLICATION = 100
PUBLICATIONS = 200
PAYLOAD = b"x" * 100


def publications() -> list[bytes]:
    keys = [f"key/{i:07d}" for i in range(KEYS)]
    out = []
    for version in range(2, PUBLICATIONS + 2):
        first = (version * PER_PUBLICATION) % KEYS
        h = value_hash(version, "peer", PAYLOAD)
        key_vals = {
            k: Value(version, "peer", PAYLOAD, TTL_INFINITY, 0, h)
            for k in keys[first : first + PER_PUBLICATION]
        }
        out.append(wire.encode(Publication(key_vals=key_vals)))
    return out


def one_run(data: list[bytes], verify: bool) -> float:
    db = KvStoreDb("me", verify_hashes=verify)
    db.merge({f"key/{i:07d}": Value(1, "peer", b"y", TTL_INFINITY, 0) for i in range(KEYS)}, 0)
    start = time.perf_counter()
    for payload in data:
        db.merge(wire.decode_publication(payload).key_vals, 0, wire_decoded=True)
    return len(data) * PER_PUBLICATION / (time.perf_counter() - start)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    gc.set_threshold(*GC_THRESHOLDS)  # as in a node process
    data = publications()
    best = {True: 0.0, False: 0.0}
    for _ in range(args.runs):
        for verify in (False, True):
            best[verify] = max(best[verify], one_run(data, verify))
    result = {
        "merge_verify_kv_per_s": round(best[True]),
        "merge_trust_kv_per_s": round(best[False]),
        "merge_verify_ratio": round(best[True] / best[False], 3),
    }
    if args.json:
        print(json.dumps(result))
    else:
        for name, value in result.items():
            print(f"{name:24} {value:,}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""What grows with the node count: flood, store and sync costs of 100 and 1 000 simulated nodes.

Measured by simulation of the KvStore core, not with processes: `kvmesh.chaos.sim.Simulation`
runs one `KvStoreDb` + `FloodProtocol` per node (the node's flood core, merge, digests,
`SyncSession`, leaf filters) over a fault-free simulated network that delivers every message in
the order sent, so a flood goes breadth first and its first copy to reach a node came by a
shortest path. What the node shell adds (sockets, ZMQ frames, CurveZMQ, the rate limiter,
forwarding as received) is not in the figures; bytes are the Thrift payloads.

Topologies (nodes n0 .. n{N-1}):
  random      every node a full node; a connected random graph where each node has at least
              DEGREE (3) peers, `netlab.random_peers` with seed 0, as `kvmesh cluster up
              --topology random` peers its nodes.
  leafspine   SPINES (8) full nodes n0..n7 peered as a full mesh; every other node is a KvStore
              leaf with one peer, spine n{(i-8) mod 8}, and the filters of `kvmesh node run --leaf
              --agent` (`agent_leaf_prefixes`: config/<me>/, status/<me>/, node/<me>/,
              revision/<me>/, plus its own name as originator). N = 1 000: 8 spines, 992 leaves.

Workload (steady state): every node has CONFIG_KEYS (10) config/<node>/... keys, written at n0
(the operator's node) as one KEY_SET per node, and STATUS_KEYS (10) status/<node>/... keys with
the agent's status TTL, written at the node itself as one KEY_SET; every value VALUE_BYTES (200).

Metrics (`--json`: one object; <t> = random | leafspine, <n> = the node count):
  <t>_<n>_links
  <t>_<n>_<u>_msgs, _bytes: messages and payload bytes a one-key update <u> costs, flooded to
      convergence (median over ORIGINS origins); _sent_p50, _sent_max: messages a node sends
      for it; _recv_max: messages a node receives; _hops_max: hops to the farthest node that
      takes it; _reached: nodes that hold it after. <u> = update (random: a key at a node;
      leafspine: a status/<leaf>/ key at its leaf) and, in leafspine, leafcfg: a config/<leaf>/
      key written at n0, which only one leaf needs.
  <t>_<n>_full_keys, _full_kv_kb: keys and key+value kilobytes a full node holds after the
      workload (median; the max equals it on every run so far); leafspine also _leaf_keys,
      _leaf_kv_kb. random 1 000 is not simulated with the workload (1 000 stores of 20 000
      keys): every node is a full node holding all 20 * N keys, measured on one store below.
  <t>_<n>_workload_msgs_per_set: messages per KEY_SET of the workload (where simulated).
  <t>_<n>_ae_msgs_per_node, _ae_bytes_per_node, _ae_cpu_ms_per_node (both sides, this
      process), _ae_filtered_builds: one anti-entropy round at steady state (every node syncs
      with its first peer, a leaf with its spine; stores in sync: one digest request and its
      reply), after the workload where it is simulated, else after the one-key updates; the
      second of two rounds (the first recomputes the digests the workload made stale).
  store_<n>_full_mb, store_leaf_mb: tracemalloc of ONE KvStoreDb holding a full node's 20 * N
      keys (n = 100, 1 000, 10 000) or a leaf's 20; store_empty_mb: an empty one (its digest
      tree and bucket index, whatever the key count).
  join_<n>_msgs, _bytes, _cpu_s: full sync of a new, empty full node with a full peer holding
      20 * N keys (both sides' CPU in this one process); join_leaf_<n>_...: the same for a new
      leaf with its spine (the spine walks a filtered digest tree of the leaf's share).
  spine_<n>_filtered_build_ms: CPU a full node holding 20 * N keys spends building the digest
      tree of one leaf's share (median of 21 leaves); a spine keeps 16 such trees, so with
      more leaves every leaf's anti-entropy sync builds one.
  total_s: the benchmark's own run time.

Why not 10 000 nodes in the flood simulation: one KvStoreDb costs ~1.1 MB before its first key
(store_empty_mb), so 10 000 simulated nodes need ~11 GB. The per-node store and join figures
are measured at 10 000 directly (one or two stores); the flood figures scale with links
(random) or spines (leafspine), see docs/scale.md.

Usage: sim_scale.py [--json] [--quick]   (--quick: 100 nodes only; store/join at 100 and 1 000)
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from kvmesh import netlab
from kvmesh.agent.config import AgentConfig
from kvmesh.agent.keys import agent_leaf_prefixes, config_key, status_key
from kvmesh.chaos.sim import Simulation, fault_free
from kvstore import stats, wire
from kvstore.db import KvStoreDb
from kvstore.filters import KeyFilter, leaf_filter
from kvstore.value import TTL_INFINITY, Value, WireKeyVals

DEGREE = 3
SPINES = 8
CONFIG_KEYS = 10
STATUS_KEYS = 10
VALUE_BYTES = 200
STATUS_TTL_MS = AgentConfig.status_ttl_ms
ORIGINS = 5
OPERATOR = 0  # the node config is written at
# Simulate the workload only when the full nodes' stores hold at most this many values in all.
MAX_SIMULATED_VALUES = 2_000_000
MB = 1 << 20


@dataclass
class Topology:
    name: str
    nodes: int
    links: tuple[tuple[int, int], ...]
    leaf_filters: dict[int, KeyFilter] = field(default_factory=dict)

    @property
    def full_nodes(self) -> list[int]:
        return [i for i in range(self.nodes) if i not in self.leaf_filters]


def name_of(index: int) -> str:
    return f"n{index}"  # as `Simulation` names its nodes


def random_topology(nodes: int, degree: int = DEGREE, seed: int = 0) -> Topology:
    names = [name_of(i) for i in range(nodes)]
    index = {name: i for i, name in enumerate(names)}
    links = sorted(tuple(sorted((index[a], index[b])))
                   for a, b in netlab.random_peers(names, degree, seed))
    return Topology("random", nodes, tuple(links))  # type: ignore[arg-type]


def leaf_spine(nodes: int, spines: int = SPINES) -> Topology:
    if nodes <= spines:
        raise ValueError(f"a leaf-spine topology needs more than {spines} nodes")
    links = [(a, b) for a in range(spines) for b in range(a + 1, spines)]
    filters = {}
    for leaf in range(spines, nodes):
        links.append(((leaf - spines) % spines, leaf))
        name = name_of(leaf)
        filters[leaf] = leaf_filter(name, agent_leaf_prefixes(name), ())
    return Topology("leafspine", nodes, tuple(links), filters)


def chain(nodes: int) -> Topology:
    return Topology("chain", nodes, tuple((i, i + 1) for i in range(nodes - 1)))


def _payload(node: int, key: int) -> bytes:
    """VALUE_BYTES of deterministic filler, different per key (as msgpack records are)."""
    seed = f"{node}/{key}/".encode()
    return (seed * (VALUE_BYTES // len(seed) + 1))[:VALUE_BYTES]


def config_set(node: int, version: int = 1) -> dict[str, Value]:
    name = name_of(node)
    return {config_key(name, f"linux/interface/if{k}"): Value(
        version, name_of(OPERATOR), _payload(node, k), TTL_INFINITY, 0)
        for k in range(CONFIG_KEYS)}


def status_set(node: int, version: int = 1) -> dict[str, Value]:
    name = name_of(node)
    return {status_key(name, f"linux/interface/if{k}"): Value(
        version, name, _payload(node, 100 + k), STATUS_TTL_MS, 0)
        for k in range(STATUS_KEYS)}


def workload_keys(nodes: int) -> dict[str, Value]:
    """What every full node holds at steady state."""
    out: dict[str, Value] = {}
    for node in range(nodes):
        out.update(config_set(node))
        out.update(status_set(node))
    return out


class Measured(Simulation):
    """A fault-free simulation that counts what each node sends and receives (messages, payload
    bytes) and the hops the first copy of an update took to each node."""

    def __init__(self, topo: Topology) -> None:
        super().__init__(fault_free(topo.nodes, topo.links), leaf_filters=topo.leaf_filters,
                         checked=False)
        self.reset()

    def reset(self) -> None:
        self.sent = [0] * self.sc.nodes
        self.received = [0] * self.sc.nodes
        self.bytes = 0
        self.hops: dict[int, int] = {}

    def send(self, src: int, dst: int, fn: Callable[..., None], *args: Any) -> None:
        self.sent[src] += 1
        self.received[dst] += 1
        # on_flood(peer, payload) carries bytes; on_request / on_reply carry the Thrift object.
        body = args[1] if fn.__name__ == "on_flood" else wire.encode(args[3])
        self.bytes += len(body)
        super().send(src, dst, fn, *args)

    def merged(self, node: int, key_vals: WireKeyVals, path: tuple[str, ...]) -> dict[str, Value]:
        delta = super().merged(node, key_vals, path)
        if delta and path:
            self.hops.setdefault(node, len(path))
        return delta

    def holders(self, keys: Iterable[str]) -> int:
        wanted = list(keys)
        return sum(len(db.get(wanted, self.now)) == len(wanted) for db in self.dbs)


def update_cost(sim: Measured, origin: int, kv: dict[str, Value]) -> dict[str, float]:
    """Write `kv` at `origin`, flood it to convergence; what it cost."""
    sim.reset()
    sim.write(origin, kv)
    sim.settle()
    return {
        "msgs": sum(sim.sent), "bytes": sim.bytes,
        "sent_p50": statistics.median(sim.sent), "sent_max": max(sim.sent),
        "recv_max": max(sim.received), "hops_max": max(sim.hops.values(), default=0),
        "reached": sim.holders(kv),
    }


def medians(samples: list[dict[str, float]]) -> dict[str, float]:
    return {k: statistics.median(s[k] for s in samples) for k in samples[0]}


def flood_figures(sim: Measured, topo: Topology, origins: int = ORIGINS) -> dict[str, float]:
    """One-key updates from `origins` nodes spread over the topology."""
    out: dict[str, float] = {"links": len(topo.links)}
    # Origins spread over the nodes (leaves in leafspine: a status update comes from its agent).
    pool = sorted(topo.leaf_filters) or list(range(topo.nodes))
    picks = [pool[(i * len(pool)) // origins] for i in range(origins)]
    updates = [update_cost(sim, node, {status_key(name_of(node), "probe"): Value(
        1, name_of(node), _payload(node, 999), STATUS_TTL_MS, 0)}) for node in picks]
    out |= {f"update_{k}": v for k, v in medians(updates).items()}
    if topo.leaf_filters:
        configs = [update_cost(sim, OPERATOR, {config_key(name_of(node), "probe"): Value(
            1, name_of(OPERATOR), _payload(node, 998), TTL_INFINITY, 0)}) for node in picks]
        out |= {f"leafcfg_{k}": v for k, v in medians(configs).items()}
    return out


def anti_entropy_round(sim: Measured) -> dict[str, float]:
    """Every node syncs with its first peer once (stores in sync: the digest roots agree);
    a spine builds a filtered digest tree for a leaf's sync unless it has one of the last
    MAX_FILTERED_DIGESTS (16) built."""
    sim.reset()
    builds = sum(db.counters[stats.LEAF_FILTERED_DIGEST_BUILDS] for db in sim.dbs)
    started = time.process_time()
    for node in range(sim.sc.nodes):
        if sim.peers[node]:
            sim.start_sync(node, sim.peers[node][0])
    sim.settle()
    cpu = time.process_time() - started
    builds = sum(db.counters[stats.LEAF_FILTERED_DIGEST_BUILDS] for db in sim.dbs) - builds
    nodes = sim.sc.nodes
    return {"ae_msgs_per_node": sum(sim.sent) / nodes,
            "ae_bytes_per_node": round(sim.bytes / nodes, 1),
            "ae_cpu_ms_per_node": round(cpu * 1000 / nodes, 3),
            "ae_filtered_builds": builds}


def workload_figures(sim: Measured, topo: Topology) -> dict[str, float]:
    """Every node's config and status flooded in; what each store holds after."""
    sets = 0
    for node in range(topo.nodes):
        sim.write(OPERATOR, config_set(node))
        sim.write(node, status_set(node))
        sets += 2
        if node % 50 == 49:
            sim.settle()  # keeps the event queue short
    sim.settle()
    messages = sum(sim.sent)
    out: dict[str, float] = {"workload_msgs_per_set": round(messages / sets, 2)}
    now = sim.now
    full = [sim.dbs[i].dump(now) for i in topo.full_nodes]
    out |= _store_sizes("full", full)
    if topo.leaf_filters:
        leaves = [sim.dbs[i].dump(now) for i in topo.leaf_filters]
        out |= _store_sizes("leaf", leaves)
        alien = [name_of(i) for i, kv in zip(topo.leaf_filters, leaves, strict=True)
                 if any(f"/{name_of(i)}/" not in key for key in kv)]
        if alien:
            raise RuntimeError(f"leaves holding keys not theirs: {alien[:5]}")
    expected = (CONFIG_KEYS + STATUS_KEYS) * topo.nodes
    if out["full_keys_min"] != expected:
        raise RuntimeError(f"a full node holds {out['full_keys_min']} keys, not {expected}")
    return out


def _store_sizes(kind: str, stores: list[dict[str, Value]]) -> dict[str, float]:
    keys = [len(kv) for kv in stores]
    payload = [sum(len(k) + len(v.value or b"") for k, v in kv.items()) / 1024 for kv in stores]
    return {f"{kind}_keys": statistics.median(keys), f"{kind}_keys_min": min(keys),
            f"{kind}_keys_max": max(keys), f"{kind}_kv_kb": round(statistics.median(payload), 1),
            f"{kind}_kv_kb_max": round(max(payload), 1)}


def store_mb(key_vals: dict[str, Value]) -> float:
    """tracemalloc of one KvStoreDb holding `key_vals` (all it keeps is allocated here)."""
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        # Fresh keys and value bytes: the store keeps both (it copies only the Value records).
        own = {k.encode().decode(): _fresh(v) for k, v in key_vals.items()}
        db = KvStoreDb("me")
        db.merge(own, 0)
        db.root_digest()
        del own
        gc.collect()
        used = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    del db
    return round(used / MB, 2)


def filtered_build_ms(nodes: int, builds: int = 21) -> float:
    """CPU milliseconds a spine holding the workload of `nodes` nodes spends building the
    digest tree of a leaf's share (median of `builds` leaves): what a leaf's anti-entropy sync
    costs it once it serves more leaves than it keeps trees for (MAX_FILTERED_DIGESTS)."""
    db = KvStoreDb("spine")
    db.merge(workload_keys(nodes), 0)
    db.root_digest()
    spent = []
    for leaf in range(builds):
        name = name_of(SPINES + leaf)
        key_filter = leaf_filter(name, agent_leaf_prefixes(name), ())
        started = time.process_time()
        db.filtered_digest_children(key_filter, [0])
        spent.append(time.process_time() - started)
    return round(statistics.median(spent) * 1000, 2)


def _fresh(value: Value) -> Value:
    data = None if value.value is None else bytes(bytearray(value.value))
    return Value(value.version, value.originator_id, data, value.ttl_ms, value.ttl_version)


def join_cost(nodes: int, leaf: bool) -> dict[str, float]:
    """A new node (n1, empty) fully syncs with n0 holding the workload of `nodes` nodes; n1 is
    a full node, or a leaf whose share is n1's keys."""
    filters = {1: leaf_filter(name_of(1), agent_leaf_prefixes(name_of(1)), ())} if leaf else {}
    sim = Measured(Topology("pair", 2, ((0, 1),), filters))
    sim.dbs[0].merge(workload_keys(nodes), sim.now)
    sim.dbs[0].root_digest()  # the peer's tree is current before the sync (as in a node)
    started = time.process_time()
    sim.start_sync(1, 0)
    sim.settle()
    cpu = time.process_time() - started
    return {"msgs": sum(sim.sent), "bytes": sim.bytes, "cpu_s": round(cpu, 3),
            "keys": len(sim.dbs[1].dump(sim.now))}


def run(quick: bool) -> dict[str, float]:
    started = time.monotonic()
    sizes = (100,) if quick else (100, 1000)
    result: dict[str, float] = {}
    for n in sizes:
        for topo in (random_topology(n), leaf_spine(n)):
            prefix = f"{topo.name}_{n}_"
            sim = Measured(topo)
            figures = flood_figures(sim, topo)
            if len(topo.full_nodes) * (CONFIG_KEYS + STATUS_KEYS) * n <= MAX_SIMULATED_VALUES:
                del sim  # one simulation of 1 000 stores at a time (~1.1 GB)
                gc.collect()
                sim = Measured(topo)
                figures |= workload_figures(sim, topo)
            # At the workload's steady state if simulated; the first round reads digest trees
            # stale since the workload (recomputed once): the second is the steady state.
            anti_entropy_round(sim)
            figures |= anti_entropy_round(sim)
            result |= {prefix + k: v for k, v in figures.items()}
            del sim
            gc.collect()
    result["store_empty_mb"] = store_mb({})
    result["store_leaf_mb"] = store_mb({**config_set(1), **status_set(1)})
    for n in (100, 1000) if quick else (100, 1000, 10_000):
        result[f"store_{n}_full_mb"] = store_mb(workload_keys(n))
        result[f"spine_{n}_filtered_build_ms"] = filtered_build_ms(n)
        for kind, leaf in (("join", False), ("join_leaf", True)):
            result |= {f"{kind}_{n}_{k}": v for k, v in join_cost(n, leaf).items()}
        gc.collect()
    result["total_s"] = round(time.monotonic() - started, 1)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--quick", action="store_true", help="100 nodes only")
    args = parser.parse_args()
    result = run(args.quick)
    if args.json:
        print(json.dumps(result))
    else:
        print("simulated KvStore core (kvmesh.chaos.sim), fault-free network; bytes: payloads")
        for name, value in result.items():
            print(f"{name:40} {value:,}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

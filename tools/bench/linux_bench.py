#!/usr/bin/env python3
"""Benchmark of the Linux southbound: the scheduler + descriptors versus raw pyroute2.

    python tools/bench/linux_bench.py [--quick] [--json] [--pairs N] [--runs R]
                                      [--only all|pairs|models|neighbors|rules]

Workload (each in a fresh network namespace): N veth pairs with both ends configured and up,
one IPv4 address per pair (on the first end) and one route per pair via a gateway in that
address's subnet; every link carries kvmesh's ownership group and every route its protocol.

* ``scheduler_txn_s``: one transaction of the 2N interfaces + N routes through ``KVScheduler``
  with ``southbound.linux.register`` (watcher running), from commit to return.
* ``raw_pyroute2_s``: the same netlink requests the descriptors send, made directly with one
  pyroute2 ``IPRoute`` in the same process: per pair, create the pair (first end up, echo for its
  ifindex), set the second end up, add the address, add the route.
* ``ip_batch_s``: the same configuration through ``ip -n <ns> -batch`` (reference only).
* ``resync_noop_s``: a full resync with the same desired state right after the transaction
  (Retrieve of links, addresses, routes + diff; nothing to change).
* ``nft_table_1000_rules_s``: one ``linux/nftables/inet/bench`` table of 1000 rules applied
  through the scheduler (commit to return), against ``nft_json_baseline_s``: ``nft -j -f -`` of
  the same table's JSON in the same kind of namespace, same round (``--nft-only``: just these).

Models of issue 18, each against its own raw pyroute2 baseline in the same rounds:

* ``neighbors_1000_s``: 1000 static neighbors (``linux/neighbor/<dev>/<ip>``, half IPv4, half
  IPv6, permanent) on one link made by hand (an OBTAINED host link), one transaction; baseline
  ``neighbors_raw_pyroute2_s``: the same ``neigh add`` requests (kvmesh's NDA_PROTOCOL
  included) made directly.
* ``rules_500_s``: 500 policy rules (``linux/rule/ipv4/<priority>``, from a /24 to one of ten
  tables), one transaction; baseline ``rules_raw_pyroute2_s``: the same ``rule add`` requests.

Each round runs the three variants back to back (order alternating between rounds); the table
shows medians over the rounds, and ``ratio_vs_raw_pyroute2`` is the median of the per-round
ratios (robust against load swings of a shared machine). Needs root. Never edits BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

# Measure this work tree's code, whatever the venv's editable install points at.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from pyroute2 import IPRoute
from scratch import private_tempdir  # (tools/bench/scratch.py)

from scheduler import KVScheduler
from southbound.linux import KVMESH_LINK_GROUP, KVMESH_ROUTE_PROTO, register
from southbound.linux.models.neighbor import NUD_PERMANENT
from southbound.linux.models.nftables import NAME as NFTABLES_DESCRIPTOR
from southbound.linux.models.rule import ACTIONS

NEIGHBORS = 1000
RULES = 500
NEIGHBOR_LINK = "nb0"


@contextmanager
def fresh_netns() -> Iterator[str]:
    name = f"kvbench-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        yield name
    finally:
        # Bulk-delete the links first: tearing down a namespace that still holds thousands of
        # devices is slow and asynchronous, and would slow down the next run.
        subprocess.run(["ip", "-n", name, "link", "del", "group", str(KVMESH_LINK_GROUP)],
                       capture_output=True)
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


class Pair:
    """Names and addresses of pair ``i``: a<i> 10.x.y.1/30 <-> b<i>, route 172.x.y.0/24 via .2."""

    def __init__(self, i: int) -> None:
        self.a = f"a{i}"
        self.b = f"b{i}"
        base = int(ipaddress.IPv4Address("10.0.0.0")) + 4 * i
        self.address = f"{ipaddress.IPv4Address(base + 1)}/30"
        self.gateway = str(ipaddress.IPv4Address(base + 2))
        self.dst = str(ipaddress.IPv4Network((int(ipaddress.IPv4Address("172.16.0.0")) + 256 * i,
                                              24)))


def desired_state(pairs: list[Pair]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for p in pairs:
        values[f"linux/interface/{p.a}"] = {"type": "veth", "veth": {"peer": p.b},
                                            "addresses": [p.address]}
        values[f"linux/interface/{p.b}"] = {"type": "veth", "veth": {"peer": p.a}}
        values[f"linux/route/main/{p.dst}/{p.a}"] = {"gateway": p.gateway}
    return values


def count_state(netns: str) -> tuple[int, int]:
    """(links, kvmesh routes) in the namespace: a sanity check that the work was done."""
    with IPRoute(netns=netns, flags=0) as ipr:
        links = len(ipr.link("dump"))
        routes = sum(1 for r in ipr.route("dump") if r.get("proto") == KVMESH_ROUTE_PROTO)
    return links, routes


def timed_commit(scheduler: KVScheduler, values: dict[str, Any]) -> float:
    """Seconds the commit of one transaction of ``values`` takes (filling it is not timed)."""
    txn = scheduler.start_txn()
    for key, value in values.items():
        txn.set_value(key, value)
    start = time.perf_counter()
    txn.commit()
    return time.perf_counter() - start


def run_scheduler(pairs: list[Pair]) -> tuple[float, float]:
    values = desired_state(pairs)
    with fresh_netns() as netns:
        scheduler = KVScheduler()  # as the agent runs it (history recorded)
        plugin = register(scheduler, netns)
        try:
            txn_s = timed_commit(scheduler, values)
            start = time.perf_counter()
            scheduler.resync(values, kind="full")
            resync_s = time.perf_counter() - start
        finally:
            plugin.close()
            scheduler.close()
        check(netns, pairs)
    return txn_s, resync_s


def run_raw(pairs: list[Pair]) -> float:
    group, proto = KVMESH_LINK_GROUP, KVMESH_ROUTE_PROTO
    with fresh_netns() as netns:
        ipr = IPRoute(netns=netns, flags=0, nlm_echo=True, ext_ack=True)
        try:
            start = time.perf_counter()
            for p in pairs:
                echoed = ipr.link("add", ifname=p.a, kind="veth", group=group, state="up",
                                  peer={"ifname": p.b, "group": group})
                index, peer = echoed[0].get("index"), echoed[0].get("link")
                ipr.link("set", index=peer, group=group, state="up")
                address, prefix = p.address.split("/")
                ipr.addr("add", index=index, address=address, prefixlen=int(prefix))
                network = ipaddress.ip_network(p.dst)
                ipr.route("add", dst=str(network.network_address), dst_len=network.prefixlen,
                          family=2, table=254, priority=0, proto=proto, scope=0, oif=index,
                          gateway=p.gateway)
            elapsed = time.perf_counter() - start
        finally:
            ipr.close()
        check(netns, pairs)
    return elapsed


def run_ip_batch(pairs: list[Pair]) -> float:
    group, proto = KVMESH_LINK_GROUP, KVMESH_ROUTE_PROTO
    lines = []
    for p in pairs:
        lines += [
            f"link add {p.a} group {group} type veth peer name {p.b} group {group}",
            f"link set {p.a} up",
            f"link set {p.b} up",
            f"addr add {p.address} dev {p.a}",
            f"route add {p.dst} via {p.gateway} dev {p.a} proto {proto}",
        ]
    with fresh_netns() as netns, tempfile.NamedTemporaryFile("w", suffix=".ip") as script:
        script.write("\n".join(lines) + "\n")
        script.flush()
        start = time.perf_counter()
        subprocess.run(["ip", "-n", netns, "-batch", script.name], check=True)
        elapsed = time.perf_counter() - start
        check(netns, pairs)
    return elapsed


def check(netns: str, pairs: list[Pair]) -> None:
    links, routes = count_state(netns)
    expected = (2 * len(pairs) + 1, len(pairs))
    if (links, routes) != expected:
        raise SystemExit(f"benchmark sanity check failed in {netns}: (links, routes) = "
                         f"{(links, routes)}, expected {expected}")


# -- neighbors and rules (issue 18) -----------------------------------------------------------


def neighbor_address(i: int) -> str:
    if i % 2:
        return str(ipaddress.IPv6Address("fd00:18::") + i)
    return str(ipaddress.IPv4Address("10.180.0.0") + i)


def neighbor_mac(i: int) -> str:
    return "02:18:" + ":".join(f"{byte:02x}" for byte in i.to_bytes(4, "big"))


def neighbor_values(count: int) -> dict[str, Any]:
    return {f"linux/neighbor/{NEIGHBOR_LINK}/{neighbor_address(i)}": {"mac": neighbor_mac(i)}
            for i in range(count)}


def with_neighbor_link(netns: str) -> None:
    """The link the neighbors are on, made by hand (kvmesh sees a host link). Left down:
    permanent entries do not need it up, and a link coming up starts kernel work (IPv6
    autoconfiguration, multicast joins) that would overlap the measured phase unevenly."""
    subprocess.run(["ip", "-n", netns, "link", "add", NEIGHBOR_LINK, "type", "veth", "peer",
                    "name", "nb1"], check=True)


def rule_values(count: int) -> dict[str, Any]:
    return {f"linux/rule/ipv4/{1000 + i}": {
        "from": str(ipaddress.IPv4Network((int(ipaddress.IPv4Address("10.0.0.0")) + 256 * i,
                                           24))),
        "table": 100 + i % 10} for i in range(count)}


def count_models(netns: str) -> tuple[int, int]:
    """(kvmesh neighbors, kvmesh rules) in the namespace."""
    with IPRoute(netns=netns, flags=0) as ipr:
        neighbors = sum(1 for n in ipr.neigh("dump")
                        if n.get_attr("NDA_PROTOCOL") == KVMESH_ROUTE_PROTO)
        rules = sum(1 for r in ipr.rule("dump")
                    if r.get_attr("FRA_PROTOCOL") == KVMESH_ROUTE_PROTO)
    return neighbors, rules


def check_models(netns: str, expected: tuple[int, int]) -> None:
    found = count_models(netns)
    if found != expected:
        raise SystemExit(f"benchmark sanity check failed in {netns}: (neighbors, rules) = "
                         f"{found}, expected {expected}")


def run_scheduler_values(values: dict[str, Any], expected: tuple[int, int],
                         prepare: Callable[[str], None] | None = None) -> float:
    with fresh_netns() as netns:
        if prepare is not None:
            prepare(netns)
        scheduler = KVScheduler()
        plugin = register(scheduler, netns)
        try:
            elapsed = timed_commit(scheduler, values)
        finally:
            plugin.close()
            scheduler.close()
        check_models(netns, expected)
    return elapsed


def run_raw_neighbors(count: int) -> float:
    with fresh_netns() as netns:
        with_neighbor_link(netns)
        ipr = IPRoute(netns=netns, flags=0, nlm_echo=True, ext_ack=True)
        try:
            index = ipr.link_lookup(ifname=NEIGHBOR_LINK)[0]
            start = time.perf_counter()
            for i in range(count):
                address = neighbor_address(i)
                ipr.neigh("add", dst=address, lladdr=neighbor_mac(i), ifindex=index,
                          state=NUD_PERMANENT, family=10 if ":" in address else 2,
                          NDA_PROTOCOL=KVMESH_ROUTE_PROTO)
            elapsed = time.perf_counter() - start
        finally:
            ipr.close()
        check_models(netns, (count, 0))
    return elapsed


def run_raw_rules(count: int) -> float:
    with fresh_netns() as netns:
        ipr = IPRoute(netns=netns, flags=0, nlm_echo=True, ext_ack=True)
        try:
            start = time.perf_counter()
            for i in range(count):
                ipr.rule("add", family=2, priority=1000 + i, action=ACTIONS["lookup"],
                         FRA_PROTOCOL=KVMESH_ROUTE_PROTO, table=100 + i % 10,
                         src=str(ipaddress.IPv4Address("10.0.0.0") + 256 * i), src_len=24)
            elapsed = time.perf_counter() - start
        finally:
            ipr.close()
        check_models(netns, (0, count))
    return elapsed


def median(samples: list[float]) -> float:
    return statistics.median(samples)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer pairs (well under a minute)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--pairs", type=int, default=None)
    parser.add_argument("--runs", type=int, default=None)
    parser.add_argument("--only", default="all",
                        choices=("all", "pairs", "models", "neighbors", "rules", "nft"),
                        help="measure only these workloads, each with its baseline (models: "
                        "neighbors and rules)")
    parser.add_argument("--nft-only", action="store_true", help="the same as --only nft")
    args = parser.parse_args(argv)
    private_tempdir("kvbench")
    if os.geteuid() != 0:
        print("linux_bench needs root (network namespaces)", file=sys.stderr)
        return 2
    if args.nft_only or args.only == "nft":
        nft_result = nft_metrics(args.runs or 7)
        print(json.dumps(nft_result) if args.json else "\n".join(
            f"{name}  {value}" for name, value in nft_result.items() if name != "nft_samples"))
        return 0
    count = args.pairs or (200 if args.quick else 1000)
    runs = args.runs or (3 if args.quick else 5)
    pairs = [Pair(i) for i in range(count)]
    samples: dict[str, list[float]] = {"scheduler": [], "resync": [], "raw": [], "batch": [],
                                       "neighbors": [], "neighbors_raw": [], "rules": [],
                                       "rules_raw": []}
    steps: list[tuple[str, Callable[[], None]]] = []
    if args.only in ("all", "pairs"):
        steps += [
            ("raw", lambda: samples["raw"].append(run_raw(pairs))),
            ("scheduler", lambda: _record_scheduler(samples, pairs)),
            ("batch", lambda: samples["batch"].append(run_ip_batch(pairs))),
        ]
    if args.only in ("all", "models", "neighbors"):
        neighbors = neighbor_values(NEIGHBORS)
        steps += [
            ("neighbors_raw", lambda: samples["neighbors_raw"].append(
                run_raw_neighbors(NEIGHBORS))),
            ("neighbors", lambda: samples["neighbors"].append(run_scheduler_values(
                neighbors, (NEIGHBORS, 0), with_neighbor_link))),
        ]
    if args.only in ("all", "models", "rules"):
        rules = rule_values(RULES)
        steps += [
            ("rules_raw", lambda: samples["rules_raw"].append(run_raw_rules(RULES))),
            ("rules", lambda: samples["rules"].append(run_scheduler_values(
                rules, (0, RULES)))),
        ]
    for round_number in range(runs):
        # Alternate the order so a slow phase of the (shared) machine does not hit one side only.
        order = steps if round_number % 2 == 0 else list(reversed(steps))
        for _name, step in order:
            step()
    result: dict[str, Any] = {"runs": runs}
    if samples["scheduler"]:
        result.update({
            "pairs": count,
            "values": 3 * count,
            "scheduler_txn_s": round(median(samples["scheduler"]), 4),
            "raw_pyroute2_s": round(median(samples["raw"]), 4),
            "ip_batch_s": round(median(samples["batch"]), 4),
            "resync_noop_s": round(median(samples["resync"]), 4),
        })
        # Each round measures both sides back to back: the median of the per-round ratios is
        # far less sensitive to a shared machine's load swings than the ratio of the medians.
        result["ratio_vs_raw_pyroute2"] = paired_ratio(samples["scheduler"], samples["raw"])
        result["ratio_of_medians_vs_raw_pyroute2"] = round(
            result["scheduler_txn_s"] / result["raw_pyroute2_s"], 3)
        result["ratio_vs_ip_batch"] = round(result["scheduler_txn_s"] / result["ip_batch_s"], 3)
        result["target_ratio_vs_raw_pyroute2"] = 1.2
    if samples["neighbors"]:
        result[f"neighbors_{NEIGHBORS}_s"] = round(median(samples["neighbors"]), 4)
        result["neighbors_raw_pyroute2_s"] = round(median(samples["neighbors_raw"]), 4)
        result["neighbors_ratio_vs_raw_pyroute2"] = paired_ratio(samples["neighbors"],
                                                                 samples["neighbors_raw"])
    if samples["rules"]:
        result[f"rules_{RULES}_s"] = round(median(samples["rules"]), 4)
        result["rules_raw_pyroute2_s"] = round(median(samples["rules_raw"]), 4)
        result["rules_ratio_vs_raw_pyroute2"] = paired_ratio(samples["rules"],
                                                             samples["rules_raw"])
    if samples["neighbors"] or samples["rules"]:
        result["target_models_ratio_vs_raw_pyroute2"] = 1.3
    result["samples"] = {name: [round(x, 4) for x in values] for name, values in samples.items()}
    if args.only == "all":
        result.update(nft_metrics(runs))
    if args.json:
        print(json.dumps(result))
    else:
        print_table(result)
    return 0


def paired_ratio(measured: list[float], baseline: list[float]) -> float:
    """Median of the per-round ratios (each round measures both sides back to back)."""
    return round(median([m / b for m, b in zip(measured, baseline, strict=True)]), 3)


def _record_scheduler(samples: dict[str, list[float]], pairs: list[Pair]) -> None:
    txn_s, resync_s = run_scheduler(pairs)
    samples["scheduler"].append(txn_s)
    samples["resync"].append(resync_s)


def print_table(result: dict[str, Any]) -> None:
    rows = [("runs (medians below)", f"{result['runs']}")]
    if "scheduler_txn_s" in result:
        rows += pair_rows(result)
    for model, count in (("neighbors", NEIGHBORS), ("rules", RULES)):
        if f"{model}_{count}_s" in result:
            rows += [
                (f"{model}_{count}_s", f"{result[f'{model}_{count}_s']:.3f}"),
                (f"{model}_raw_pyroute2_s (same netlink calls)",
                 f"{result[f'{model}_raw_pyroute2_s']:.3f}"),
                (f"{model}_ratio_vs_raw_pyroute2 (median of per-round ratios; target <= 1.3)",
                 f"{result[f'{model}_ratio_vs_raw_pyroute2']:.3f}"),
            ]
    if "nft_table_1000_rules_s" in result:
        rows += [
            ("nft_table_1000_rules_s (scheduler)", f"{result['nft_table_1000_rules_s']:.3f}"),
            ("nft_json_baseline_s (nft -j -f, same JSON)",
             f"{result['nft_json_baseline_s']:.3f}"),
            ("nft_ratio_vs_nft_json (target <= 1.3)", f"{result['nft_ratio_vs_nft_json']:.3f}"),
        ]
    width = max(len(name) for name, _ in rows)
    print(f"{'metric'.ljust(width)}  value")
    print(f"{'-' * width}  -----")
    for name, value in rows:
        print(f"{name.ljust(width)}  {value}")


def pair_rows(result: dict[str, Any]) -> list[tuple[str, str]]:
    return [
        ("veth pairs (both ends) + address + route", f"{result['pairs']}"),
        ("scheduler values in the transaction", f"{result['values']}"),
        ("scheduler_txn_s", f"{result['scheduler_txn_s']:.3f}"),
        ("raw_pyroute2_s (same netlink calls)", f"{result['raw_pyroute2_s']:.3f}"),
        ("ratio_vs_raw_pyroute2 (median of per-round ratios; target <= 1.2)",
         f"{result['ratio_vs_raw_pyroute2']:.3f}"),
        ("ratio of the medians (scheduler / raw)",
         f"{result['ratio_of_medians_vs_raw_pyroute2']:.3f}"),
        ("ip_batch_s (reference)", f"{result['ip_batch_s']:.3f}"),
        ("ratio_vs_ip_batch", f"{result['ratio_vs_ip_batch']:.3f}"),
        ("resync_noop_s (full resync, nothing to change)", f"{result['resync_noop_s']:.3f}"),
    ]


# -- nftables: one table of 1000 rules --------------------------------------------------------

NFT_RULES = 1000


def nft_table_value(rules: int = NFT_RULES) -> dict[str, Any]:
    return {
        "chains": [{"name": "input", "type": "filter", "hook": "input", "prio": 0,
                    "policy": "accept"}],
        "rules": [{"chain": "input", "expr": [
            {"match": {"op": "==", "left": {"payload": {"protocol": "ip", "field": "saddr"}},
                       "right": str(ipaddress.IPv4Address(0x0A000000 + i))}},
            {"match": {"op": "==", "left": {"payload": {"protocol": "tcp", "field": "dport"}},
                       "right": 10000 + i}},
            {"counter": None}, {"drop": None}]} for i in range(rules)],
    }


def nft_document(value: dict[str, Any]) -> bytes:
    """The same table as one plain ``nft -j -f`` document (what an operator would load)."""
    where = {"family": "inet", "table": "bench"}
    commands: list[dict[str, Any]] = [{"add": {"table": {"family": "inet", "name": "bench"}}}]
    commands += [{"add": {"chain": {**where, **chain}}} for chain in value["chains"]]
    commands += [{"add": {"rule": {**where, **rule}}} for rule in value["rules"]]
    return json.dumps({"nftables": commands}).encode()


def nft_rule_count(netns: str) -> int:
    listing = subprocess.run(["ip", "netns", "exec", netns, "nft", "-j", "list", "table", "inet",
                              "bench"], capture_output=True, check=True).stdout
    return sum(1 for item in json.loads(listing)["nftables"]
               if "rule" in item and item["rule"]["chain"] == "input")


def run_nft_scheduler(value: dict[str, Any]) -> tuple[float, float, float]:
    """(commit s, commit + deferred baseline s, no-op full resync s) in a fresh namespace."""
    key = "linux/nftables/inet/bench"
    with fresh_netns() as netns:
        scheduler = KVScheduler()
        plugin = register(scheduler, netns)
        try:
            # The descriptor object behind the registered callbacks (to wait for its baseline).
            descriptor = next(d for d in scheduler.descriptors() if d.name == NFTABLES_DESCRIPTOR)
            nftables: Any = descriptor.create.__self__  # type: ignore[union-attr]
            txn = scheduler.start_txn()
            txn.set_value(key, value)
            start = time.perf_counter()
            txn.commit()
            txn_s = time.perf_counter() - start
            if not nftables.wait_idle(60):
                raise SystemExit("nftables baseline not recorded within 60 s")
            with_baseline_s = time.perf_counter() - start
            start = time.perf_counter()
            scheduler.resync({key: value}, kind="full")
            resync_s = time.perf_counter() - start
            if scheduler.transaction_history()[-1].executed:
                raise SystemExit("nftables: the no-op resync changed something")
        finally:
            plugin.close()
            scheduler.close()
        if nft_rule_count(netns) != len(value["rules"]):
            raise SystemExit("nftables benchmark sanity check failed (scheduler)")
    return txn_s, with_baseline_s, resync_s


def run_nft_raw(document: bytes, rules: int) -> float:
    with fresh_netns() as netns, tempfile.NamedTemporaryFile(suffix=".json") as source:
        source.write(document)
        source.flush()
        start = time.perf_counter()
        subprocess.run(["nsenter", f"--net=/run/netns/{netns}", "nft", "-j", "-f", source.name],
                       check=True)
        elapsed = time.perf_counter() - start
        if nft_rule_count(netns) != rules:
            raise SystemExit("nftables benchmark sanity check failed (nft -j -f)")
    return elapsed


def nft_metrics(runs: int) -> dict[str, Any]:
    value = nft_table_value()
    document = nft_document(value)
    samples: dict[str, list[float]] = {"scheduler": [], "with_baseline": [], "resync": [],
                                       "nft": []}
    for round_number in range(runs):
        def scheduler_side() -> None:
            txn_s, with_baseline_s, resync_s = run_nft_scheduler(value)
            samples["scheduler"].append(txn_s)
            samples["with_baseline"].append(with_baseline_s)
            samples["resync"].append(resync_s)

        def nft_side() -> None:
            samples["nft"].append(run_nft_raw(document, NFT_RULES))

        sides = [scheduler_side, nft_side]
        for side in sides if round_number % 2 == 0 else reversed(sides):
            side()
    paired = [s / r for s, r in zip(samples["scheduler"], samples["nft"], strict=True)]
    return {
        "nft_rules": NFT_RULES,
        "nft_runs": runs,
        "nft_table_1000_rules_s": round(median(samples["scheduler"]), 4),
        "nft_json_baseline_s": round(median(samples["nft"]), 4),
        "nft_ratio_vs_nft_json": round(median(paired), 3),
        "nft_target_ratio": 1.3,
        "nft_with_baseline_s": round(median(samples["with_baseline"]), 4),
        "nft_resync_noop_s": round(median(samples["resync"]), 4),
        "nft_samples": {name: [round(x, 4) for x in values] for name, values in samples.items()},
    }


if __name__ == "__main__":
    sys.exit(main())

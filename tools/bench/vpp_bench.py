#!/usr/bin/env python3
"""Benchmark of the VPP southbound: the scheduler + descriptors versus raw vpp_papi calls.

    python tools/bench/vpp_bench.py [--quick] [--json] [--count N] [--runs R]

Workload, against the VPP emulator (`kvmesh vpp-emulator`, one process for the whole run, restarted
empty before each measurement): N loopbacks, each up with one IPv4 address (10.a.b.1/24), and one
route per loopback (100.a.b.0/24 via 10.a.b.2 through that loopback).

* `scheduler_txn_s`: one transaction of the N interfaces (+ N derived addresses) and N routes
  through `KVScheduler` with `southbound.vpp.register` (connected first), from commit to return.
* `raw_papi_s`: the API calls the descriptors make (the counts below check it), with one
  `vpp_papi.VPPApiClient` in the same process: per loopback create_loopback,
  sw_interface_tag_add_del, sw_interface_set_flags, sw_interface_add_del_address,
  ip_route_add_del (retvals checked). Like the plugin, the client is subscribed to interface
  events (so both paths receive the same `sw_interface_event`s).
* `ratio_vs_raw_papi`: median over the runs of scheduler time / raw time, each pair measured back
  to back (target <= 1.2). Both times are mostly the emulator's (a Python process answering each
  call), so the ratio understates the scheduler's own cost against a real VPP; hence also:
* `scheduler_overhead_us_per_call`: the scheduler's absolute overhead, median over the runs of
  (scheduler time - raw time) / the scheduler path's API calls, each pair measured back to back:
  what the scheduler adds per call whatever VPP's own latency. `raw_us_per_call`: the raw path's
  time per call (mostly the emulator's round trip), for scale.
* `scheduler_calls`, `raw_calls`: the API requests each path made in its timed part, counted by
  the emulator (per message name, shown in the table when the two mixes differ); medians over
  the runs. `scheduler_api_calls` and `raw_api_calls` are the same counts under their earlier
  names.
* `*_calls_per_s`: API calls per second of either path.
* `resync_downstream_s`: a downstream resync right after the transaction: Retrieve by dumps of
  N interfaces (sw_interface_dump, per interface ip_address_dump x2 and sw_interface_get_table),
  bridge domains, FIB tables and routes, then the diff (nothing to change).

Issue 19 adds sub-interfaces: `subifs_1000_s` is one transaction of N VLAN sub-interfaces
(`vpp/interface/<parent>.<vlan>`, type sub_interface, VLANs 1..N, at most 4094) of one loopback
created before the count (per sub-interface create_vlan_subif, sw_interface_tag_add_del,
sw_interface_set_flags), `subifs_raw_papi_s` the same calls made directly, and
`subifs_ratio_vs_raw_papi` the median of the per-run ratios (target <= 1.3).

Times are medians over the runs (raw and scheduler run back to back, alternating which goes
first). `resync_api_calls` is counted like `scheduler_calls`. The work tree's own packages are
imported (and run the emulator), whatever the venv's install points at. Never edits BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Measure this work tree's code, whatever the venv's editable install points at; the emulator
# child process (`python -m kvmesh`) gets it through PYTHONPATH.
REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p
)

from scratch import private_tempdir  # noqa: E402  (tools/bench/scratch.py)
from vpp_papi import VPPApiClient  # noqa: E402

import southbound.vpp  # noqa: E402
from kvmesh.vppemu import EmulatorProcess  # noqa: E402
from scheduler import KVScheduler, ValueState  # noqa: E402


def _octets(i: int) -> tuple[int, int]:
    return i // 256, i % 256


def desired_state(count: int) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for i in range(count):
        a, b = _octets(i)
        name = f"bench{i}"
        values[f"vpp/interface/{name}"] = {"type": "loopback", "addresses": [f"10.{a}.{b}.1/24"]}
        values[f"vpp/route/0/100.{a}.{b}.0/24/10.{a}.{b}.2"] = {"outgoing_interface": name}
    return values


@dataclass
class Timed:
    """One timed part of a run: its seconds and the API requests made in it, per message name."""

    seconds: float
    requests: Counter[str] = field(default_factory=Counter)

    @property
    def calls(self) -> int:
        return sum(self.requests.values())


def api_requests(emulator: EmulatorProcess) -> Counter[str]:
    """The API requests the emulator has answered so far, per message name."""
    counters = emulator.control.counters()
    return Counter({k[len("msg.") :]: v for k, v in counters.items() if k.startswith("msg.")})


def commit_timed(
    emulator: EmulatorProcess, scheduler: KVScheduler, values: dict[str, Any]
) -> Timed:
    """One transaction of `values`, timed from commit to return, with the requests it made;
    every value must end CONFIGURED."""
    txn = scheduler.start_txn()
    for key, value in values.items():
        txn.set_value(key, value)
    before = api_requests(emulator)
    start = time.perf_counter()
    txn.commit()
    timed = Timed(time.perf_counter() - start)
    timed.requests = api_requests(emulator) - before
    bad = [k for k in values if scheduler.get_value_status(k).state is not ValueState.CONFIGURED]
    if bad:
        raise RuntimeError(f"{len(bad)} values not configured, e.g. {bad[:3]}")
    return timed


def run_scheduler(emulator: EmulatorProcess, count: int) -> tuple[Timed, Timed]:
    """(the transaction, the downstream resync after it)."""
    emulator.control.restart()
    values = desired_state(count)
    scheduler = KVScheduler()
    plugin = southbound.vpp.register(scheduler, socket=emulator.socket_path)
    try:
        # Connected (as the raw client is) before the count starts: the connection's own
        # requests (sockclnt_create, want_interface_events) are not the transaction's.
        if not plugin.wait_connected(30):
            raise RuntimeError("the plugin did not connect to the emulator")
        committed = commit_timed(emulator, scheduler, values)
        before = api_requests(emulator)
        start = time.perf_counter()
        seq = scheduler.resync({}, kind="downstream")
        resync = Timed(time.perf_counter() - start)
        resync.requests = api_requests(emulator) - before
        (record,) = scheduler.transaction_history(seq=seq)
        changes = [op for op in record.executed if not op.noop]
        if changes:
            raise RuntimeError(f"resync changed {len(changes)} values, expected none")
    finally:
        plugin.close()
        scheduler.close()
    return committed, resync


def run_raw(emulator: EmulatorProcess, count: int) -> Timed:
    emulator.control.restart()
    client = VPPApiClient(bootstrapapi=True, server_address=emulator.socket_path)
    client.connect("bench-raw")
    events: list[Any] = []
    client.register_event_callback(lambda _name, msg: events.append(msg))
    try:
        api = client.api
        if api.want_interface_events(enable_disable=1, pid=1).retval != 0:
            raise RuntimeError("want_interface_events failed")
        labels: list[dict[str, int]] = [{}] * 16

        def check(reply: Any) -> Any:
            if reply.retval != 0:
                raise RuntimeError(f"{type(reply).__name__}: retval {reply.retval}")
            return reply

        before = api_requests(emulator)
        start = time.perf_counter()
        for i in range(count):
            a, b = _octets(i)
            idx = check(api.create_loopback(mac_address=bytes(6))).sw_if_index
            check(api.sw_interface_tag_add_del(is_add=True, sw_if_index=idx, tag=f"raw{i}"))
            check(api.sw_interface_set_flags(sw_if_index=idx, flags=1))
            check(
                api.sw_interface_add_del_address(
                    sw_if_index=idx, is_add=True, prefix=f"10.{a}.{b}.1/24"
                )
            )
            path = {
                "sw_if_index": idx,
                "table_id": 0,
                "weight": 1,
                "preference": 0,
                "type": 0,
                "proto": 0,
                "nh": {"address": {"ip4": bytes([10, a, b, 2])}},
                "label_stack": labels,
            }
            route = {"table_id": 0, "prefix": f"100.{a}.{b}.0/24", "n_paths": 1, "paths": [path]}
            check(api.ip_route_add_del(is_add=True, is_multipath=True, route=route))
        timed = Timed(time.perf_counter() - start)
        timed.requests = api_requests(emulator) - before
    finally:
        client.disconnect()
    return timed


MAX_SUBIFS = 4094
PARENT = "uplink"


def subif_state(count: int) -> dict[str, Any]:
    return {
        f"vpp/interface/{PARENT}.{vlan}": {
            "type": "sub_interface",
            "sub_interface": {"parent": PARENT, "sub_id": vlan, "outer_vlan": vlan},
        }
        for vlan in range(1, min(count, MAX_SUBIFS) + 1)
    }


def run_scheduler_subifs(emulator: EmulatorProcess, count: int) -> Timed:
    """One transaction of `count` VLAN sub-interfaces of a loopback made before the count."""
    emulator.control.restart()
    values = subif_state(count)
    scheduler = KVScheduler()
    plugin = southbound.vpp.register(scheduler, socket=emulator.socket_path)
    try:
        if not plugin.wait_connected(30):
            raise RuntimeError("the plugin did not connect to the emulator")
        txn = scheduler.start_txn()
        txn.set_value(f"vpp/interface/{PARENT}", {"type": "loopback"})
        txn.commit()
        timed = commit_timed(emulator, scheduler, values)
    finally:
        plugin.close()
        scheduler.close()
    return timed


def run_raw_subifs(emulator: EmulatorProcess, count: int) -> Timed:
    emulator.control.restart()
    client = VPPApiClient(bootstrapapi=True, server_address=emulator.socket_path)
    client.connect("bench-raw")
    client.register_event_callback(lambda _name, _msg: None)
    try:
        api = client.api
        if api.want_interface_events(enable_disable=1, pid=1).retval != 0:
            raise RuntimeError("want_interface_events failed")
        parent = api.create_loopback(mac_address=bytes(6)).sw_if_index
        before = api_requests(emulator)
        start = time.perf_counter()
        for vlan in range(1, min(count, MAX_SUBIFS) + 1):
            reply = api.create_vlan_subif(sw_if_index=parent, vlan_id=vlan)
            idx = reply.sw_if_index
            tag = api.sw_interface_tag_add_del(is_add=True, sw_if_index=idx, tag=f"raw{vlan}")
            up = api.sw_interface_set_flags(sw_if_index=idx, flags=1)
            if reply.retval or tag.retval or up.retval:
                raise RuntimeError(f"sub-interface {vlan}: a call failed")
        timed = Timed(time.perf_counter() - start)
        timed.requests = api_requests(emulator) - before
    finally:
        client.disconnect()
    return timed


def measure_subifs(emulator: EmulatorProcess, count: int, runs: int) -> dict[str, Any]:
    sched_runs: list[Timed] = []
    raw_runs: list[Timed] = []
    for i in range(runs):
        if i % 2 == 0:
            raw_runs.append(run_raw_subifs(emulator, count))
            sched_runs.append(run_scheduler_subifs(emulator, count))
        else:
            sched_runs.append(run_scheduler_subifs(emulator, count))
            raw_runs.append(run_raw_subifs(emulator, count))
    ratios = [s.seconds / r.seconds for s, r in zip(sched_runs, raw_runs, strict=True)]
    return {
        "subifs_count": min(count, MAX_SUBIFS),
        "subifs_1000_s": round(statistics.median(r.seconds for r in sched_runs), 4),
        "subifs_raw_papi_s": round(statistics.median(r.seconds for r in raw_runs), 4),
        "subifs_ratio_vs_raw_papi": round(statistics.median(ratios), 3),
        "subifs_ratio_per_run": [round(r, 3) for r in ratios],
        "subifs_scheduler_calls": round(statistics.median(r.calls for r in sched_runs)),
        "subifs_raw_calls": round(statistics.median(r.calls for r in raw_runs)),
    }


def measure(count: int, runs: int) -> tuple[dict[str, Any], dict[str, tuple[int, int]]]:
    """(the metrics, `mix_difference` of the last runs of the two paths)."""
    workdir = tempfile.mkdtemp(prefix="kvm-vppbench-")
    emulator = EmulatorProcess(str(Path(workdir) / "api.sock"), host_check=False)
    sched_runs: list[Timed] = []
    resync_runs: list[Timed] = []
    raw_runs: list[Timed] = []
    ratios: list[float] = []
    overheads_us: list[float] = []
    subifs: dict[str, Any] = {}
    try:
        emulator.start()
        run_raw(emulator, min(count, 50))  # warm-up: imports, API parsing, caches
        run_scheduler(emulator, min(count, 50))
        for i in range(runs):
            # Back to back, alternating which goes first: the machine is shared and noisy, and
            # a ratio of two adjacent measurements is steadier than a ratio of two medians.
            if i % 2 == 0:
                raw_runs.append(run_raw(emulator, count))
                sched, resync = run_scheduler(emulator, count)
            else:
                sched, resync = run_scheduler(emulator, count)
                raw_runs.append(run_raw(emulator, count))
            sched_runs.append(sched)
            resync_runs.append(resync)
            raw = raw_runs[-1]
            ratios.append(sched.seconds / raw.seconds)
            overheads_us.append((sched.seconds - raw.seconds) / sched.calls * 1e6)
        run_raw_subifs(emulator, min(count, 50))  # warm-up
        run_scheduler_subifs(emulator, min(count, 50))
        subifs = measure_subifs(emulator, count, runs)
    finally:
        emulator.stop()
        shutil.rmtree(workdir, ignore_errors=True)

    def med_s(rows: list[Timed]) -> float:
        return statistics.median(row.seconds for row in rows)

    def med_calls(rows: list[Timed]) -> int:
        return round(statistics.median(row.calls for row in rows))

    txn_s, raw_s = med_s(sched_runs), med_s(raw_runs)
    sched_calls, raw_calls = med_calls(sched_runs), med_calls(raw_runs)
    result = {
        "count": count,
        "runs": runs,
        "values_per_txn": count * 3,
        "scheduler_txn_s": round(txn_s, 4),
        "raw_papi_s": round(raw_s, 4),
        "ratio_vs_raw_papi": round(statistics.median(ratios), 3),
        "ratio_per_run": [round(r, 3) for r in ratios],
        "scheduler_overhead_us_per_call": round(statistics.median(overheads_us), 2),
        "raw_us_per_call": round(raw_s / raw_calls * 1e6, 2),
        "scheduler_calls": sched_calls,
        "raw_calls": raw_calls,
        "scheduler_api_calls": sched_calls,
        "raw_api_calls": raw_calls,
        "scheduler_calls_per_s": round(sched_calls / txn_s),
        "raw_calls_per_s": round(raw_calls / raw_s),
        "resync_downstream_s": round(med_s(resync_runs), 4),
        "resync_api_calls": med_calls(resync_runs),
        **subifs,
    }
    return result, mix_difference(sched_runs[-1].requests, raw_runs[-1].requests)


def mix_difference(sched: Counter[str], raw: Counter[str]) -> dict[str, tuple[int, int]]:
    """Message name -> (scheduler path's requests, raw path's) where the two differ."""
    return {
        name: (sched[name], raw[name])
        for name in sorted(set(sched) | set(raw))
        if sched[name] != raw[name]
    }


def print_table(result: dict[str, Any], mix: dict[str, tuple[int, int]]) -> None:
    rows: list[tuple[str, Any]] = [
        ("loopbacks (+1 address, +1 route each)", result["count"]),
        ("runs (median reported)", result["runs"]),
        ("scheduler txn (s)", result["scheduler_txn_s"]),
        ("raw vpp_papi, same calls (s)", result["raw_papi_s"]),
        ("ratio_vs_raw_papi (median of runs; target <= 1.2)", result["ratio_vs_raw_papi"]),
        ("ratio per run", " ".join(str(r) for r in result["ratio_per_run"])),
        (
            "scheduler_overhead_us_per_call (median of runs)",
            result["scheduler_overhead_us_per_call"],
        ),
        ("raw_us_per_call (the emulator's round trip)", result["raw_us_per_call"]),
        (
            "API calls, counted: scheduler / raw",
            f"{result['scheduler_calls']} / {result['raw_calls']}",
        ),
        *(
            (f"  {name}: scheduler / raw", f"{sched} / {raw}")
            for name, (sched, raw) in mix.items()
        ),
        (
            "calls/s: scheduler / raw",
            f"{result['scheduler_calls_per_s']} / {result['raw_calls_per_s']}",
        ),
        ("downstream resync, dump-based (s)", result["resync_downstream_s"]),
        ("resync API requests (each dump + its control_ping)", result["resync_api_calls"]),
        ("sub-interfaces of one loopback (create_vlan_subif, tag, up)", result["subifs_count"]),
        ("subifs_1000_s: scheduler txn (s)", result["subifs_1000_s"]),
        ("subifs: raw vpp_papi, same calls (s)", result["subifs_raw_papi_s"]),
        ("subifs_ratio_vs_raw_papi (median of runs; target <= 1.3)",
         result["subifs_ratio_vs_raw_papi"]),
        ("subifs ratio per run", " ".join(str(r) for r in result["subifs_ratio_per_run"])),
        (
            "subifs API calls, counted: scheduler / raw",
            f"{result['subifs_scheduler_calls']} / {result['subifs_raw_calls']}",
        ),
        *acl_nat_rows(result),
        ("bond_members_100_s (100 members of one bond, one txn)", result["bond_members_100_s"]),
        ("  raw vpp_papi, same 100 calls (s)", result["bond_members_100_raw_papi_s"]),
        ("  ratio (median of runs; target <= 1.3)",
         result["bond_members_100_ratio_vs_raw_papi"]),
        *policy_rows(result),
    ]
    _print_rows(rows)


def _print_rows(rows: list[tuple[str, Any]]) -> None:
    width = max(len(label) for label, _ in rows)
    print(f"| {'metric'.ljust(width)} | value |")
    print(f"|{'-' * (width + 2)}|-------|")
    for label, value in rows:
        print(f"| {label.ljust(width)} | {value} |")


# ---------------------------------------------------------------------- issue 19: ACL and NAT44
ACL_RULES = 1000
NAT_MAPPINGS = 1000


def acl_rules(count: int) -> list[dict[str, Any]]:
    """`count` rules: permit TCP to 10.a.b.0/24 port 80+i%1000, then the last one denies."""
    return [{"action": "permit", "dst": f"10.{i // 256}.{i % 256}.0/24", "protocol": "tcp",
             "dst_ports": [80, 80 + i % 1000]} for i in range(count - 1)] + [{"action": "deny"}]


def _raw_client(emulator: EmulatorProcess) -> VPPApiClient:
    client = VPPApiClient(bootstrapapi=True, server_address=emulator.socket_path)
    client.connect("bench-raw")
    return client


def _checked(reply: Any) -> Any:
    if reply.retval != 0:
        raise RuntimeError(f"{type(reply).__name__}: retval {reply.retval}")
    return reply


def _scheduler_txn(emulator: EmulatorProcess, setup: dict[str, Any],
                   values: dict[str, Any]) -> float:
    """Seconds of one transaction of `values`, after `setup` was applied (not timed)."""
    emulator.control.restart()
    scheduler = KVScheduler()
    plugin = southbound.vpp.register(scheduler, socket=emulator.socket_path)
    try:
        for batch in (setup, values):
            txn = scheduler.start_txn()
            for key, value in batch.items():
                txn.set_value(key, value)
            start = time.perf_counter()
            txn.commit()
            seconds = time.perf_counter() - start
        bad = [k for k in values
               if scheduler.get_value_status(k).state is not ValueState.CONFIGURED]
        if bad:
            raise RuntimeError(f"{len(bad)} values not configured, e.g. {bad[:3]}")
    finally:
        plugin.close()
        scheduler.close()
    return seconds


def run_acl(emulator: EmulatorProcess, raw: bool) -> float:
    """One ACL of ACL_RULES rules applied to an interface: what the scheduler sends, or the same
    two calls (acl_add_replace, acl_interface_set_acl_list) made directly."""
    rules = acl_rules(ACL_RULES)
    if not raw:
        return _scheduler_txn(emulator, {"vpp/interface/up": {"type": "loopback"}},
                              {"vpp/acl/big": {"rules": rules, "interfaces": {"ingress": ["up"]}}})
    emulator.control.restart()
    client = _raw_client(emulator)
    try:
        api = client.api
        idx = _checked(api.create_loopback(mac_address=bytes(6))).sw_if_index
        wire = [{"is_permit": 0 if r["action"] == "deny" else 1,
                 "src_prefix": "0.0.0.0/0", "dst_prefix": r.get("dst", "0.0.0.0/0"),
                 "proto": 6 if "protocol" in r else 0,
                 "srcport_or_icmptype_first": 0, "srcport_or_icmptype_last": 65535,
                 "dstport_or_icmpcode_first": r.get("dst_ports", [0, 65535])[0],
                 "dstport_or_icmpcode_last": r.get("dst_ports", [0, 65535])[1]} for r in rules]
        start = time.perf_counter()
        acl = _checked(api.acl_add_replace(acl_index=0xFFFFFFFF, tag="kvmesh:big",
                                           count=len(wire), r=wire)).acl_index
        _checked(api.acl_interface_set_acl_list(sw_if_index=idx, count=1, n_input=1, acls=[acl]))
        return time.perf_counter() - start
    finally:
        client.disconnect()


def nat_mappings(count: int) -> dict[str, Any]:
    return {f"vpp/nat44/static/m{i}": {
        "protocol": "tcp", "local_ip": f"10.0.{i // 250}.{i % 250 + 1}", "local_port": 80,
        "external_ip": "198.51.100.1", "external_port": 10000 + i} for i in range(count)}


def run_nat(emulator: EmulatorProcess, raw: bool) -> float:
    """NAT_MAPPINGS static mappings in one transaction (the plugin enabled first, not timed), or
    the same nat44_add_del_static_mapping_v2 calls made directly."""
    if not raw:
        return _scheduler_txn(emulator, {"vpp/nat44/global": {}}, nat_mappings(NAT_MAPPINGS))
    emulator.control.restart()
    client = _raw_client(emulator)
    try:
        api = client.api
        _checked(api.nat44_ed_plugin_enable_disable(enable=True, sessions=0, inside_vrf=0,
                                                    outside_vrf=0, session_memory=0, flags=0))
        start = time.perf_counter()
        for i in range(NAT_MAPPINGS):
            _checked(api.nat44_add_del_static_mapping_v2(
                is_add=True, match_pool=False, flags=0, pool_ip_address="0.0.0.0",
                local_ip_address=f"10.0.{i // 250}.{i % 250 + 1}", local_port=80,
                external_ip_address="198.51.100.1", external_port=10000 + i, protocol=6,
                external_sw_if_index=0, vrf_id=0, tag=f"kvmesh:m{i}"))
        return time.perf_counter() - start
    finally:
        client.disconnect()


def measure_acl_nat(runs: int) -> dict[str, Any]:
    """`acl_1000_rules_s` and `nat_static_1000_s` with their raw vpp_papi baselines (same
    emulator, same run, back to back, alternating which goes first) and ratios (target <= 1.3)."""
    workdir = tempfile.mkdtemp(prefix="kvm-vppbench-")
    emulator = EmulatorProcess(str(Path(workdir) / "api.sock"), host_check=False)
    times: dict[str, list[float]] = {name: [] for name in ("acl", "acl_raw", "nat", "nat_raw")}
    ratios: dict[str, list[float]] = {"acl": [], "nat": []}
    try:
        emulator.start()
        for name, run in (("acl", run_acl), ("nat", run_nat)):
            run(emulator, True)  # warm-up
            run(emulator, False)
            for i in range(runs):
                order = (True, False) if i % 2 == 0 else (False, True)
                measured = {raw: run(emulator, raw) for raw in order}
                times[f"{name}_raw"].append(measured[True])
                times[name].append(measured[False])
                ratios[name].append(measured[False] / measured[True])
    finally:
        emulator.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    med = statistics.median
    return {
        "acl_1000_rules_s": round(med(times["acl"]), 4),
        "acl_1000_rules_raw_papi_s": round(med(times["acl_raw"]), 4),
        "acl_1000_rules_ratio_vs_raw_papi": round(med(ratios["acl"]), 3),
        "nat_static_1000_s": round(med(times["nat"]), 4),
        "nat_static_1000_raw_papi_s": round(med(times["nat_raw"]), 4),
        "nat_static_1000_ratio_vs_raw_papi": round(med(ratios["nat"]), 3),
    }


def acl_nat_rows(result: dict[str, Any]) -> list[tuple[str, Any]]:
    return [
        ("acl_1000_rules_s (one ACL of 1000 rules, applied)", result["acl_1000_rules_s"]),
        ("  raw vpp_papi, same 2 calls (s)", result["acl_1000_rules_raw_papi_s"]),
        ("  ratio (median of runs; target <= 1.3)", result["acl_1000_rules_ratio_vs_raw_papi"]),
        ("nat_static_1000_s (1000 static mappings, one txn)", result["nat_static_1000_s"]),
        ("  raw vpp_papi, same 1000 calls (s)", result["nat_static_1000_raw_papi_s"]),
        ("  ratio (median of runs; target <= 1.3)", result["nat_static_1000_ratio_vs_raw_papi"]),
    ]


BOND_MEMBERS = 100


def run_bond(emulator: EmulatorProcess, raw: bool) -> float:
    """BOND_MEMBERS loopbacks made members of one LACP bond in one transaction (the bond and
    the loopbacks made first, not timed), or the same bond_add_member calls made directly."""
    loops = {f"vpp/interface/m{i}": {"type": "loopback"} for i in range(BOND_MEMBERS)}
    if not raw:
        setup = {"vpp/interface/bond0": {"type": "bond", "bond": {"mode": "lacp"}}, **loops}
        members: dict[str, Any] = {f"vpp/bond/bond0/member/m{i}": {} for i in range(BOND_MEMBERS)}
        return _scheduler_txn(emulator, setup, members)
    emulator.control.restart()
    client = _raw_client(emulator)
    try:
        api = client.api
        bond = _checked(api.bond_create2(mode=5, lb=0, id=0xFFFFFFFF)).sw_if_index
        indexes = [_checked(api.create_loopback(mac_address=bytes(6))).sw_if_index
                   for _ in range(BOND_MEMBERS)]
        start = time.perf_counter()
        for idx in indexes:
            _checked(api.bond_add_member(sw_if_index=idx, bond_sw_if_index=bond))
        return time.perf_counter() - start
    finally:
        client.disconnect()


def measure_bond(runs: int) -> dict[str, Any]:
    """`bond_members_100_s` with its raw vpp_papi baseline, alternating which goes first."""
    workdir = tempfile.mkdtemp(prefix="kvm-vppbench-")
    emulator = EmulatorProcess(str(Path(workdir) / "api.sock"), host_check=False)
    times: dict[bool, list[float]] = {True: [], False: []}
    ratios: list[float] = []
    try:
        emulator.start()
        run_bond(emulator, True)  # warm-up
        run_bond(emulator, False)
        for i in range(runs):
            order = (True, False) if i % 2 == 0 else (False, True)
            measured = {raw: run_bond(emulator, raw) for raw in order}
            for raw, seconds in measured.items():
                times[raw].append(seconds)
            ratios.append(measured[False] / measured[True])
    finally:
        emulator.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    med = statistics.median
    return {
        "bond_members_100_s": round(med(times[False]), 4),
        "bond_members_100_raw_papi_s": round(med(times[True]), 4),
        "bond_members_100_ratio_vs_raw_papi": round(med(ratios), 3),
    }



# ---------------------------------------------------------------------- issue 28: IPsec and SRv6
IPSEC_SAS = 1000
SA_KEY = "00112233445566778899aabbccddeeff"


def ipsec_sas(count: int) -> dict[str, Any]:
    """`count` tunnel-mode ESP SAs (aes-gcm-128, anti-replay), one per id."""
    return {f"vpp/ipsec/sa/{i}": {
        "spi": 1000 + i, "crypto_alg": "aes-gcm-128", "crypto_key": SA_KEY, "salt": i,
        "anti_replay": True,
        "tunnel": {"src": "192.0.2.1", "dst": f"198.51.{i // 250}.{i % 250 + 1}"}}
        for i in range(count)}


def run_ipsec(emulator: EmulatorProcess, raw: bool) -> float:
    """IPSEC_SAS SAs in one transaction, or the same ipsec_sad_entry_add_v2 calls made directly."""
    if not raw:
        return _scheduler_txn(emulator, {}, ipsec_sas(IPSEC_SAS))
    emulator.control.restart()
    client = _raw_client(emulator)
    try:
        api = client.api
        key = {"length": 16, "data": bytes.fromhex(SA_KEY)}
        start = time.perf_counter()
        for i in range(IPSEC_SAS):
            _checked(api.ipsec_sad_entry_add_v2(entry={
                "sad_id": i, "spi": 1000 + i, "protocol": 50, "crypto_algorithm": 7,
                "crypto_key": key, "integrity_algorithm": 0,
                "integrity_key": {"length": 0, "data": b""}, "flags": 2 | 4,
                "tunnel": {"src": "192.0.2.1", "dst": f"198.51.{i // 250}.{i % 250 + 1}",
                           "table_id": 0},
                "salt": i, "udp_src_port": 4500, "udp_dst_port": 4500,
                "anti_replay_window_size": 64}))
        return time.perf_counter() - start
    finally:
        client.disconnect()


SRV6_LOCALSIDS = 1000


def srv6_localsids(count: int) -> dict[str, Any]:
    """`count` End.DT4 local SIDs fc00::<i> into table 0."""
    return {f"vpp/srv6/localsid/fc00::{i + 1:x}": {"behavior": "end.dt4"} for i in range(count)}


def run_srv6(emulator: EmulatorProcess, raw: bool) -> float:
    """SRV6_LOCALSIDS local SIDs in one transaction, or the same sr_localsid_add_del calls."""
    if not raw:
        return _scheduler_txn(emulator, {}, srv6_localsids(SRV6_LOCALSIDS))
    emulator.control.restart()
    client = _raw_client(emulator)
    try:
        api = client.api
        start = time.perf_counter()
        for i in range(SRV6_LOCALSIDS):
            _checked(api.sr_localsid_add_del(
                is_del=False, localsid=f"fc00::{i + 1:x}", end_psp=False, behavior=9,
                sw_if_index=0, vlan_index=0, fib_table=0, nh_addr="0.0.0.0"))
        return time.perf_counter() - start
    finally:
        client.disconnect()


def measure_pairs(runs: int, pairs: dict[str, Any]) -> dict[str, dict[str, list[float]]]:
    """For each name -> run(emulator, raw): the scheduler's and raw vpp_papi's seconds and their
    per-run ratios (same emulator, back to back, alternating which goes first)."""
    workdir = tempfile.mkdtemp(prefix="kvm-vppbench-")
    emulator = EmulatorProcess(str(Path(workdir) / "api.sock"), host_check=False)
    out: dict[str, dict[str, list[float]]] = {
        name: {"kvmesh": [], "raw": [], "ratio": []} for name in pairs}
    try:
        emulator.start()
        for name, run in pairs.items():
            run(emulator, True)  # warm-up
            run(emulator, False)
            for i in range(runs):
                order = (True, False) if i % 2 == 0 else (False, True)
                measured = {raw: run(emulator, raw) for raw in order}
                out[name]["raw"].append(measured[True])
                out[name]["kvmesh"].append(measured[False])
                out[name]["ratio"].append(measured[False] / measured[True])
    finally:
        emulator.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    return out


def measure_policy(runs: int) -> dict[str, Any]:
    """`ipsec_sa_1000_s` and `srv6_localsid_1000_s` with their raw vpp_papi baselines and
    ratios (target <= 1.3)."""
    measured = measure_pairs(runs, {"ipsec_sa_1000": run_ipsec,
                                    "srv6_localsid_1000": run_srv6})
    med = statistics.median
    result: dict[str, Any] = {}
    for name, rows in measured.items():
        result[f"{name}_s"] = round(med(rows["kvmesh"]), 4)
        result[f"{name}_raw_papi_s"] = round(med(rows["raw"]), 4)
        result[f"{name}_ratio_vs_raw_papi"] = round(med(rows["ratio"]), 3)
        result[f"{name}_ratio_per_run"] = [round(r, 3) for r in rows["ratio"]]
    return result


def policy_rows(result: dict[str, Any]) -> list[tuple[str, Any]]:
    rows: list[tuple[str, Any]] = []
    for name, what in (("ipsec_sa_1000", "1000 IPsec SAs, one txn"),
                       ("srv6_localsid_1000", "1000 SRv6 local SIDs, one txn")):
        if f"{name}_s" in result:
            rows += [(f"{name}_s ({what})", result[f"{name}_s"]),
                     ("  raw vpp_papi, same 1000 calls (s)", result[f"{name}_raw_papi_s"]),
                     ("  ratio (median of runs; target <= 1.3)",
                      result[f"{name}_ratio_vs_raw_papi"]),
                     ("  ratio per run", " ".join(str(r) for r in result[f"{name}_ratio_per_run"]))]
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="200 loopbacks, 5 runs")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--count", type=int, default=None, help="number of loopbacks")
    parser.add_argument("--runs", type=int, default=None, help="runs per path")
    parser.add_argument("--only", choices=("all", "policy", "bond"), default="all",
                        help="policy: only the IPsec/SRv6 metrics, bond: only "
                        "bond_members_100_s (issue 28)")
    args = parser.parse_args(argv)
    private_tempdir("kvbench")
    count = args.count or (200 if args.quick else 1000)
    runs = args.runs or 5
    if not 1 <= count <= 65536:
        parser.error("--count must be within 1..65536")
    logging.basicConfig(level=logging.WARNING)
    if args.only == "bond":
        bond = measure_bond(runs)
        if args.json:
            print(json.dumps(bond))
        else:
            _print_rows([(name, value) for name, value in bond.items()])
        return 0
    if args.only == "policy":
        policy = measure_policy(runs)
        if args.json:
            print(json.dumps(policy))
        else:
            _print_rows(policy_rows(policy))
        return 0
    result, mix = measure(count, runs)
    result.update(measure_acl_nat(runs))
    result.update(measure_bond(runs))
    result.update(measure_policy(runs))
    if args.json:
        print(json.dumps(result))
    else:
        print_table(result, mix)
    return 0


if __name__ == "__main__":
    sys.exit(main())

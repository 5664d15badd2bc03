"""A chaos run on an isolated cluster: rounds of workload + faults, heal, check, report.

Per round (all choices from one seeded RNG, so a seed reproduces the schedule):
1. writers start on random nodes (`kvmesh.chaos.workload`);
2. after 1 s, one or two faults of the enabled kinds are injected on random targets
   (`kvmesh.faults`) and held for `duration` seconds;
3. everything is healed and the writers stop; the clock for convergence starts;
4. the checker polls until every node answers, all root digests are equal and every node's dump
   passes `kvmesh.chaos.model.check_store` (or fails the round after `converge_timeout`);
5. then: no node died that was not killed, no unexpected error counter, no traceback in a log.

All through the run a monitor dumps `ttl/` keys from every node every 0.5 s and records any key
that will live past its latest legitimate expiry by more than the bound. The report gives per
round the convergence time after heal, nftables drop counts, flood redundancy (key-values
received per key-value written, per node) and every problem found; a failure prints the seed and
the command that reproduces it.
"""

from __future__ import annotations

import json
import random
import statistics
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from kvmesh import cluster, faults, launch, netlab, rundirs
from kvmesh.agent.desired import encode_config_value
from kvmesh.agent.keys import config_key
from kvmesh.chaos.model import Write, WriteLog, check_store, ttl_overrun_ms
from kvmesh.chaos.workload import Writer, monotonic_ms
from kvstore import TTL_INFINITY, KvStoreError, Value, safefs, stats

__all__ = ["ALL_FAULTS", "DEFAULT_FAULTS", "ChaosConfig", "RoundReport", "run"]

ALL_FAULTS = ("partition", "loss", "pause", "crash", "link", "restart-all")
# restart-all keeps acknowledged writes thanks to the durable store (issue 9): every node runs
# with a data dir; finite-TTL keys are not durable and the checker does not expect them back.
DEFAULT_FAULTS = ALL_FAULTS
ERROR_COUNTER_PREFIXES = (stats.ERRORS.prefix, "kvstore.no_merge.INVALID", stats.TTL_CLOCK_AHEAD)
ERROR_COUNTERS = (stats.MALFORMED_REQUESTS, stats.FULL_SYNC_BAD_REPLIES)
BOUND_MS = 250  # documented bound (wall-clock offset: 0, one kernel) + measurement slack
PRESENT_MARGIN_MS = 2000  # ttl_threshold_ms + transit + polling slack
AGENT_PREFIXES = ("status/", "node/")  # what agents publish: theirs, not the workload's


@dataclass
class ChaosConfig:
    nodes: int = 5
    seed: int = 1
    rounds: int = 2
    faults: tuple[str, ...] = DEFAULT_FAULTS
    duration: float = 5.0
    writers: int = 3
    topology: str = "random"
    degree: int = 3
    sync_interval_s: float = 3.0
    converge_timeout: float = 60.0
    run_dir: Path = field(default_factory=lambda: cluster.default_run_dir("chaos"))
    agents: bool = False  # run each node's agent (Linux southbound in its namespace) and check it

    def command(self) -> str:
        return (f".venv/bin/python tools/chaos.py --nodes {self.nodes} --seed {self.seed} "
                f"--rounds {self.rounds} "
                f"--faults {','.join(self.faults)} --duration {self.duration:g} "
                f"--writers {self.writers} --topology {self.topology} --degree {self.degree}"
                + (" --agents" if self.agents else ""))

    def node_config(self) -> dict[str, object]:
        return {"sync_interval_s": self.sync_interval_s, "sync_timeout_ms": 2000,
                "sync_initial_backoff_ms": 200, "sync_max_backoff_ms": 2000}


@dataclass
class RoundReport:
    index: int
    faults: list[str] = field(default_factory=list)
    drops: dict[str, int] = field(default_factory=dict)
    acknowledged: int = 0
    uncertain: int = 0
    convergence_s: float | None = None
    restart_s: float | None = None  # rounds that restart nodes: heal until all answer again
    redundancy: dict[str, float] = field(default_factory=dict)
    desired_links: int | None = None  # with agents: links the kernels had to hold
    problems: list[str] = field(default_factory=list)


class TtlMonitor(threading.Thread):
    """Dumps the finite-TTL keys of every node twice a second; records overruns."""

    def __init__(self, state: cluster.ClusterState, log: WriteLog) -> None:
        super().__init__(name="ttl-monitor", daemon=True)
        self.state, self.log = state, log
        self.stop_event = threading.Event()
        self.worst: dict[str, tuple[int, str]] = {}  # key -> (overrun ms, node)
        self.samples = 0

    def run(self) -> None:
        clients = {n: self.state.client(n, timeout_s=0.5) for n in self.state.nodes}
        try:
            while not self.stop_event.wait(0.5):
                for name, client in clients.items():
                    asked = monotonic_ms()
                    try:
                        dump = client.dump("ttl/")
                    except KvStoreError:
                        continue
                    self.samples += 1
                    expected = self.log.expectations()
                    for key, value in dump.items():
                        exp = expected.get(key)
                        if exp is None:
                            continue
                        over = ttl_overrun_ms(exp, asked, value.ttl_ms)
                        if over > BOUND_MS and over > self.worst.get(key, (0, ""))[0]:
                            self.worst[key] = (over, name)
        finally:
            for client in clients.values():
                client.close()

    def stop(self) -> None:
        self.stop_event.set()


def _pick_faults(rng: random.Random, config: ChaosConfig, state: cluster.ClusterState,
                 lab: netlab.Lab) -> list[faults.Fault]:
    names = sorted(state.nodes)
    kinds = list(config.faults)
    if "restart-all" in kinds and rng.random() < 1 / len(kinds):
        return [faults.RestartAll(state)]
    kinds = [k for k in kinds if k != "restart-all"] or kinds
    chosen = rng.sample(kinds, k=min(len(kinds), rng.choice((1, 2))))
    spare = names[:]
    rng.shuffle(spare)
    out: list[faults.Fault] = []
    for kind in chosen:
        if kind == "partition":
            side = spare[: max(1, len(names) // 2 - rng.randrange(0, max(1, len(names) // 4)))]
            out.append(faults.Partition(lab, side, [n for n in names if n not in side]))
        elif kind == "loss":
            out.append(faults.Loss(lab, rng.sample(names, k=min(3, len(names))),
                                   rng.choice((10, 20, 30))))
        elif kind == "restart-all":
            out.append(faults.RestartAll(state))
        elif spare:
            node = spare.pop()
            if kind == "pause":
                out.append(faults.Pause(state, node))
            elif kind == "crash":
                out.append(faults.Crash(state, node))
            elif kind == "link":
                out.append(faults.LinkDown(lab, node))
    return out


class DesiredLinks:
    """Desired Linux state for every node's agent: a few bridges `kc0..kc3`, each set or
    deleted (tombstone) at random at the start of a round, and the check that the kernel of the
    node's namespace holds exactly the desired ones. Writes are retried until acknowledged, and
    logged like the workload's (they are ordinary keys to the store)."""

    NAMES = ("kc0", "kc1", "kc2", "kc3")

    def __init__(self, state: cluster.ClusterState, log: WriteLog) -> None:
        self.state, self.log = state, log
        self.wanted: dict[str, set[str]] = {name: set() for name in state.nodes}
        self._versions: dict[str, int] = {}

    def change(self, rng: random.Random) -> None:
        urls = [info.cmd_url for info in self.state.nodes.values()]
        for node in self.state.nodes:
            for link in self.NAMES:
                if rng.random() < 0.5:
                    continue
                want = rng.random() < 0.6
                key = config_key(node, f"linux/interface/{link}")
                version = self._versions[key] = self._versions.get(key, 0) + 1
                value = Value(version=version, originator_id="chaos",
                              value=encode_config_value({"type": "bridge"}) if want else b"",
                              ttl_ms=TTL_INFINITY, ttl_version=0)
                self._set(rng.choice(urls), key, value)
                (self.wanted[node].add if want else self.wanted[node].discard)(link)

    def _set(self, url: str, key: str, value: Value) -> None:
        for _attempt in range(20):
            sent = monotonic_ms()
            try:
                with self.state.client(self.state.node_at(url), timeout_s=2) as client:
                    if not client.set({key: value}):
                        self.log.add(Write(key, Value(value.version, value.originator_id,
                                                      value.value, value.ttl_ms, 0),
                                           sent, monotonic_ms(), acked=True))
                        return
            except KvStoreError:
                time.sleep(0.2)
        raise RuntimeError(f"cannot set {key}")

    def problems(self) -> list[str]:
        out = []
        for node, info in self.state.nodes.items():
            result = subprocess.run(["ip", "-n", str(info.netns), "-j", "link", "show"],
                                    capture_output=True, text=True)
            links = {link["ifname"] for link in json.loads(result.stdout or "[]")}
            have = links & set(self.NAMES)
            if have != self.wanted[node]:
                out.append(f"{node}: kernel has {sorted(have)}, "
                           f"desired {sorted(self.wanted[node])}")
            if "eth0" not in links:
                out.append(f"{node}: eth0 is gone")
        return out


def _counters(state: cluster.ClusterState) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for name in state.nodes:
        try:
            with state.client(name, timeout_s=2) as client:
                out[name] = client.counters()
        except KvStoreError:
            out[name] = {}
    return out


def _converge(state: cluster.ClusterState, log: WriteLog, timeout: float,
              kernel: Callable[[], list[str]] | None = None) -> list[str]:
    """Poll until all digests are equal, every dump checks out and (with agents) every
    namespace's kernel state matches its desired state; [] then, else the problems."""
    deadline = time.monotonic() + timeout
    problems = ["never polled"]
    clients = {n: state.client(n, timeout_s=2) for n in state.nodes}
    try:
        while time.monotonic() < deadline:
            problems = []
            expected = log.expectations()
            digests = set()
            for name, client in clients.items():
                try:
                    digests.add(client.node_info(refresh=True).digest)
                    now = monotonic_ms()
                    store = client.dump()
                except KvStoreError as exc:
                    problems.append(f"{name}: no answer ({exc})")
                    continue
                problems += check_store(name, store, expected, now,
                                        present_margin_ms=PRESENT_MARGIN_MS, bound_ms=BOUND_MS,
                                        foreign_prefixes=AGENT_PREFIXES)
            if len(digests) > 1:
                problems.append(f"{len(digests)} different digests")
            if not problems and kernel is not None:
                problems = kernel()
            if not problems:
                return []
            time.sleep(0.1)
        return problems
    finally:
        for client in clients.values():
            client.close()


def _all_answer(state: cluster.ClusterState, since: float, timeout: float = 60) -> float | None:
    """Seconds from `since` until every node answers NODE_INFO (None: not within `timeout`)."""
    pending = dict(state.nodes)
    deadline = time.monotonic() + timeout
    while pending and time.monotonic() < deadline:
        for name in list(pending):
            try:
                with state.client(name, timeout_s=0.3) as client:
                    client.node_info(refresh=True)
                del pending[name]
            except KvStoreError:
                pass
    return None if pending else round(time.monotonic() - since, 2)


def _health(state: cluster.ClusterState, before: dict[str, dict[str, int]],
            after: dict[str, dict[str, int]], tracebacks: dict[str, int]) -> list[str]:
    """Dead processes, error counters that grew, and tracebacks logged since the last call
    (`tracebacks`: node -> how many were seen before, updated)."""
    problems = []
    for name, info in state.nodes.items():
        pid = info.pids["node"]
        if not launch.pid_alive(pid):
            problems.append(f"{name}: node process {pid} died")
        for counter, value in after.get(name, {}).items():
            unexpected = counter in ERROR_COUNTERS or counter.startswith(ERROR_COUNTER_PREFIXES)
            if unexpected and value > before.get(name, {}).get(counter, 0):
                problems.append(f"{name}: {counter} = {value}")
        log_path = Path(state.run_dir) / f"{name}.log"
        seen = log_path.read_text(errors="replace").count("Traceback") if log_path.exists() else 0
        if seen > tracebacks.get(name, 0):
            problems.append(f"{name}: {seen - tracebacks.get(name, 0)} new traceback(s) in "
                            f"{log_path}")
        tracebacks[name] = seen
    return problems


def _redundancy(before: dict[str, dict[str, int]], after: dict[str, dict[str, int]],
                written: int, restarted: set[str]) -> dict[str, float]:
    if written <= 0:
        return {}
    out = {}
    for name, counters in after.items():
        if name in restarted or name not in before:
            continue
        received = counters.get(stats.RECEIVED_KEY_VALS, 0) - before[name].get(
            stats.RECEIVED_KEY_VALS, 0)
        out[name] = round(received / written, 2)
    return out


@dataclass
class _Run:
    """What the rounds of one run share."""

    config: ChaosConfig
    state: cluster.ClusterState
    lab: netlab.Lab
    rng: random.Random
    log: WriteLog
    desired: DesiredLinks
    book: faults.FaultBook = field(default_factory=faults.FaultBook)
    tracebacks: dict[str, int] = field(default_factory=dict)

    def play(self, index: int) -> RoundReport:
        """One round: writers, faults held for the duration, heal, convergence, checks."""
        config, state, log = self.config, self.state, self.log
        report = RoundReport(index)
        before = _counters(state)
        acked_before = log.acknowledged()
        if config.agents:
            self.desired.change(self.rng)
            report.desired_links = sum(len(links) for links in self.desired.wanted.values())
        urls = [info.cmd_url for info in state.nodes.values()]
        curves = {info.cmd_url: state.curve(n) for n, info in state.nodes.items()}
        writers = [Writer(f"w{i}", urls, log, self.rng.randrange(1 << 30), curves=curves)
                   for i in range(1, config.writers + 1)]
        for writer in writers:
            writer.start()
        time.sleep(1.0)
        round_faults = _pick_faults(self.rng, config, state, self.lab)
        try:
            for fault in round_faults:
                report.faults.append(fault.describe())
                self.book.inject(fault)
                if isinstance(fault, faults.RestartAll):
                    log.all_restarted(monotonic_ms())
            time.sleep(config.duration)
        finally:
            for fault in round_faults:
                fault.heal()
            healed = time.monotonic()
            for writer in writers:
                writer.stop()
            for writer in writers:
                writer.join(timeout=10)
        for fault in round_faults:
            if fault.drops():
                report.drops[fault.kind] = report.drops.get(fault.kind, 0) + fault.drops()
        report.acknowledged = log.acknowledged() - acked_before
        report.uncertain = sum(w.uncertain for w in writers)
        restarted = {f.node for f in round_faults if isinstance(f, faults.Crash)}
        if any(isinstance(f, faults.RestartAll) for f in round_faults):
            restarted = set(state.nodes)
        if restarted:
            report.restart_s = _all_answer(state, healed)
        problems = _converge(state, log, config.converge_timeout,
                             self.desired.problems if config.agents else None)
        if not problems:
            report.convergence_s = round(time.monotonic() - healed, 2)
        report.problems += problems
        after = _counters(state)
        report.problems += _health(state, before, after, self.tracebacks)
        report.redundancy = _redundancy(before, after, report.acknowledged, restarted)
        return report


def run(config: ChaosConfig, say: Callable[[str], None] = print,
        summary: dict[str, object] | None = None) -> list[RoundReport]:
    """Run the rounds; a failed check raises nothing (it is in the reports). `summary`, if
    given, is filled with the run's figures."""
    rundirs.make_base_for(config.run_dir)
    safefs.private_dir(config.run_dir)
    run_dir = config.run_dir / f"seed{config.seed}-{time.strftime('%H%M%S')}"
    say(f"chaos: {config.command()}")
    state = cluster.up(config.nodes, config.topology, run_dir=run_dir, isolated=True,
                       agents=config.agents, degree=config.degree, seed=config.seed,
                       node_config=config.node_config(), timeout=120)
    lab = state.isolated_lab()
    assert lab is not None
    log = WriteLog()
    chaos = _Run(config, state, lab, random.Random(config.seed), log, DesiredLinks(state, log))
    monitor = TtlMonitor(state, log)
    monitor.start()
    reports: list[RoundReport] = []
    try:
        for index in range(1, config.rounds + 1):
            reports.append(chaos.play(index))
            say(_round_line(reports[-1]))
    finally:
        monitor.stop()
        monitor.join(timeout=5)
        try:
            chaos.book.heal_all()
        finally:
            cluster.down(run_dir, purge=True)
    for key, (over, node) in sorted(monitor.worst.items()):
        problem = f"{node}: {key} outlived its TTL by {over} ms (monitor)"
        reports[-1].problems.append(problem)
        say(f"  PROBLEM {problem}")
    figures = summarize(config, reports, log, monitor)
    if summary is not None:
        summary.update(figures)
    say(json.dumps({k: v for k, v in figures.items() if k != "rounds_detail"}, sort_keys=True))
    if any(r.problems for r in reports):
        say(f"FAILED (seed {config.seed}); reproduce with: {config.command()}")
    return reports


def _round_line(report: RoundReport) -> str:
    converged = "no" if report.convergence_s is None else f"{report.convergence_s:.2f}s"
    line = (f"round {report.index}: {'; '.join(report.faults) or 'no fault'}; "
            f"drops {report.drops or {}}; acked {report.acknowledged}, uncertain "
            f"{report.uncertain}; converged after heal: {converged}")
    if report.restart_s is not None:
        line += f" (all nodes answering again after {report.restart_s:.2f}s)"
    if report.desired_links is not None:
        line += f"; kernels hold the {report.desired_links} desired links"
    if report.redundancy:
        line += f"; redundancy {statistics.median(report.redundancy.values()):.2f} (median)"
    for problem in report.problems[:20]:
        line += f"\n  PROBLEM {problem}"
    return line


def summarize(config: ChaosConfig, reports: list[RoundReport], log: WriteLog,
              monitor: TtlMonitor) -> dict[str, object]:
    times = [r.convergence_s for r in reports if r.convergence_s is not None]
    drops: dict[str, int] = {}
    kinds: dict[str, int] = {}
    for report in reports:
        for kind, count in report.drops.items():
            drops[kind] = drops.get(kind, 0) + count
        for text in report.faults:
            kind = text.split()[0]
            kinds[kind] = kinds.get(kind, 0) + 1
    lost = sum(1 for r in reports for p in r.problems if " lost " in p or "holds v" in p)
    return {
        "command": config.command(),
        "rounds": len(reports),
        "faults": kinds,
        "nft_drops": drops,
        "writes_acknowledged": log.acknowledged(),
        "writes_lost": lost,
        "convergence_s_p50": round(statistics.median(times), 2) if times else None,
        "convergence_s_max": max(times) if times else None,
        "convergence_target_s": config.sync_interval_s + 2,
        "ttl_overruns_beyond_bound": len(monitor.worst) + sum(
            1 for r in reports for p in r.problems if "outlives its TTL" in p),
        "ttl_monitor_samples": monitor.samples,
        "failed_rounds": sum(1 for r in reports if r.problems),
        "rounds_detail": [asdict(r) for r in reports],
    }

"""What the cluster benchmarks read of a cluster's processes in /proc: memory (RSS, PSS), CPU
time, and which process is whose (a node supervises its agent as a child process).

Shared by `cluster_bench.py` (the footprint of an idle 3-node chain) and `scale_bench.py`
(8 to 64 nodes). Linux only.
"""

from __future__ import annotations

import os
from pathlib import Path

from kvmesh import cluster

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


class ProcStatError(RuntimeError):
    """A process is not where or what it should be."""


def children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(child) for child in (task / "children").read_text().split()]
    return found


def _kib_field(path: str, name: str) -> float:
    """A `Name:   N kB` line of a /proc file, in MiB."""
    for line in Path(path).read_text().splitlines():
        if line.startswith(name):
            return int(line.split()[1]) / 1024
    raise ProcStatError(f"no {name} in {path}")


def rss_mib(pid: int) -> float:
    """Resident memory: shared pages (the interpreter, libraries) counted in every process."""
    return _kib_field(f"/proc/{pid}/status", "VmRSS:")


def pss_mib(pid: int) -> float:
    """Proportional set size: each shared page divided among the processes sharing it, so a
    sum over processes counts it once (what the machine really spends)."""
    return _kib_field(f"/proc/{pid}/smaps_rollup", "Pss:")


def cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime (fields 14, 15 of stat)


def cpu_seconds(node_pids: list[int]) -> tuple[float, float]:
    """CPU time (user + system) of the node processes and of their children (the agents:
    `node run --agent` supervises its agent as a child process in its own session)."""
    wanted = set(node_pids)
    nodes = agents = 0.0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # exited meanwhile
        pid, ppid = int(entry), int(fields[1])
        ticks = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
        if pid in wanted:
            nodes += ticks
        elif ppid in wanted:
            agents += ticks
    return nodes, agents


def node_agent_pids(state: cluster.ClusterState) -> dict[str, tuple[int, int]]:
    """Node name -> (node pid, agent pid): `node run --agent` supervises its agent."""
    pairs: dict[str, tuple[int, int]] = {}
    for name, info in state.nodes.items():
        node = info.pids["node"]
        agents = [pid for pid in children(node)
                  if b"agent" in Path(f"/proc/{pid}/cmdline").read_bytes()]
        if len(agents) != 1:
            raise ProcStatError(f"{name}: expected one agent process under node pid {node}, "
                                f"found {agents}")
        pairs[name] = (node, agents[0])
    return pairs

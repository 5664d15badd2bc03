"""Faults for a running cluster: what the chaos harness injects and always heals.

Each fault is an object with `inject()` and `heal()` (idempotent) and, for the nftables ones,
`drops()`: the packets its rules dropped (evidence that the fault bit). Kinds:

- `Partition`: nftables rules in each namespace of one side drop every packet to and from the
  addresses of the other side (both directions, on both sides).
- `Loss`: an nftables rule drops a random share of the packets a node receives from other nodes
  (`numgen random mod 100 < N`); traffic from the host (the harness itself) is spared.
- `Pause`: SIGSTOP, healed by SIGCONT (a GC pause, a stuck disk, a migrated VM).
- `Crash`: SIGKILL, healed by starting the node again with its own command.
- `LinkDown`: the node's veth (`eth0`) set down, then up again.
- `RestartAll`: every node stopped (SIGTERM), then every node started again.

nftables tables are named `kvchaos_<pid>_<n>` (unique per harness process and fault) and removed
on heal; `FaultBook.heal_all` heals whatever is still active, also on the way out of an error.
The network faults need an isolated cluster (`kvmesh cluster up --isolated`).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from kvmesh import cluster, launch, netlab

__all__ = ["Crash", "Fault", "FaultBook", "FaultError", "LinkDown", "Loss", "Partition",
           "Pause", "RestartAll"]

_table_ids = itertools.count(1)


class FaultError(RuntimeError):
    pass


def _nft(namespace: str, *args: str, script: str | None = None) -> str:
    result = subprocess.run(["ip", "netns", "exec", namespace, "nft", *args], input=script,
                            capture_output=True, text=True)
    if result.returncode != 0:
        raise FaultError(f"nft {' '.join(args)} in {namespace}: {result.stderr.strip()}")
    return result.stdout


def _table_drops(namespace: str, table: str) -> int:
    """Packets counted by the table's rules (all of them drop)."""
    try:
        data = json.loads(_nft(namespace, "-j", "list", "table", "inet", table))
    except (FaultError, json.JSONDecodeError):
        return 0
    total = 0
    for item in data.get("nftables", []):
        for expr in item.get("rule", {}).get("expr", []):
            if "counter" in expr:
                total += int(expr["counter"].get("packets", 0))
    return total


class Fault:
    kind = "fault"

    def __init__(self) -> None:
        self.active = False

    def inject(self) -> None:
        raise NotImplementedError

    def heal(self) -> None:
        raise NotImplementedError

    def drops(self) -> int:
        return 0

    def describe(self) -> str:
        return self.kind


class _NftFault(Fault):
    """A fault made of one nftables table per namespace; the table goes away on heal."""

    def __init__(self, lab: netlab.Lab) -> None:
        super().__init__()
        self.lab = lab
        self.table = f"kvchaos_{os.getpid()}_{next(_table_ids)}"
        self.rules: dict[str, tuple[list[str], list[str]]] = {}  # ns -> (input, output) rules
        self._drops = 0

    def inject(self) -> None:
        self.active = True
        for namespace, (input_rules, output_rules) in self.rules.items():
            script = (f"table inet {self.table} {{\n"
                      f"  chain input {{ type filter hook input priority 0; policy accept;\n"
                      + "".join(f"    {rule}\n" for rule in input_rules)
                      + "  }\n"
                      "  chain output { type filter hook output priority 0; policy accept;\n"
                      + "".join(f"    {rule}\n" for rule in output_rules)
                      + "  }\n}\n")
            _nft(namespace, "-f", "-", script=script)

    def heal(self) -> None:
        if not self.active:
            return
        self.active = False
        for namespace in self.rules:
            self._drops += _table_drops(namespace, self.table)
            # A namespace already gone took its table with it.
            with contextlib.suppress(FaultError):
                _nft(namespace, "delete", "table", "inet", self.table)

    def drops(self) -> int:
        if self.active:
            return self._drops + sum(_table_drops(ns, self.table) for ns in self.rules)
        return self._drops


class Partition(_NftFault):
    kind = "partition"

    def __init__(self, lab: netlab.Lab, side_a: Iterable[str], side_b: Iterable[str]) -> None:
        super().__init__(lab)
        self.side_a, self.side_b = sorted(side_a), sorted(side_b)
        for mine, theirs in ((self.side_a, self.side_b), (self.side_b, self.side_a)):
            addresses = ", ".join(lab.address(n) for n in theirs)
            for node in mine:
                self.rules[lab.namespaces[node]] = (
                    [f"ip saddr {{ {addresses} }} counter drop"],
                    [f"ip daddr {{ {addresses} }} counter drop"])

    def describe(self) -> str:
        return f"partition {','.join(self.side_a)} | {','.join(self.side_b)}"


class Loss(_NftFault):
    kind = "loss"

    def __init__(self, lab: netlab.Lab, nodes: Iterable[str], percent: int) -> None:
        super().__init__(lab)
        if not 0 < percent < 100:
            raise ValueError("loss percent must be in 1..99")
        self.nodes, self.percent = sorted(nodes), percent
        for node in self.nodes:
            self.rules[lab.namespaces[node]] = (
                [f"ip saddr != {lab.host_address} numgen random mod 100 < {percent} "
                 "counter drop"], [])

    def describe(self) -> str:
        return f"loss {self.percent}% into {','.join(self.nodes)}"


class Pause(Fault):
    kind = "pause"

    def __init__(self, state: cluster.ClusterState, node: str) -> None:
        super().__init__()
        self.state, self.node = state, node

    def _signal(self, sig: int) -> None:
        _send_signal(self.state.nodes[self.node].pids["node"], sig, group=False)

    def inject(self) -> None:
        self.active = True
        self._signal(signal.SIGSTOP)

    def heal(self) -> None:
        if self.active:
            self.active = False
            self._signal(signal.SIGCONT)

    def describe(self) -> str:
        return f"pause {self.node}"


def _send_signal(pid: int, sig: int, group: bool = True) -> None:
    """Signal a cluster process (its whole process group: the node and its agent), if alive."""
    with contextlib.suppress(ProcessLookupError):
        if group:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)


def _wait_dead(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while launch.pid_alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


class Crash(Fault):
    """SIGKILL the node (its agent follows it: it dies with its parent); heal starts it again."""

    kind = "crash"

    def __init__(self, state: cluster.ClusterState, node: str) -> None:
        super().__init__()
        self.state, self.node = state, node

    def inject(self) -> None:
        self.active = True
        pid = self.state.nodes[self.node].pids["node"]
        _send_signal(pid, signal.SIGKILL)
        if not _wait_dead(pid, 10):
            raise FaultError(f"{self.node} (pid {pid}) survived SIGKILL")

    def heal(self) -> None:
        if self.active:
            self.active = False
            cluster.respawn(self.state, self.node)

    def describe(self) -> str:
        return f"crash {self.node}"


class LinkDown(Fault):
    kind = "link"

    def __init__(self, lab: netlab.Lab, node: str) -> None:
        super().__init__()
        self.lab, self.node = lab, node

    def _set(self, updown: str) -> None:
        subprocess.run(["ip", "-n", self.lab.namespaces[self.node], "link", "set", "eth0",
                        updown], capture_output=True, check=False)

    def inject(self) -> None:
        self.active = True
        self._set("down")

    def heal(self) -> None:
        if self.active:
            self.active = False
            self._set("up")

    def describe(self) -> str:
        return f"link down {self.node}"


class RestartAll(Fault):
    """Every node stopped cleanly (SIGTERM) at once, then all started again on heal."""

    kind = "restart-all"

    def __init__(self, state: cluster.ClusterState) -> None:
        super().__init__()
        self.state = state

    def inject(self) -> None:
        self.active = True
        pids = [info.pids["node"] for info in self.state.nodes.values()]
        for pid in pids:
            _send_signal(pid, signal.SIGTERM)
        for pid in pids:
            if not _wait_dead(pid, 15):
                _send_signal(pid, signal.SIGKILL)
                _wait_dead(pid, 5)

    def heal(self) -> None:
        if self.active:
            self.active = False
            for name in self.state.nodes:
                cluster.respawn(self.state, name)

    def describe(self) -> str:
        return "restart-all"


@dataclass
class FaultBook:
    """The faults of a run: injected, healed, counted. `heal_all` heals what is still active."""

    injected: list[Fault] = field(default_factory=list)
    on_inject: Callable[[Fault], None] = lambda _fault: None

    def inject(self, fault: Fault) -> Fault:
        self.injected.append(fault)
        self.on_inject(fault)
        fault.inject()
        return fault

    def heal_all(self) -> None:
        errors = []
        for fault in self.injected:
            try:
                fault.heal()
            except Exception as exc:  # keep healing the others
                errors.append(f"{fault.describe()}: {exc}")
        if errors:
            raise FaultError("; ".join(errors))

    def drops(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for fault in self.injected:
            out[fault.kind] = out.get(fault.kind, 0) + fault.drops()
        return out

"""The README's main job: a 3-node cluster configuring Linux networking from one node.

Brings up n1-n2-n3 (real processes, a namespace per node), writes desired state for n2 and n3
from n1, shows the statuses converging as n1 sees them, shows the kernel state in n2's namespace,
deletes a route by hand and shows the agent repairing it, then takes everything down. Every step
is printed as the command an operator would type.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kvmesh import cluster

CONFIG: list[tuple[str, str, dict[str, object]]] = [
    ("n2", "linux/interface/veth0",
     {"type": "veth", "veth": {"peer": "veth1"}, "addresses": ["10.0.12.1/24"]}),
    ("n2", "linux/interface/veth1",
     {"type": "veth", "veth": {"peer": "veth0"}, "addresses": ["10.0.12.2/24"],
      "master": "br0"}),
    ("n2", "linux/interface/br0", {"type": "bridge", "addresses": ["10.0.13.1/24"]}),
    ("n2", "linux/route/main/10.50.0.0/24/veth0",
     {"dst": "10.50.0.0/24", "dev": "veth0", "gateway": "10.0.12.2"}),
    ("n3", "linux/interface/br0", {"type": "bridge", "mtu": 9000}),
    ("n3", "linux/interface/tap0", {"type": "tap", "master": "br0"}),
]
ROUTE = "10.50.0.0/24"


def _say(text: str) -> None:
    print(f"\n== {text}", flush=True)


def _run(args: list[str], show: str | None = None) -> str:
    print(f"$ {show or shlex.join(args)}", flush=True)
    # One pipe for both streams: the lines show in the order the command wrote them (progress
    # on stderr before the result on stdout; two captures printed one after the other did not).
    proc = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=120, check=False)
    out = proc.stdout.rstrip()
    if out:
        print(out, flush=True)
    if proc.returncode != 0:
        raise RuntimeError(f"command failed ({proc.returncode}): {shlex.join(args)}")
    return proc.stdout


def _kvmesh(url: str, *args: str) -> str:
    return _run([sys.executable, "-m", "kvmesh", "--url", url, *args],
                show=shlex.join(["kvmesh", *args]))


def _statuses(url: str) -> dict[str, dict[str, dict[str, object]]]:
    out = subprocess.run([sys.executable, "-m", "kvmesh", "--url", url, "--json", "status"],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    data: dict[str, dict[str, dict[str, object]]] = json.loads(out or "{}")
    return data


def _wait_configured(url: str, timeout: float = 60.0) -> bool:
    wanted = {(node, key) for node, key, _ in CONFIG}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        statuses = _statuses(url)
        states = {(n, k): str(v.get("state")) for n, vals in statuses.items()
                  for k, v in vals.items()}
        if all(states.get(item) == "CONFIGURED" for item in wanted):
            return True
        time.sleep(0.2)
    return False


def run_cluster_demo(keep: bool = False) -> int:
    if os.geteuid() != 0:
        print("the cluster demo needs root (it makes a network namespace per node); "
              "run `kvmesh demo --kvstore-only` for the KvStore mesh alone", file=sys.stderr)
        return 2
    run_dir = Path(tempfile.mkdtemp(prefix="kvmesh-demo-"))
    _say("bringing up a 3-node chain n1 - n2 - n3 (KvStore + agent per node)")
    print(f"$ kvmesh cluster up --nodes 3 --topology chain --run-dir {run_dir}")
    try:
        state = cluster.up(3, "chain", run_dir=run_dir, progress=lambda m: print(f"  {m}"))
        n1 = state.nodes["n1"].cmd_url
        # The cluster is secured: the commands below run as its operator.
        print(f'$ eval "$(kvmesh cluster env --run-dir {run_dir})"')
        os.environ.update(cluster.client_env(run_dir))
        ns2 = state.nodes["n2"].netns or "kvmesh-n2"

        _say("desired state for n2 and n3, written on n1")
        for node, key, value in CONFIG:
            _kvmesh(n1, "config", "set", node, key, json.dumps(value))

        _say("statuses as n1 sees them (published by each node's agent into the mesh)")
        converged = _wait_configured(n1)
        _kvmesh(n1, "status")
        if not converged:
            print("not every value reached CONFIGURED in time (see the table above)")
            return 1

        _say(f"the kernel state in n2's namespace ({ns2})")
        _run(["ip", "-n", ns2, "-br", "addr"])
        _run(["ip", "-n", ns2, "route"])

        _say("breaking it by hand: deleting the route behind kvmesh's back")
        _run(["ip", "-n", ns2, "route", "del", ROUTE])
        _run(["ip", "-n", ns2, "route"])

        _say("repair: n2's agent re-reads the kernel and restores what is missing "
             "(the same runs periodically)")
        _kvmesh(n1, "resync", "--node", "n2")
        routes = _run(["ip", "-n", ns2, "route"])
        repaired = ROUTE in routes
        print("route repaired" if repaired else "route NOT repaired")

        _say("n2's scheduler values, from n2's agent (found through the mesh)")
        _kvmesh(n1, "values", "--node", "n2")

        _say("power cycle: every node stops, the namespaces go; each node's data directory "
             "stays")
        print(f"$ kvmesh cluster down --run-dir {run_dir}")
        cluster.down(run_dir)
        print(f"$ kvmesh cluster up --nodes 3 --topology chain --run-dir {run_dir}")
        state = cluster.up(3, "chain", run_dir=run_dir, progress=lambda m: print(f"  {m}"))
        n1 = state.nodes["n1"].cmd_url
        survived = _wait_configured(n1)
        _run(["ip", "-n", ns2, "route"])
        print("configuration survived the restart" if survived
              else "configuration NOT restored after the restart")
        repaired = repaired and survived
        if keep:
            print(f"\ncluster left running (state in {run_dir}); stop it with: "
                  f"kvmesh cluster down --run-dir {run_dir}")
        return 0 if repaired else 1
    finally:
        if not keep:
            _say("taking the cluster down")
            stopped = cluster.down(run_dir, purge=True)
            shutil.rmtree(run_dir, ignore_errors=True)
            print(f"{stopped} processes stopped, namespaces removed")

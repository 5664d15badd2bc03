"""A kvmesh cluster whose nodes each have a VPP emulator, driven as an operator drives it (the
CLI) and looked at as VPP shows itself (vpp_papi dumps, the emulator's control channel): what the
VPP end-to-end tests (tests/test_vpp_gateway_e2e.py, tests/test_vpp_router_e2e.py) share."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kvmesh import cluster
from kvmesh.cli.members import announced_nodes
from kvmesh.vppemu import EmulatorControl
from tests import cli_run
from tests.parallel import scratch_dir
from tests.southbound.vpp.conftest import connect
from tests.util import wait_until

# Messages that only read VPP's state (besides the dumps; the rest change it).
READS = frozenset({"control_ping", "sw_interface_get_table", "nat44_show_running_config",
                   "lcp_itf_pair_get_v2"})


class VppCluster:
    def __init__(self, workdir: Path, state: cluster.ClusterState) -> None:
        self.workdir, self.state = workdir, state
        self.env = {**os.environ, **cluster.client_env(Path(state.run_dir))}

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return cli_run.kvmesh(args, env=self.env)

    def control(self, node: str) -> EmulatorControl:
        return EmulatorControl(f"{self.state.nodes[node].vpp_socket}.ctl")

    def vpp(self, node: str) -> dict[str, Any]:
        """The emulator's whole dataplane state."""
        return self.control(node).state()

    def papi(self, node: str, message: str, **args: Any) -> Any:
        """VPP's own answer to a call (a dump's details as a list), through a vpp_papi client
        of our own."""
        papi = connect(str(self.state.nodes[node].vpp_socket))
        try:
            answer = getattr(papi.api, message)(**args)
            return answer if isinstance(answer, tuple) else list(answer)
        finally:
            papi.disconnect()

    def node_status(self, node: str) -> dict[str, dict[str, Any]]:
        """`kvmesh status <node>`: model key -> status record."""
        out = self.cli("--json", "status", node)
        assert out.returncode in (0, 1), out.stderr  # 1: a value is FAILED or INVALID
        rows: dict[str, dict[str, dict[str, Any]]] = json.loads(out.stdout) if out.stdout.strip() \
            else {}
        return rows.get(node, {})

    def resync_writes(self, node: str) -> dict[str, int]:
        """`kvmesh resync --node <node>`, and the messages it sent VPP that are no reads (by
        name, with their counts): none when VPP's state read back is the desired state."""
        calls = self.control(node).counters()
        resynced = self.cli("resync", "--node", node)
        assert resynced.returncode == 0, resynced.stdout + resynced.stderr
        made = {name.removeprefix("msg."): count - calls.get(name, 0)
                for name, count in self.control(node).counters().items()
                if name.startswith("msg.") and count != calls.get(name, 0)}
        assert made, f"the downstream resync of {node} read VPP"
        return {m: n for m, n in made.items() if not m.endswith("_dump") and m not in READS}


@contextmanager
def vpp_cluster(prefix: str, nodes: int, **up: Any) -> Iterator[tuple[Path, cluster.ClusterState]]:
    """A `nodes`-node chain with a VPP emulator per node (more `cluster.up` options in `up`),
    once every agent has announced itself; everything removed on the way out."""
    # Short: the emulators' unix socket paths live in the run dir (107 bytes at most).
    workdir = scratch_dir(prefix)
    run_dir = workdir / "run"
    try:
        state = cluster.up(nodes, "chain", vpp_emulator=True, run_dir=run_dir, timeout=90, **up)
        with state.client("n1") as client:  # every agent announced: all are known members
            wait_until(lambda: announced_nodes(client) == set(state.nodes), 30,
                       message="node/<name>/ keys")
        yield workdir, state
    finally:
        cluster.down(run_dir, purge=True)
        shutil.rmtree(workdir, ignore_errors=True)


def by_tag(vpp: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """kvmesh's interfaces in the emulator, by kvmesh name."""
    return {i["tag"].removeprefix("kvmesh:"): i for i in vpp["interfaces"] if i["tag"]}

"""A cluster whose nodes run different releases: each member is a real `kvmesh node run
--agent` process (with its VPP emulator) of today's tree or of a released tree
(tools/compat/release_tree.py), on loopback with free ports, its data directory kept across
restarts so a member can be stopped and started again as another release."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvmesh import launch
from kvmesh.agent.desired import encode_config_value
from kvmesh.agent.http_token import new_token, write_token_file
from kvmesh.agent.keys import agent_key, status_key
from kvmesh.agent.status import decode_status
from kvmesh.cluster import write_node_config
from kvmesh.rest_client import AgentRest, Credentials, RestError
from kvmesh.vppemu import EmulatorProcess
from kvstore.client import KvStoreClient, KvStoreError
from kvstore.gen.kvstore_thrift.ttypes import NodeInfo
from kvstore.node_ports import free_tcp_port
from tests.compat.conftest import release_launch_env
from tests.parallel import scratch_dir
from tests.util import wait_until

# Anti-entropy every second (a divergence that flooding does not repair is found fast), quick
# retries. Keys every release's NodeConfig knows.
NODE_CONFIG: dict[str, Any] = {
    "sync_interval_s": 1,
    "sync_timeout_ms": 3000,
    "sync_initial_backoff_ms": 100,
    "sync_max_backoff_ms": 1000,
}
TODAY = "today"


@dataclass
class Member:
    name: str
    workdir: Path  # outside both trees: the processes' cwd
    sockdir: Path  # short, for the VPP emulator's unix sockets
    release: str = TODAY
    tree: Path | None = None  # the release's packages (None: today's)
    peers: dict[str, str] = field(default_factory=dict)
    cmd_url: str = field(default_factory=lambda: f"tcp://127.0.0.1:{free_tcp_port()}")
    pub_url: str = field(default_factory=lambda: f"tcp://127.0.0.1:{free_tcp_port()}")
    http_port: int = field(default_factory=free_tcp_port)
    proc: launch.Launched | None = None
    emulator: EmulatorProcess | None = None
    starts: int = 0

    @property
    def data_dir(self) -> Path:
        return self.workdir / "data" / self.name

    @property
    def http(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    @property
    def token_file(self) -> Path:
        """The agent's REST token: given, so no agent writes into the machine's token dir."""
        path = self.workdir / f"{self.name}.token"
        if not path.exists():
            write_token_file(path, new_token())
        return path

    def rest(self) -> AgentRest:
        return AgentRest.at(self.http, timeout_s=5, credentials=Credentials(
            self.token_file.read_text().strip(), str(self.token_file)))

    def start(self, release: str, tree: Path | None, wait: bool = True) -> None:
        """Start (again) as `release` on the same data directory, ports and VPP; with `wait`,
        until its command socket answers."""
        self.release, self.tree = release, tree
        if self.emulator is None:
            self.emulator = EmulatorProcess(str(self.sockdir / f"{self.name}.sock")).start()
        config = self.workdir / f"{self.name}.toml"
        write_node_config(config, NODE_CONFIG)
        spec = launch.NodeSpec(
            self.name, self.cmd_url, self.pub_url, peers=dict(self.peers),
            data_dir=self.data_dir, config=config,
            agent=launch.AgentOptions(http=self.http, vpp_socket=self.emulator.socket_path,
                                      http_token_file=self.token_file))
        env = release_launch_env(tree) if tree is not None else {"PYTHONUNBUFFERED": "1"}
        self.starts += 1
        self.proc = launch.start(spec, self.workdir / f"{self.name}.{self.starts}.log",
                                 env=env, cwd=self.workdir)
        if wait:
            self.proc.wait_answering(self.cmd_url)

    def stop(self) -> None:
        """SIGTERM the node (it stops its agent) and wait for both to be gone."""
        if self.proc is not None and self.proc.alive():
            # Longer than the node's own 20 s wait for its agent: a 0.4.0 agent can hang on
            # SIGTERM (its handler could deadlock on the stop Event's lock; fixed in 0.5.0,
            # kvmesh.agent.agent.SignalStop), and its node then kills it and exits 0.
            code = self.proc.terminate(timeout=40)
            assert code == 0, f"{self.name} exited {code}:\n{self.proc.log(tail=3000)}"

    def agent_pids(self) -> list[int]:
        """This member's agent processes (by their command line: its own token file)."""
        wanted = str(self.token_file).encode()
        pids = []
        for proc_dir in Path("/proc").iterdir():
            if proc_dir.name.isdigit():
                with contextlib.suppress(OSError):
                    args = (proc_dir / "cmdline").read_bytes().split(b"\0")
                    if b"agent" in args and wanted in args:
                        pids.append(int(proc_dir.name))
        return pids

    def wait_agent_gone(self, timeout: float = 20) -> None:
        """The node's agent exits with it (the node stops it; StopDeadline: 10 s at most)."""
        wait_until(lambda: not self.agent_pids(), timeout=timeout,
                   message=f"{self.name}'s agent ({self.release}) gone with its node: still "
                           f"running as {self.agent_pids()}")

    def close(self) -> None:
        if self.proc is not None:
            self.proc.kill()
        for pid in self.agent_pids():  # an agent that outlived its node (never left behind)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if self.emulator is not None:
            self.emulator.stop()

    def log(self) -> str:
        return self.proc.log(tail=4000) if self.proc is not None else ""

    def client(self, timeout_s: float = 5.0) -> KvStoreClient:
        return KvStoreClient(self.cmd_url, timeout_s=timeout_s)

    def info(self) -> NodeInfo:
        with self.client() as client:
            return client.node_info(refresh=True)

    def counters(self) -> dict[str, int]:
        with self.client() as client:
            return client.counters()

    def synced(self) -> bool:
        try:
            info = self.info()
        except KvStoreError:
            return False
        return bool(info.initial_sync_done) and info.store_state == "SYNCED"

    def record(self, key: str) -> dict[str, Any] | None:
        with self.client() as client:
            found = client.get([key]).get(key)
        return decode_status(found.value if found else None)

    def agent_record(self) -> dict[str, Any] | None:
        return self.record(agent_key(self.name))

    def state_of(self, model_key: str, node: str | None = None) -> str | None:
        status = self.record(status_key(node or self.name, model_key))
        return None if status is None else str(status["state"])

    def set_config(self, node: str, values: Mapping[str, dict[str, Any] | None]) -> None:
        with self.client() as client:
            for model_key, value in values.items():
                client.set_key(f"config/{node}/{model_key}", encode_config_value(value))

    def vpp_interfaces(self) -> set[str]:
        assert self.emulator is not None
        return {i["tag"].removeprefix("kvmesh:")
                for i in self.emulator.control.state()["interfaces"] if i["tag"]}

    def southbound_writes(self) -> dict[str, int] | None:
        """The agent's southbound writes since it started (scheduler stats), None until its
        REST API answers and VPP is KNOWN with its resync done."""
        try:
            rest = self.rest()
            recon = rest.json("GET", "/recon/services")
            if recon["devices"].get("vpp") != "KNOWN" or any(
                    st["state"] != "COMPLETED" for st in recon["status"]["vpp"].values()):
                return None
            stats = rest.json("GET", "/scheduler/stats")
        except (RestError, OSError, KeyError):
            return None
        return dict(stats["scheduler"]["southbound_writes"])


@contextlib.contextmanager
def ring(workdir: Path, names: list[str]) -> Iterator[dict[str, Member]]:
    """Members peered in a ring (each with its two neighbours), not started; all stopped and
    removed afterwards."""
    sockdir = scratch_dir("kvm-mx-")  # short: unix socket paths are limited
    members = {n: Member(n, workdir, sockdir) for n in names}
    for i, name in enumerate(names):
        for j in (i - 1, (i + 1) % len(names)):
            other = names[j]
            if other != name:
                members[name].peers[other] = members[other].cmd_url
    try:
        yield members
    finally:
        for member in members.values():
            with contextlib.suppress(Exception):
                member.close()
        shutil.rmtree(sockdir, ignore_errors=True)


def wait_everywhere(members: Mapping[str, Member], key: str, value: bytes,
                    timeout: float = 20) -> None:
    def everywhere() -> bool:
        for member in members.values():
            with member.client() as client:
                found = client.get([key]).get(key)
            if found is None or found.value != value:
                return False
        return True

    wait_until(everywhere, timeout=timeout, message=f"{key} on every node")

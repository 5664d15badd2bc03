"""A local cluster of real kvmesh processes on loopback (`kvmesh cluster up/status/down`).

Each node is a KvStore process supervising its agent process (`kvmesh node run --agent`), plus,
with `vpp_emulator`, a VPP emulator.
When run as root, each agent's Linux southbound works in its own namespace `kvmesh-<node>`, made
by `up` and removed by `down`. The processes run in the background, in their own session, so the
cluster outlives the command that started it; everything needed to find and stop them is kept in
`<run dir>/cluster.json`.

The cluster runs secured (CurveZMQ, docs/security.md): `up` makes a key pair per node and one for
the operator under `<run dir>/keys` (kept across runs), and an authorized-keys directory
`<run dir>/authorized-keys` (every node a `peer`, the operator an `operator`); `client_env` gives
the operator's `KVMESH_URL`, `KVMESH_KEY_FILE` and `KVMESH_SERVER_KEY` (`kvmesh cluster env`).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path

from kvstore.client import KvStoreClient, KvStoreError
from kvstore.curve import (
    KEY_FILE_ENV,
    SERVER_KEY_ENV,
    ClientCurve,
    generate,
    load_key_pair,
    load_public_key,
)
from kvstore.node_ports import free_tcp_port

DEFAULT_RUN_DIR = Path(os.environ.get("KVMESH_RUN_DIR", "/tmp/kvmesh-cluster"))
TOPOLOGIES = ("chain", "ring", "mesh")
STATE_FILE = "cluster.json"
OPERATOR_KEY = "operator"

Progress = Callable[[str], None]


class ClusterError(RuntimeError):
    pass


@dataclass
class NodeInfo:
    cmd_url: str
    pub_url: str
    netns: str | None
    http: str | None
    vpp_socket: str | None = None
    data_dir: str | None = None  # the node's durable store (kept by `down`, see `purge`)
    pids: dict[str, int] = field(default_factory=dict)
    peers: list[str] = field(default_factory=list)
    key_file: str | None = None  # the node's secret key (None: an insecure cluster)
    public_key: str | None = None


@dataclass
class ClusterState:
    run_dir: str
    topology: str
    nodes: dict[str, NodeInfo]
    namespaces_made: list[str] = field(default_factory=list)
    operator_key: str | None = None  # the operator's secret key file

    def save(self) -> None:
        path = Path(self.run_dir) / STATE_FILE
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2, sort_keys=True))
        tmp.replace(path)

    @classmethod
    def load(cls, run_dir: Path) -> ClusterState | None:
        path = run_dir / STATE_FILE
        if not path.exists():
            return None
        raw = json.loads(path.read_text())
        nodes = {name: NodeInfo(**info) for name, info in raw["nodes"].items()}
        return cls(raw["run_dir"], raw["topology"], nodes, raw.get("namespaces_made", []),
                   raw.get("operator_key"))

    def curve(self, node: str) -> ClientCurve | None:
        """The operator's keys for talking to `node` (None: insecure cluster)."""
        info = self.nodes[node]
        if self.operator_key is None or info.public_key is None:
            return None
        return ClientCurve(load_key_pair(self.operator_key), load_public_key(info.public_key))


def make_keys(run_dir: Path, names: list[str]) -> tuple[Path, dict[str, Path]]:
    """Key pairs for the operator and each node under run_dir/keys (made once, then reused),
    and run_dir/authorized-keys: each node a peer, the operator an operator."""
    keys = run_dir / "keys"
    auth = run_dir / "authorized-keys"
    secrets: dict[str, Path] = {}
    for name in [OPERATOR_KEY, *names]:
        secret = keys / f"{name}.key_secret"
        if not secret.exists():
            (keys / f"{name}.key").unlink(missing_ok=True)
            generate(name, keys)
        secrets[name] = secret
    # Peers are exactly this cluster's nodes (a larger earlier cluster's keys go).
    for stale in (auth / "peer").glob("*.key") if (auth / "peer").is_dir() else ():
        if stale.stem not in names:
            stale.unlink()
    for role, name, file_name in [("operator", OPERATOR_KEY, OPERATOR_KEY),
                                  *(("peer", n, n) for n in names)]:
        (auth / role).mkdir(parents=True, exist_ok=True)
        (auth / role / f"{file_name}.key").write_bytes((keys / f"{name}.key").read_bytes())
    return auth, secrets


def client_env(run_dir: Path = DEFAULT_RUN_DIR, node: str = "n1") -> dict[str, str]:
    """The environment of the cluster's operator talking to `node` (`kvmesh cluster env`)."""
    state = ClusterState.load(run_dir)
    if state is None or node not in state.nodes:
        raise ClusterError(f"no cluster with a node {node!r} in {run_dir} (kvmesh cluster up)")
    info = state.nodes[node]
    env = {"KVMESH_URL": info.cmd_url}
    if state.operator_key and info.public_key:
        env[KEY_FILE_ENV] = state.operator_key
        env[SERVER_KEY_ENV] = info.public_key
    return env


def peers_of(names: list[str], topology: str) -> dict[str, list[str]]:
    """Peering for a topology (declared on both sides, as the KvStore expects)."""
    if topology not in TOPOLOGIES:
        raise ClusterError(f"unknown topology {topology!r}; use one of {', '.join(TOPOLOGIES)}")
    links: set[tuple[str, str]] = set()
    n = len(names)
    if topology == "mesh":
        links = {(a, b) for i, a in enumerate(names) for b in names[i + 1:]}
    else:
        links = {(names[i], names[i + 1]) for i in range(n - 1)}
        if topology == "ring" and n > 2:
            links.add((names[-1], names[0]))
    peers: dict[str, list[str]] = {name: [] for name in names}
    for a, b in sorted(links):
        peers[a].append(b)
        peers[b].append(a)
    return peers


def _spawn(args: list[str], log_path: Path) -> int:
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    return proc.pid


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child of ours still answers kill(0): check it has not exited.
    try:
        done, _status = os.waitpid(pid, os.WNOHANG)
        return done == 0
    except ChildProcessError:
        return True


def _wait(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise ClusterError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(0.05)


def node_answers(url: str, curve: ClientCurve | None = None) -> bool:
    try:
        with KvStoreClient(url, timeout_s=0.5, curve=curve) as client:
            client.node_info(refresh=True)
        return True
    except KvStoreError:
        return False


def _http_answers(address: str) -> bool:
    try:
        with urllib.request.urlopen(f"http://{address}/scheduler/stats", timeout=1) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


def _netns(*args: str) -> None:
    subprocess.run(["ip", "netns", *args], check=True, capture_output=True)


def _exec(netns: str, *args: str) -> None:
    subprocess.run(["ip", "netns", "exec", netns, *args], check=True, capture_output=True)


def up(nodes: int, topology: str = "chain", vpp_emulator: bool = False,
       run_dir: Path = DEFAULT_RUN_DIR, namespaces: bool | None = None,
       progress: Progress = lambda _msg: None, timeout: float = 60.0,
       netns_prefix: str = "kvmesh") -> ClusterState:
    """Start a cluster and return once every node (and agent) answers."""
    if nodes < 1:
        raise ClusterError("a cluster needs at least one node")
    existing = ClusterState.load(run_dir)
    if existing is not None and any(_alive(p) for n in existing.nodes.values()
                                    for p in n.pids.values()):
        raise ClusterError(f"a cluster is already running from {run_dir} "
                           f"(kvmesh cluster down first)")
    run_dir.mkdir(parents=True, exist_ok=True)
    use_netns = (os.geteuid() == 0) if namespaces is None else namespaces
    names = [f"n{i}" for i in range(1, nodes + 1)]
    peering = peers_of(names, topology)
    auth, secrets = make_keys(run_dir, names)
    state = ClusterState(str(run_dir), topology, {}, operator_key=str(secrets[OPERATOR_KEY]))
    for name in names:
        state.nodes[name] = NodeInfo(
            key_file=str(secrets[name]),
            public_key=str(secrets[name].with_suffix(".key")),
            cmd_url=f"tcp://127.0.0.1:{free_tcp_port()}",
            pub_url=f"tcp://127.0.0.1:{free_tcp_port()}",
            netns=f"{netns_prefix}-{name}" if use_netns else None,
            http=f"127.0.0.1:{free_tcp_port()}",
            vpp_socket=str(run_dir / f"{name}-vpp.sock") if vpp_emulator else None,
            data_dir=str(run_dir / "data" / name),
            peers=peering[name])
    state.save()
    exe = [sys.executable, "-m", "kvmesh"]
    try:
        for name, info in state.nodes.items():
            if info.netns:
                progress(f"namespace {info.netns}")
                _netns("add", info.netns)
                state.namespaces_made.append(info.netns)
                _exec(info.netns, "ip", "link", "set", "lo", "up")
            if info.vpp_socket:
                progress(f"{name}: VPP emulator on {info.vpp_socket}")
                info.pids["vpp"] = _spawn([*exe, "vpp-emulator", "--socket", info.vpp_socket],
                                          run_dir / f"{name}-vpp.log")
            peer_args = [a for p in info.peers
                         for a in ("--peer", f"{p}={state.nodes[p].cmd_url}")]
            agent_args = ["--agent", "--http", str(info.http)]
            if info.netns:
                agent_args += ["--linux-netns", info.netns]
            if info.vpp_socket:
                _wait(Path(info.vpp_socket).exists, timeout, f"VPP emulator of {name}")
                agent_args += ["--vpp-socket", info.vpp_socket]
            progress(f"{name}: KvStore node on {info.cmd_url}, agent REST on "
                     f"http://{info.http}")
            info.pids["node"] = _spawn(
                [*exe, "node", "run", "--name", name, "--cmd-url", info.cmd_url,
                 "--pub-url", info.pub_url, "--data-dir", str(info.data_dir),
                 "--key-file", str(info.key_file), "--authorized-keys", str(auth), *peer_args,
                 *agent_args],
                run_dir / f"{name}.log")
            state.save()
        for name, info in state.nodes.items():
            _wait(partial(node_answers, info.cmd_url, state.curve(name)), timeout,
                  f"node {name}")
        for name, info in state.nodes.items():
            _wait(partial(_http_answers, str(info.http)), timeout, f"agent of {name}")
            progress(f"{name}: ready")
    except BaseException:
        down(run_dir)
        raise
    return state


def status(run_dir: Path = DEFAULT_RUN_DIR) -> dict[str, object]:
    state = ClusterState.load(run_dir)
    if state is None:
        return {"nodes": {}, "running": False}
    nodes: dict[str, object] = {}
    for name, info in state.nodes.items():
        nodes[name] = {
            "cmd_url": info.cmd_url, "pub_url": info.pub_url, "netns": info.netns,
            "http": info.http, "vpp_socket": info.vpp_socket, "peers": info.peers,
            "processes": {role: {"pid": pid, "alive": _alive(pid)}
                          for role, pid in info.pids.items()},
        }
    running = any(p["alive"] for n in nodes.values() for p in n["processes"].values())  # type: ignore[index]
    return {"nodes": nodes, "topology": state.topology, "run_dir": state.run_dir,
            "running": running}


def down(run_dir: Path = DEFAULT_RUN_DIR, timeout: float = 15.0,
         progress: Progress = lambda _msg: None, purge: bool = False) -> int:
    """Stop every process and remove every namespace the cluster made; returns how many
    processes were stopped. The nodes' data directories stay (the next `up` from the same run
    dir restores their configuration) unless `purge`."""
    state = ClusterState.load(run_dir)
    if state is None:
        if purge:
            shutil.rmtree(run_dir / "data", ignore_errors=True)
        return 0
    # Nodes first (each stops its agent), VPP emulators last so no agent sees VPP vanish.
    pids = [pid for info in state.nodes.values()
            for _role, pid in sorted(info.pids.items(), key=lambda kv: kv[0] == "vpp")]
    stopped = 0
    for pid in pids:
        if _alive(pid):
            try:
                os.killpg(pid, signal.SIGTERM)
                stopped += 1
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + timeout
    for pid in pids:
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if _alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
    for netns in state.namespaces_made:
        progress(f"removing namespace {netns}")
        subprocess.run(["ip", "netns", "del", netns], capture_output=True, check=False)
    for info in state.nodes.values():
        if info.vpp_socket:
            Path(info.vpp_socket).unlink(missing_ok=True)
    (Path(state.run_dir) / STATE_FILE).unlink(missing_ok=True)
    if purge:
        progress(f"removing data directories under {run_dir / 'data'}")
        shutil.rmtree(run_dir / "data", ignore_errors=True)
    return stopped

"""A local cluster of real kvmesh processes on loopback (`kvmesh cluster up/status/down`).

Each node is a KvStore process supervising its agent process (`kvmesh node run --agent`), plus,
with `vpp_emulator`, a VPP emulator.
With `core`, only the first `core` nodes are full nodes peered by the topology; every other
node is a KvStore leaf (docs/kvstore.md, "Leaf nodes": it holds only what its agent needs)
with one peer, a core node (round-robin over the core).
With `isolated`, every node (KvStore, agent, emulator) runs inside its own network namespace, and
the nodes reach each other over veth links to a bridge, with addresses from 198.18.0.0/15
(`kvmesh.netlab`); never over loopback.
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
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from kvmesh import launch, netlab, rundirs
from kvmesh.cluster_state import DEFAULT_RUN_DIR as DEFAULT_RUN_DIR
from kvmesh.cluster_state import RUN_DIR_ENV as RUN_DIR_ENV
from kvmesh.cluster_state import STATE_FILE as STATE_FILE
from kvmesh.cluster_state import ClusterState as ClusterState
from kvmesh.cluster_state import NodeInfo as NodeInfo
from kvmesh.cluster_state import default_run_dir as default_run_dir
from kvmesh.envnames import HTTP_CA_ENV, HTTP_TOKEN_ENV
from kvstore import (
    DB_FILE,
    KEY_FILE_ENV,
    SERVER_KEY_ENV,
    ClientCurve,
    KvStoreClient,
    KvStoreError,
    free_tcp_port,
    generate,
    safefs,
)

if TYPE_CHECKING:
    from kvmesh.rest_client import AgentRest

TOPOLOGIES = ("chain", "ring", "mesh", "random")
# Ports inside an isolated node's namespace (each namespace has its own port space).
ISOLATED_CMD_PORT, ISOLATED_PUB_PORT, ISOLATED_HTTP_PORT = 60002, 60001, 8080
OPERATOR_KEY = "operator"

Progress = Callable[[str], None]


class ClusterError(RuntimeError):
    pass


def agent_rest(state: ClusterState, node: str, timeout_s: float = 5.0) -> AgentRest:
    """A client of `node`'s agent REST API with the token a CLI would find: the cluster's,
    over TLS, if it has REST credentials (isolated); else the agent's own. An answer from
    another node's agent is refused (kvmesh.rest_client)."""
    from kvmesh.rest_client import AgentAddress, AgentRest

    address = AgentAddress.parse(str(state.nodes[node].http), bool(state.http_cert), node=node)
    return AgentRest(address, timeout_s=timeout_s, run_dir=Path(state.run_dir))


def make_keys(run_dir: Path, names: list[str]) -> tuple[Path, dict[str, Path]]:
    """Key pairs for the operator and each node under run_dir/keys (made once, then reused),
    and run_dir/authorized-keys: each node a peer, the operator an operator."""
    keys = safefs.private_dir(run_dir / "keys")
    auth = run_dir / "authorized-keys"
    secrets: dict[str, Path] = {}
    for name in [OPERATOR_KEY, *names]:
        secret = keys / f"{name}.key_secret"
        if os.path.lexists(secret):
            safefs.check_owned_file(secret)  # reused: ours, not a planted link
            safefs.check_owned_file(keys / f"{name}.key")
        else:
            (keys / f"{name}.key").unlink(missing_ok=True)
            generate(name, keys)
        secrets[name] = secret
    # Peers are exactly this cluster's nodes (a larger earlier cluster's keys go).
    for stale in (auth / "peer").glob("*.key") if (auth / "peer").is_dir() else ():
        if stale.stem not in names:
            stale.unlink()
    for role, name, file_name in [("operator", OPERATOR_KEY, OPERATOR_KEY),
                                  *(("peer", n, n) for n in names)]:
        safefs.private_dir(auth / role)
        safefs.write_replace(auth / role / f"{file_name}.key",
                             safefs.read_owned(keys / f"{name}.key"), 0o644)
    return auth, secrets


def make_http_credentials(run_dir: Path, addresses: list[str]) -> tuple[Path, Path, Path]:
    """For agents whose REST API listens off loopback (an isolated cluster): a self-signed
    certificate naming every node address (one for the cluster's agents: this is a test and
    demo launcher, not a PKI), its key, and a bearer token file, under run_dir."""
    cert, key, token = run_dir / "http-cert.pem", run_dir / "http-key.pem", run_dir / "http-token"
    if os.path.lexists(token):
        safefs.check_owned_file(token)
    else:
        safefs.write_new(token, (secrets.token_urlsafe(32) + "\n").encode(), safefs.SECRET_MODE)
    san = ",".join(f"IP:{address}" for address in addresses)
    # openssl writes into a fresh 0700 directory of ours (it follows links and opens without
    # O_EXCL); the files are then renamed into place (a link at the final name is replaced).
    with tempfile.TemporaryDirectory(dir=run_dir, prefix=".http-") as fresh:
        new_key, new_cert = Path(fresh) / "key.pem", Path(fresh) / "cert.pem"
        try:
            subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes",
                            "-days", "30", "-subj", "/CN=kvmesh-cluster",
                            "-addext", f"subjectAltName={san}",
                            "-keyout", str(new_key), "-out", str(new_cert)],
                           check=True, capture_output=True, text=True)
        except (OSError, subprocess.CalledProcessError) as exc:
            raise ClusterError(
                f"cannot make the agents' TLS certificate with openssl: {exc}") from exc
        new_key.chmod(safefs.SECRET_MODE)  # inside the 0700 directory: never readable by others
        new_key.replace(key)
        new_cert.replace(cert)
    return cert, key, token


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
    if state.http_token_file and state.http_cert:
        env[HTTP_TOKEN_ENV] = state.http_token_file
        env[HTTP_CA_ENV] = state.http_cert
    return env


def peers_of(names: list[str], topology: str, degree: int = 3,
             seed: int = 0) -> dict[str, list[str]]:
    """Peering for a topology (declared on both sides, as the KvStore expects). `random` is a
    connected graph where each node has at least `degree` peers, the same for the same seed."""
    if topology not in TOPOLOGIES:
        raise ClusterError(f"unknown topology {topology!r}; use one of {', '.join(TOPOLOGIES)}")
    links: set[tuple[str, str]] = set()
    n = len(names)
    if topology == "mesh":
        links = {(a, b) for i, a in enumerate(names) for b in names[i + 1:]}
    elif topology == "random":
        try:
            links = netlab.random_peers(names, degree, seed)
        except ValueError as exc:
            raise ClusterError(str(exc)) from exc
    else:
        links = {(names[i], names[i + 1]) for i in range(n - 1)}
        if topology == "ring" and n > 2:
            links.add((names[-1], names[0]))
    peers: dict[str, list[str]] = {name: [] for name in names}
    for a, b in sorted(links):
        peers[a].append(b)
        peers[b].append(a)
    return peers


def cluster_peering(names: list[str], topology: str, core: int | None = None, degree: int = 3,
                    seed: int = 0) -> dict[str, list[str]]:
    """Peering of a cluster: the first `core` names (all with None) peered by `topology`; each
    other name a leaf with exactly one peer, a core node, spread round-robin over the core (a
    leaf is never a transit node, so leaves never peer with each other)."""
    if core is not None and core < 1:
        raise ClusterError(f"--core {core}: a cluster needs at least one full node (leaves "
                           f"attach to the core); leave --core out for full nodes only")
    full = names if core is None else names[:core]
    peers = peers_of(full, topology, degree, seed)
    for index, leaf in enumerate(names[len(full):]):
        uplink = full[index % len(full)]
        peers[leaf] = [uplink]
        peers[uplink].append(leaf)
    return peers


def node_spec(name: str, state: ClusterState, *, agent: bool = True,
              config_path: Path | None = None) -> launch.NodeSpec:
    """What node `name` runs (the one place a cluster node's options are chosen: adapt it here)."""
    info = state.nodes[name]
    options = None
    if agent:
        options = launch.AgentOptions(
            http=str(info.http),
            linux=state.lab is not None,  # the agent runs inside the node's namespace
            linux_netns=info.netns if state.lab is None else None,
            vpp_socket=info.vpp_socket)
        if state.http_token_file:
            options.http_cert, options.http_key = state.http_cert, state.http_key
            options.http_token_file = state.http_token_file
    return launch.NodeSpec(
        name, info.cmd_url, info.pub_url,
        peers={peer: state.nodes[peer].cmd_url for peer in info.peers},
        data_dir=info.data_dir or None, config=config_path,
        key_file=info.key_file,
        authorized_keys=Path(state.run_dir) / "authorized-keys" if info.key_file else None,
        agent=options, netns=info.netns if state.lab is not None else None, leaf=info.leaf)


def node_command(name: str, state: ClusterState, *, agent: bool = True,
                 config_path: Path | None = None) -> list[str]:
    """The argv of node `name` (see `node_spec`)."""
    return node_spec(name, state, agent=agent, config_path=config_path).argv()


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    return json.dumps(str(value))  # a TOML basic string is a JSON string


def _toml_key(key: str) -> str:
    bare = key and all(c.isascii() and (c.isalnum() or c in "-_") for c in key)
    return key if bare else json.dumps(key)


def write_node_config(path: Path, values: Mapping[str, object],
                      tables: Mapping[str, Mapping[str, object]] | None = None) -> None:
    """A node's TOML configuration file: top-level ints, floats, strings, booleans and lists
    of them (e.g. a leaf's `key_prefix_filters`), then `tables` ([peers], [agent]) of those."""
    lines = [f"{_toml_key(key)} = {_toml_value(value)}\n" for key, value in values.items()]
    for table, entries in (tables or {}).items():
        lines.append(f"\n[{_toml_key(table)}]\n")
        lines += [f"{_toml_key(key)} = {_toml_value(value)}\n" for key, value in entries.items()]
    safefs.write_replace(path, "".join(lines).encode())


def _spawn(args: list[str], log_path: Path) -> int:
    """Start a process of the cluster in its own session (it outlives this one)."""
    return launch.start(args, log_path, new_session=True).pid


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


UNKNOWN_VERSION = "?"
LEGACY_VERSION = "0.4.0?"  # a node that answers NODE_INFO without a version: 0.4.0 (or older)


def node_versions(url: str, curve: ClientCurve | None, ask: bool = True) -> dict[str, object]:
    """What the node on `url` says it runs: {"version", "protocol"} ("?" and None when it does
    not answer; "0.4.0?" and protocol 1 for a node that answers without versions)."""
    if ask:
        try:
            with KvStoreClient(url, timeout_s=0.5, curve=curve) as client:
                info = client.node_info(refresh=True)
        except KvStoreError:
            pass
        else:
            return {"version": info.version or LEGACY_VERSION, "protocol": info.protocol or 1}
    return {"version": UNKNOWN_VERSION, "protocol": None}


def _agent_answers(state: ClusterState, node: str) -> bool:
    """Does the agent REST API of `node` answer (`agent_rest`)?"""
    from kvmesh.rest_client import RestError

    try:
        agent_rest(state, node, timeout_s=1).request("GET", "/scheduler/stats")
    except RestError:
        return False
    return True


def _netns(*args: str) -> None:
    _ip_netns(list(args))


def _exec(netns: str, *args: str) -> None:
    _ip_netns(["exec", netns, *args])


def _ip_netns(args: list[str]) -> None:
    """`ip netns ARGS`; a refusal is a ClusterError saying what `ip` said (e.g. a namespace
    `kvmesh-n1` that exists: another cluster on this host holds it)."""
    done = subprocess.run(["ip", "netns", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        hint = (" (another cluster on this host may hold it: `kvmesh cluster down` there, "
                "or run this one with --isolated)" if "File exists" in done.stderr else "")
        raise ClusterError(f"ip netns {' '.join(args)}: {done.stderr.strip()}{hint}")


def up(nodes: int, topology: str = "chain", vpp_emulator: bool = False,
       run_dir: Path = DEFAULT_RUN_DIR, namespaces: bool | None = None,
       progress: Progress = lambda _msg: None, timeout: float = 60.0,
       netns_prefix: str = "kvmesh", *, isolated: bool = False, degree: int = 3,
       seed: int = 0, agents: bool = True,
       node_config: Mapping[str, object] | None = None,
       core: int | None = None) -> ClusterState:
    """Start a cluster and return once every node (and agent) answers.

    `isolated`: every node in its own namespace on a bridge (see the module doc; needs root).
    `agents=False` runs KvStore nodes only. `node_config`: TOML knobs for every node (a mapping
    value is a table: {"agent": {"heartbeat_ms": 2000}}).
    `degree`/`seed`: the `random` topology. `core`: the first `core` nodes are full nodes
    peered by `topology`, the others leaves (`cluster_peering`); None or >= `nodes`: no leaves."""
    if nodes < 1:
        raise ClusterError("a cluster needs at least one node")
    if core is not None and core >= nodes:
        core = None
    names = [f"n{i}" for i in range(1, nodes + 1)]
    peering = cluster_peering(names, topology, core, degree, seed)  # refuses a bad --core first
    run_dir = _claim_run_dir(run_dir, isolated)
    use_netns = (os.geteuid() == 0) if namespaces is None else namespaces
    _say_restored(run_dir, names, progress)
    _auth, secrets = make_keys(run_dir, names)
    state = ClusterState(str(run_dir), topology, {}, operator_key=str(secrets[OPERATOR_KEY]),
                         core=core)
    config_path = _write_node_config(run_dir, node_config)
    try:
        lab = _make_lab(state, names, agents, progress) if isolated else None
        leaves = set(names[core:]) if core is not None else set()
        for name in names:
            state.nodes[name] = _plan_node(state, name, secrets[name], peering[name],
                                           name in leaves, lab, agents, vpp_emulator,
                                           f"{netns_prefix}-{name}" if use_netns else None)
        state.save()
        for name in names:
            _start_node(state, name, isolated, agents, config_path, timeout, progress)
        _wait_ready(state, timeout, progress)
    except BaseException:
        state.save()
        down(run_dir)
        raise
    return state


def _claim_run_dir(run_dir: Path, isolated: bool) -> Path:
    """The run dir, made private (under the runtime base's mode rule), refused while a cluster
    started from it still runs, or for an isolated cluster without root."""
    rundirs.make_base_for(run_dir)
    run_dir = safefs.private_dir(run_dir)
    existing = ClusterState.load(run_dir)
    if existing is not None and any(launch.pid_alive(p) for n in existing.nodes.values()
                                    for p in n.pids.values()):
        raise ClusterError(f"a cluster is already running from {run_dir} "
                           f"(kvmesh cluster down first)")
    if isolated and os.geteuid() != 0:
        raise ClusterError("an isolated cluster needs root (network namespaces)")
    return run_dir


def _say_restored(run_dir: Path, names: list[str], progress: Progress) -> None:
    restored = [name for name in names if (run_dir / "data" / name / DB_FILE).exists()]
    if restored:
        progress(f"restoring the configuration of {', '.join(restored)} from "
                 f"{run_dir / 'data'} (kvmesh cluster down --purge starts empty)")


def _write_node_config(run_dir: Path, node_config: Mapping[str, object] | None) -> Path | None:
    if not node_config:
        return None
    config_path = run_dir / "node.toml"
    tables = {key: value for key, value in node_config.items() if isinstance(value, Mapping)}
    write_node_config(config_path, {k: v for k, v in node_config.items() if k not in tables},
                      tables)
    return config_path


def _make_lab(state: ClusterState, names: list[str], agents: bool,
              progress: Progress) -> netlab.Lab:
    """The isolated network (and, with agents, their REST TLS credentials), recorded in the
    state at once so that `down` removes it whatever fails next."""
    progress(f"isolated network for {len(names)} nodes")
    lab = netlab.create_lab(names)
    state.lab = lab.to_json()
    if agents:
        cert, key, token = make_http_credentials(
            Path(state.run_dir), [lab.address(name) for name in names])
        state.http_cert, state.http_key = str(cert), str(key)
        state.http_token_file = str(token)
    state.save()
    return lab


def _plan_node(state: ClusterState, name: str, secret: Path, peers: list[str], leaf: bool,
               lab: netlab.Lab | None, agents: bool, vpp_emulator: bool,
               netns: str | None) -> NodeInfo:
    """Where `name` listens and what it runs: in an isolated cluster, its own address and fixed
    ports (a namespace of its own); else loopback, free ports, and `netns` for its agent."""
    run_dir = Path(state.run_dir)
    if lab is not None:
        address = lab.address(name)
        cmd_url = f"tcp://{address}:{ISOLATED_CMD_PORT}"
        pub_url = f"tcp://{address}:{ISOLATED_PUB_PORT}"
        http = f"{address}:{ISOLATED_HTTP_PORT}"
        netns = lab.namespaces[name]
    else:
        cmd_url = f"tcp://127.0.0.1:{free_tcp_port()}"
        pub_url = f"tcp://127.0.0.1:{free_tcp_port()}"
        http = f"127.0.0.1:{free_tcp_port()}"
    return NodeInfo(
        cmd_url=cmd_url, pub_url=pub_url, netns=netns, http=http if agents else None,
        vpp_socket=str(run_dir / f"{name}-vpp.sock") if vpp_emulator else None,
        data_dir=str(run_dir / "data" / name), key_file=str(secret),
        public_key=str(secret.with_suffix(".key")), peers=peers, leaf=leaf)


def _start_node(state: ClusterState, name: str, isolated: bool, agents: bool,
                config_path: Path | None, timeout: float, progress: Progress) -> None:
    """`name`'s namespace (loopback clusters), VPP emulator and node process (which starts
    its agent); each recorded in the state as soon as it exists."""
    info, run_dir = state.nodes[name], Path(state.run_dir)
    exe = [sys.executable, "-m", "kvmesh"]
    if info.netns and not isolated:
        progress(f"namespace {info.netns}")
        _netns("add", info.netns)
        state.namespaces_made.append(info.netns)
        _exec(info.netns, "ip", "link", "set", "lo", "up")
    if info.vpp_socket:
        progress(f"{name}: VPP emulator on {info.vpp_socket}")
        vpp = [*exe, "vpp-emulator", "--socket", info.vpp_socket]
        if isolated and info.netns:
            vpp = ["ip", "netns", "exec", info.netns, *vpp]
        info.commands["vpp"] = vpp
        info.pids["vpp"] = _spawn(vpp, run_dir / f"{name}-vpp.log")
        _wait(Path(info.vpp_socket).exists, timeout, f"VPP emulator of {name}")
    where = f", agent REST on {state.rest_url(name)}" if agents else ""
    progress(f"{name}: KvStore {'leaf' if info.leaf else 'node'} on {info.cmd_url}{where}")
    info.commands["node"] = node_command(name, state, agent=agents, config_path=config_path)
    info.pids["node"] = _spawn(info.commands["node"], run_dir / f"{name}.log")
    state.save()


def _wait_ready(state: ClusterState, timeout: float, progress: Progress) -> None:
    """Until every node answers, then every agent."""
    for name, info in state.nodes.items():
        _wait(partial(node_answers, info.cmd_url, state.curve(name)), timeout, f"node {name}")
    for name, info in state.nodes.items():
        if info.http:
            _wait(partial(_agent_answers, state, name), timeout, f"agent of {name}")
        progress(f"{name}: ready")


def respawn(state: ClusterState, name: str, role: str = "node") -> int:
    """Start a process of the cluster again with the command it was started with (after a
    crash or a stop); records and returns its new pid."""
    info = state.nodes[name]
    suffix = "" if role == "node" else f"-{role}"
    info.pids[role] = _spawn(info.commands[role], Path(state.run_dir) / f"{name}{suffix}.log")
    state.save()
    return info.pids[role]


def status(run_dir: Path = DEFAULT_RUN_DIR) -> dict[str, object]:
    state = ClusterState.load(run_dir)
    if state is None:
        return {"nodes": {}, "running": False}
    nodes: dict[str, object] = {}
    for name, info in state.nodes.items():
        processes = {role: {"pid": pid, "alive": launch.pid_alive(pid)}
                     for role, pid in info.pids.items()}
        node_alive = processes.get("node", {}).get("alive", False)
        nodes[name] = {
            "cmd_url": info.cmd_url, "pub_url": info.pub_url, "netns": info.netns,
            "http": info.http, "rest_url": state.rest_url(name),
            "vpp_socket": info.vpp_socket, "peers": info.peers,
            "leaf": info.leaf, "processes": processes,
            **node_versions(info.cmd_url, state.curve(name) if node_alive else None,
                            ask=bool(node_alive)),
        }
    running = any(p["alive"] for n in nodes.values() for p in n["processes"].values())  # type: ignore[index]
    return {"nodes": nodes, "topology": state.topology, "core": state.core,
            "run_dir": state.run_dir, "running": running}


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
        if launch.pid_alive(pid):
            try:
                os.killpg(pid, signal.SIGTERM)
                stopped += 1
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + timeout
    for pid in pids:
        while launch.pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if launch.pid_alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
    for netns in state.namespaces_made:
        progress(f"removing namespace {netns}")
        subprocess.run(["ip", "netns", "del", netns], capture_output=True, check=False)
    lab = state.isolated_lab()
    if lab is not None:
        progress(f"removing isolated network {lab.tag} (bridge namespace {lab.bridge_ns})")
        netlab.destroy_lab(lab)
    for info in state.nodes.values():
        if info.vpp_socket:
            Path(info.vpp_socket).unlink(missing_ok=True)
    (Path(state.run_dir) / STATE_FILE).unlink(missing_ok=True)
    if purge:
        progress(f"removing data directories under {run_dir / 'data'}")
        shutil.rmtree(run_dir / "data", ignore_errors=True)
    return stopped

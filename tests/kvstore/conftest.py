"""Fixtures for multi-process KvStore tests: real `kvmesh node run` processes on loopback.

`mesh` hands out a `Mesh`: allocate nodes (free ports, so URLs are known before any node starts
and peers can be declared on both sides), start them as subprocesses (through the launcher's
library API, `kvmesh.launch`), wait until their command socket answers, and kill every process
at teardown, whatever happened in the test.

Nodes run `--insecure` (plaintext, loopback) unless the mesh is made with `secure=True`
(`secure_mesh`): then every node has a key pair, all share one authorized-keys directory (each
node a `peer`, plus the operator key `op` the nodes' `client()` uses), see `Keyring`.
"""

from __future__ import annotations

import itertools
import signal
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import zmq

from kvmesh import launch
from kvmesh.cluster import write_node_config
from kvmesh.launch import Launched, NodeSpec
from kvstore.client import KvStoreClient, KvStoreError, Subscription, make_value
from kvstore.curve import ClientCurve, generate, load_key_pair, load_public_key
from kvstore.node_ports import free_tcp_port
from tests.util import wait_until

REPO = Path(__file__).resolve().parents[2]

# Fast, test-friendly defaults: quick retries, no periodic anti-entropy unless a test asks.
TEST_CONFIG: dict[str, Any] = {
    "sync_interval_s": 0,
    "sync_timeout_ms": 3000,
    "sync_initial_backoff_ms": 100,
    "sync_max_backoff_ms": 1000,
}


def free_port() -> int:
    return free_tcp_port()


@dataclass
class Node:
    name: str
    cmd_url: str
    pub_url: str
    workdir: Path
    config: dict[str, Any] = field(default_factory=dict)
    peers: dict[str, str] = field(default_factory=dict)  # name -> cmd_url
    proc: Launched | None = None
    keyring: Keyring | None = None  # secured: the mesh's keys

    @property
    def log_path(self) -> Path:
        return self.workdir / f"{self.name}.log"

    def client(self, timeout_s: float = 5.0, key: str = "op") -> KvStoreClient:
        """A client (plaintext, or in a secured mesh with the key pair `key`)."""
        curve = None if self.keyring is None else self.keyring.curve(key, self.name)
        return KvStoreClient(self.cmd_url, timeout_s=timeout_s, curve=curve)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def answers(self) -> bool:
        try:
            with self.client(timeout_s=0.5) as c:
                return c.node_info(refresh=True).name == self.name
        except KvStoreError:
            return False

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> int:
        """Send `sig` and wait for the exit code."""
        assert self.proc is not None
        return self.proc.stop(sig, timeout)

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()


class Keyring:
    """Key pairs under `root/keys`, one authorized-keys directory `root/auth` (docs/security.md
    layout: auth/<role>/[<node>/]<name>.key)."""

    def __init__(self, root: Path) -> None:
        self.keys = root / "keys"
        self.auth = root / "auth"
        self.auth.mkdir(parents=True, exist_ok=True)

    def secret(self, name: str) -> Path:
        path = self.keys / f"{name}.key_secret"
        if not path.exists():
            generate(name, self.keys)
        return path

    def public(self, name: str) -> Path:
        self.secret(name)
        return self.keys / f"{name}.key"

    def authorize(self, name: str, role: str, node: str | None = None) -> Path:
        if role == "peer":  # peer/<node>.key
            directory, file_name = self.auth / role, f"{node or name}.key"
        else:  # <role>/[<node>/]<name>.key
            directory, file_name = self.auth / role / (node or ""), f"{name}.key"
        directory.mkdir(parents=True, exist_ok=True)
        target = directory / file_name
        target.write_bytes(self.public(name).read_bytes())
        return target

    def revoke(self, name: str) -> None:
        public = self.public(name).read_bytes()
        for path in self.auth.rglob("*.key"):
            if path.read_bytes() == public:
                path.unlink()

    def curve(self, name: str, server: str) -> ClientCurve:
        return ClientCurve(load_key_pair(self.secret(name)),
                           load_public_key(str(self.public(server))))


class Mesh:
    def __init__(self, workdir: Path, secure: bool = False) -> None:
        self.workdir = workdir
        self.nodes: dict[str, Node] = {}
        self.keyring: Keyring | None = None
        if secure:
            self.keyring = Keyring(workdir)
            self.keyring.authorize("op", "operator")

    def allocate(self, name: str, **config: Any) -> Node:
        node = Node(
            name=name,
            cmd_url=f"tcp://127.0.0.1:{free_port()}",
            pub_url=f"tcp://127.0.0.1:{free_port()}",
            workdir=self.workdir,
            config={**TEST_CONFIG, **config},
            keyring=self.keyring,
        )
        if self.keyring is not None:
            self.keyring.authorize(name, "peer", node=name)
        self.nodes[name] = node
        return node

    def spec(self, node: Node) -> NodeSpec:
        """What `node` runs (its config written to a TOML file of its own)."""
        config_path = self.workdir / f"{node.name}.toml"
        write_node_config(config_path, node.config)
        keyring = self.keyring
        return NodeSpec(
            node.name, node.cmd_url, node.pub_url, peers=dict(node.peers), config=config_path,
            # durable-store tests give a data_dir in the config
            ephemeral="data_dir" not in node.config,
            key_file=keyring.secret(node.name) if keyring is not None else None,
            authorized_keys=keyring.auth if keyring is not None else None)

    def start(self, node: Node, peers: Sequence[Node] = (), wait: bool = True,
              preexec_fn: Callable[[], None] | None = None) -> Node:
        """Start `node` (`preexec_fn`: run in the child first, e.g. to set resource limits)."""
        node.peers.update({p.name: p.cmd_url for p in peers})
        for attempt in range(3):
            node.proc = launch.start(self.spec(node), node.log_path, cwd=REPO,
                                     env={"PYTHONUNBUFFERED": "1"}, preexec_fn=preexec_fn)
            if not wait:
                return node
            try:
                wait_until(
                    lambda: node.answers() or not node.alive(),
                    timeout=30,
                    message=f"node {node.name} answering on {node.cmd_url}",
                )
            except AssertionError:
                node.kill()
                raise AssertionError(f"node {node.name} did not start:\n{node.log()}") from None
            if node.alive():
                return node
            # Lost a race for a port with another process: take new ports and retry.
            if "cannot bind" not in node.log() or attempt == 2:
                raise AssertionError(f"node {node.name} exited:\n{node.log()}")
            node.cmd_url = f"tcp://127.0.0.1:{free_port()}"
            node.pub_url = f"tcp://127.0.0.1:{free_port()}"
        raise AssertionError("unreachable")

    def chain(self, names: Sequence[str], **config: Any) -> list[Node]:
        """Nodes peered in a line, each declaring both neighbours."""
        nodes = [self.allocate(n, **config) for n in names]
        for i, node in enumerate(nodes):
            neighbours = [nodes[j] for j in (i - 1, i + 1) if 0 <= j < len(nodes)]
            node.peers.update({p.name: p.cmd_url for p in neighbours})
        for node in nodes:
            self.start(node, wait=False)
        for node in nodes:
            self.wait_ready(node)
        return nodes

    def full_mesh(self, names: Sequence[str], **config: Any) -> list[Node]:
        nodes = [self.allocate(n, **config) for n in names]
        for node in nodes:
            node.peers.update({p.name: p.cmd_url for p in nodes if p is not node})
        for node in nodes:
            self.start(node, wait=False)
        for node in nodes:
            self.wait_ready(node)
        return nodes

    def wait_ready(self, node: Node, initial_sync: bool = True) -> None:
        def ready() -> bool:
            if not node.alive():
                raise AssertionError(f"node {node.name} exited:\n{node.log()}")
            try:
                with node.client(timeout_s=0.5) as c:
                    info = c.node_info(refresh=True)
                    return not initial_sync or bool(info.initial_sync_done)
            except KvStoreError:
                return False

        wait_until(ready, timeout=30, message=f"node {node.name} ready")

    def close(self) -> None:
        for node in self.nodes.values():
            node.kill()


@pytest.fixture
def mesh(tmp_path: Path) -> Iterator[Mesh]:
    m = Mesh(tmp_path)
    try:
        yield m
    finally:
        m.close()


@pytest.fixture
def ctx() -> Iterator[zmq.Context[zmq.Socket[bytes]]]:
    """A ZeroMQ context of its own for a test's raw sockets (many: MAX_SOCKETS 8192)."""
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    context.set(zmq.MAX_SOCKETS, 8192)
    try:
        yield context
    finally:
        context.destroy(linger=0)


@pytest.fixture
def secure_mesh(tmp_path: Path) -> Iterator[Mesh]:
    m = Mesh(tmp_path, secure=True)
    try:
        yield m
    finally:
        m.close()


def wait_for_value(
    nodes: Sequence[Node], key: str, predicate: Any, timeout: float = 20.0
) -> None:
    """Wait until `predicate(value_or_None)` holds for `key` on every node."""

    def check() -> bool:
        for node in nodes:
            with node.client() as c:
                if not predicate(c.get([key]).get(key)):
                    return False
        return True

    wait_until(check, timeout=timeout, message=f"{key} on {[n.name for n in nodes]}")


def wait_subscription_live(writer: KvStoreClient, subscription: Subscription,
                           key: str = "probe") -> None:
    """Write `key` until `subscription` sees a publication (ZeroMQ's slow joiner: a new
    subscription misses what is published before it attaches). A new version per attempt: a
    repeated one changes nothing, so it would publish nothing."""
    versions = itertools.count(1)
    wait_until(
        lambda: writer.set({key: make_value(b"", version=next(versions), originator_id="t")})
        is not None
        and subscription.recv(timeout_s=0.2) is not None,
        message="subscription live",
    )

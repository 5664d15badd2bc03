"""SIGHUP re-reads a running node's configuration file (docs/kvstore.md, "Reloading: SIGHUP"):
peers and live tunables are applied, restart-only changes are logged and left as they run, and
a broken file changes nothing. A real `kvmesh node run --config FILE` process, real signals."""

from __future__ import annotations

import functools
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from zmq import curve_keypair

from kvstore.authz import PEER
from kvstore.client import KvStoreClient, KvStoreRequestError, make_value
from kvstore.membership import Member, encode_member, member_key
from tests.kvstore.conftest import REPO, Mesh, Node, free_port
from tests.util import wait_until


class ConfiguredNode:
    """`kvmesh node run --config FILE` with the file kept editable."""

    def __init__(self, workdir: Path, name: str) -> None:
        self.path = workdir / f"{name}.toml"
        self.log_path = workdir / f"{name}.log"
        self.cmd_url = f"tcp://127.0.0.1:{free_port()}"
        self.pub_url = f"tcp://127.0.0.1:{free_port()}"
        self.head = (f'name = "{name}"\ncmd_url = "{self.cmd_url}"\n'
                     f'pub_url = "{self.pub_url}"\ninsecure = true\n'
                     "ephemeral = true\nsync_interval_s = 0\nsync_initial_backoff_ms = 100\n")
        self.proc: subprocess.Popen[bytes] | None = None

    def write(self, text: str) -> None:
        self.path.write_text(text)
        self.path.chmod(0o600)

    def start(self) -> None:
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "kvmesh", "node", "run", "--config", str(self.path)],
                cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
        wait_until(self.answers, timeout=30, message=f"node answering\n{self.log()}")

    def client(self) -> KvStoreClient:
        return KvStoreClient(self.cmd_url, timeout_s=5)

    def answers(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"node exited:\n{self.log()}")
        try:
            with KvStoreClient(self.cmd_url, timeout_s=0.5) as client:
                client.node_info()
            return True
        except Exception:
            return False

    def hangup(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGHUP)

    def counter(self, name: str) -> int:
        with self.client() as client:
            return client.counters().get(name, 0)

    def peers(self) -> set[str]:
        with self.client() as client:
            return set(client.peers())

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        return self.proc.wait()


@pytest.fixture
def configured(tmp_path: Path) -> Iterator[ConfiguredNode]:
    node = ConfiguredNode(tmp_path, "n1")
    try:
        yield node
    finally:
        node.stop()


@pytest.mark.process
def test_sighup_applies_peers_and_tunables_and_logs_what_needs_a_restart(
        mesh: Mesh, configured: ConfiguredNode) -> None:
    n2 = mesh.start(mesh.allocate("n2"))
    node = configured
    node.write(node.head + f'[peers]\nn2 = "{n2.cmd_url},{n2.pub_url}"\n')
    node.start()
    assert node.peers() == {"n2"}

    # Edit: n2 out, n3 in, a tunable (max_peers) and the log level changed, and the command
    # socket moved (needs a restart).
    moved = f"tcp://127.0.0.1:{free_port()}"
    node.write(node.head.replace(node.cmd_url, moved)
               + 'max_peers = 1\nlog_level = "warning"\n[peers]\nn3 = "tcp://127.0.0.1:9"\n')
    node.hangup()
    wait_until(lambda: node.counter("kvstore.config.reloads") == 1, timeout=15,
               message=f"reloaded\n{node.log()}")
    assert node.peers() == {"n3"}
    log = node.log()
    assert f"cmd_url: '{node.cmd_url}' -> '{moved}' needs a restart: not applied" in log
    assert "max_peers: 512 -> 1 (applied)" in log
    assert node.counter("kvstore.config.restart_pending") == 1
    assert node.answers()  # still on the command socket it runs with
    # max_peers = 1 is in force: a second peer is refused.
    with node.client() as client, pytest.raises(KvStoreRequestError, match="max_peers is 1"):
        client.add_peer("n4", "tcp://127.0.0.1:8")
    # log_level = "warning" is in force: the info line of a peer removal is not logged.
    node.write(node.head + 'log_level = "warning"\n')
    node.hangup()
    wait_until(lambda: node.counter("kvstore.config.reloads") == 2, timeout=15)
    assert node.peers() == set()
    assert "peer n3 removed" not in node.log()
    assert node.counter("kvstore.config.restart_pending") == 0


def failures_reach(node: ConfiguredNode, count: int) -> bool:
    return node.counter("kvstore.config.reload_failures") == count


@pytest.mark.process
def test_sighup_with_a_broken_file_keeps_the_running_configuration(
        configured: ConfiguredNode) -> None:
    node = configured
    node.write(node.head + '[peers]\nn2 = "tcp://127.0.0.1:9"\n')
    node.start()
    reloads = 0
    for broken in ("[peers\n", "", "nmae = 'typo'\n",
                   node.head + 'leaf = true\n[peers]\na = "tcp://127.0.0.1:7"\n'
                   'b = "tcp://127.0.0.1:8"\nc = "tcp://127.0.0.1:6"\n'):  # a leaf: 2 at most
        node.write(broken)
        node.hangup()
        reloads += 1
        wait_until(functools.partial(failures_reach, node, reloads), timeout=15,
                   message=f"reload refused\n{node.log()}")
        assert node.peers() == {"n2"}
    node.path.chmod(0o666)  # a file others may write is no order to take
    node.hangup()
    wait_until(functools.partial(failures_reach, node, reloads + 1), timeout=15)
    assert "writable by group or others" in node.log()
    assert node.peers() == {"n2"} and node.counter("kvstore.config.reloads") == 0
    assert node.stop() == 0


def _member(name: str, node: ConfiguredNode | Node, peers: tuple[str, ...] = ()) -> bytes:
    return encode_member(Member(name=name, key=curve_keypair()[0].decode(), role=PEER,
                                cmd_url=node.cmd_url, pub_url=node.pub_url, peers=peers,
                                added_by="test", added_at=1))


@pytest.mark.process
def test_sighup_with_member_records_keeps_members_and_their_peerings(
        mesh: Mesh, configured: ConfiguredNode) -> None:
    """A node reloads its file while member records (member/<N>) exist: the live settings
    change, the records stay, and so do the peerings they make, also a peer the file no longer
    names but a record does (it is a member peering still: never dropped and dialed again, and
    the records' from then on: it goes when they stop naming it)."""
    n2, n3 = mesh.start(mesh.allocate("n2")), mesh.start(mesh.allocate("n3"))
    node = configured
    node.write(node.head + f'[peers]\nn2 = "{n2.cmd_url},{n2.pub_url}"\n')
    node.start()
    records = {member_key("n1"): _member("n1", node, peers=("n2", "n3")),
               member_key("n2"): _member("n2", n2), member_key("n3"): _member("n3", n3)}
    with node.client() as client:
        client.set({key: make_value(raw, version=1, originator_id="op")
                    for key, raw in records.items()})
    wait_until(lambda: node.peers() == {"n2", "n3"}, timeout=15,
               message=f"n3 peered by the member records\n{node.log()}")
    wait_until(lambda: node.counter("kvstore.full_sync.success") >= 2, timeout=15,
               message="both peers synced")
    syncs = node.counter("kvstore.full_sync.started")
    changes = node.counter("kvstore.members.peer_changes")

    # A live setting changes; the file still names n2.
    node.write(node.head + f'max_peers = 2\n[peers]\nn2 = "{n2.cmd_url},{n2.pub_url}"\n')
    node.hangup()
    wait_until(lambda: node.counter("kvstore.config.reloads") == 1, timeout=15,
               message=f"reloaded\n{node.log()}")
    assert "max_peers: 512 -> 2 (applied)" in node.log()
    with node.client() as client, pytest.raises(KvStoreRequestError, match="max_peers is 2"):
        client.add_peer("n4", "tcp://127.0.0.1:8")  # in force
    # The file drops n2, which the records still name.
    node.write(node.head + "max_peers = 2\n")
    node.hangup()
    wait_until(lambda: node.counter("kvstore.config.reloads") == 2, timeout=15,
               message=f"reloaded\n{node.log()}")
    assert node.peers() == {"n2", "n3"}
    with node.client() as client:
        held = client.dump(prefix="member/")
        assert {key: value.value for key, value in held.items()} == records
        assert client.counters()["kvstore.members.active"] == 3
    assert node.counter("kvstore.members.peer_changes") == changes, node.log()
    assert node.counter("kvstore.full_sync.started") == syncs, "a peering was restarted"
    assert "peer n2 removed" not in node.log() and "peer n3 removed" not in node.log()
    assert node.counter("kvstore.config.reload_failures") == 0
    # n2 is the records' now: when they stop naming it, it goes.
    with node.client() as client:
        client.set({member_key("n1"): make_value(_member("n1", node, peers=("n3",)), version=2,
                                                 originator_id="op")})
    wait_until(lambda: node.peers() == {"n3"}, timeout=15,
               message=f"n2 removed with its last naming record\n{node.log()}")

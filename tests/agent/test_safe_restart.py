"""Restarts never tear the network down (real `kvmesh node run --agent` processes, real
namespaces, SIGKILL): a node restarted with its peer unreachable leaves the kernel alone until a
peer sync completes, a data dir brings the configuration back, a whole-cluster crash loses no
acknowledged write, and a warm restart makes no southbound write while traffic flows."""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from kvmesh import launch
from kvmesh.agent.desired import encode_config_value
from kvmesh.agent.status import decode_status
from kvmesh.rest_client import AgentRest, RestError
from kvstore.client import KvStoreClient, KvStoreError
from kvstore.node_ports import free_tcp_port
from tests.netns import Netns, netns_available, temporary_netns
from tests.util import wait_until

pytestmark = [
    pytest.mark.netns,
    pytest.mark.skipif(not netns_available(), reason="needs root and iproute2 (ip netns)"),
]

VETH = {"linux/interface/veth0": {"type": "veth", "veth": {"peer": "veth1"},
                                  "addresses": ["10.61.0.1/24"]},
        "linux/interface/veth1": {"type": "veth", "veth": {"peer": "veth0"}},
        "linux/route/main/10.62.0.0/24/veth0": {"dst": "10.62.0.0/24", "dev": "veth0",
                                               "gateway": "10.61.0.2"}}


@dataclass
class Proc:
    """One `kvmesh node run` (with its agent when it has a namespace)."""

    name: str
    workdir: Path
    netns: Netns | None = None
    durable: bool = True
    peers: dict[str, str] = field(default_factory=dict)
    cmd_url: str = field(default_factory=lambda: f"tcp://127.0.0.1:{free_tcp_port()}")
    pub_url: str = field(default_factory=lambda: f"tcp://127.0.0.1:{free_tcp_port()}")
    http_port: int = field(default_factory=free_tcp_port)
    proc: launch.Launched | None = None

    @property
    def log_path(self) -> Path:
        return self.workdir / f"{self.name}.log"

    def start(self) -> None:
        agent = None
        if self.netns is not None:
            agent = launch.AgentOptions(linux_netns=self.netns.name,
                                        http=f"127.0.0.1:{self.http_port}",
                                        downstream_resync_s=3600)
        spec = launch.NodeSpec(
            self.name, self.cmd_url, self.pub_url, peers=dict(self.peers),
            data_dir=self.workdir / "data" / self.name if self.durable else None,
            ephemeral=not self.durable, agent=agent)
        self.proc = launch.start(spec, self.log_path)
        wait_until(self.answers, timeout=30, message=f"{self.name} answering\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:] if self.log_path.exists() else ""

    def answers(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"{self.name} exited:\n{self.log()}")
        try:
            with KvStoreClient(self.cmd_url, timeout_s=0.5) as client:
                client.node_info(refresh=True)
            return True
        except KvStoreError:
            return False

    def kill(self) -> None:
        """SIGKILL the node (its agent gets the parent-death signal and exits too)."""
        if self.proc is not None:
            self.proc.kill()
        wait_until(lambda: not self.agent_pids(), timeout=30, message="agent gone")

    def agent_pids(self) -> list[int]:
        wanted = f"127.0.0.1:{self.http_port}".encode()
        pids = []
        for proc_dir in Path("/proc").iterdir():
            if not proc_dir.name.isdigit():
                continue
            with contextlib.suppress(OSError):
                args = (proc_dir / "cmdline").read_bytes().split(b"\0")
                if b"agent" in args and b"run" in args and wanted in args:
                    pids.append(int(proc_dir.name))
        return pids

    def client(self) -> KvStoreClient:
        return KvStoreClient(self.cmd_url, timeout_s=5.0)

    def agent(self, path: str, method: str = "GET") -> Any:
        return AgentRest.at(f"127.0.0.1:{self.http_port}", timeout_s=10).json(method, path)

    def record(self, key: str) -> dict[str, Any] | None:
        try:
            with self.client() as client:
                found = client.get([key]).get(key)
        except KvStoreError:
            return None
        return decode_status(found.value if found else None)

    def device(self) -> dict[str, Any]:
        return self.record(f"node/{self.name}/device/linux") or {}

    def state_of(self, model_key: str) -> str | None:
        status = self.record(f"status/{self.name}/{model_key}")
        return None if status is None else str(status["state"])


@contextlib.contextmanager
def processes(*procs: Proc) -> Iterator[None]:
    try:
        yield
    finally:
        for proc in procs:
            with contextlib.suppress(Exception):
                proc.kill()
            for pid in proc.agent_pids():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


def set_config(via: Proc, node: str, values: dict[str, Any]) -> None:
    with via.client() as client:
        for model_key, value in values.items():
            client.set_key(f"config/{node}/{model_key}",
                           b"" if value is None else encode_config_value(value))


@contextlib.contextmanager
def configured_pair(tmp_path: Path, ns: Netns, durable_n1: bool) -> Iterator[tuple[Proc, Proc]]:
    """n1 (its agent in `ns`) peered with n2 (durable: it keeps the mesh's state while n1 is
    away), both running, n1's VETH values CONFIGURED; every process gone afterwards."""
    n2 = Proc("n2", tmp_path)
    n1 = Proc("n1", tmp_path, netns=ns, durable=durable_n1, peers={"n2": n2.cmd_url})
    n2.peers["n1"] = n1.cmd_url
    with processes(n1, n2):
        n2.start()
        n1.start()
        set_config(n1, "n1", VETH)
        wait_until(lambda: all_configured(n1, list(VETH)), timeout=60)
        yield n1, n2


def all_configured(proc: Proc, keys: list[str]) -> bool:
    return all(proc.state_of(k) == "CONFIGURED" for k in keys)


def southbound_writes(proc: Proc) -> dict[str, int]:
    return dict(proc.agent("/scheduler/stats")["scheduler"]["southbound_writes"])


def test_ephemeral_node_restarted_alone_touches_nothing_until_a_peer_syncs(
        tmp_path: Path) -> None:
    with temporary_netns("kvsr") as ns, configured_pair(tmp_path, ns, durable_n1=False) as (n1, n2):
        before = ns.dump()
        n1.kill()
        # While n1 is away the mesh changes: the route goes, a bridge comes.
        set_config(n2, "n1", {"linux/route/main/10.62.0.0/24/veth0": None,
                              "linux/interface/br1": {"type": "bridge"}})
        n2.kill()

        n1.start()  # EMPTY (no data dir), its only peer unreachable
        reason = wait_until(lambda: str(n1.device().get("reason", "")), timeout=60,
                            message="the reason n1's device is held is published")
        assert "EMPTY" in reason, reason
        assert n1.device()["state"] != "KNOWN"
        wait_until(lambda: southbound_writes_or_none(n1) is not None, timeout=30)
        history = n1.agent("/scheduler/txn-history")
        assert any("adopt linux" in (r.get("description") or "") for r in history), history
        assert ns.dump() == before, "nothing deleted, nothing changed"
        assert not any(southbound_writes(n1).values()), southbound_writes(n1)
        recon = subprocess.run([sys.executable, "-m", "kvmesh", "--url", n1.cmd_url, "recon",
                                "status", "n1"], capture_output=True, text=True, timeout=60)
        assert "held out of KNOWN" in recon.stdout, recon.stdout + recon.stderr

        n2.start()  # the peer is back: n1 syncs, and applies the mesh's state
        wait_until(lambda: n1.device().get("state") == "KNOWN", timeout=60,
                   message="KNOWN once a peer sync completed")
        wait_until(lambda: "br1" in ns.link_names(), timeout=30)
        wait_until(lambda: not any(r.get("dst") == "10.62.0.0/24" for r in ns.routes()),
                   timeout=30, message="the route deleted in the mesh is deleted now")
        assert "reason" not in n1.device()


def test_durable_node_restarted_alone_comes_back_with_its_config_untouched(
        tmp_path: Path) -> None:
    with temporary_netns("kvsr") as ns, configured_pair(tmp_path, ns, durable_n1=True) as (n1, n2):
        links_before = {link["ifname"]: link["ifindex"] for link in ns.ip_json("link")}
        before = ns.dump()
        n1.kill()
        n2.kill()
        n1.start()  # RESTORED from its data dir; its only peer unreachable
        with n1.client() as client:
            assert client.node_info(refresh=True).store_state == "RESTORED"
            assert set(client.dump(prefix="config/n1/")) == {f"config/n1/{k}" for k in VETH}
        wait_until(lambda: all_configured(n1, list(VETH)), timeout=60,
                   message="the restored values are reported CONFIGURED (adopted)")
        assert "RESTORED" in n1.device().get("reason", ""), n1.device()
        assert ns.dump() == before
        assert {link["ifname"]: link["ifindex"] for link in ns.ip_json("link")} == links_before
        assert not any(southbound_writes(n1).values()), "a warm restart writes nothing"
        # The operator says n1's store is the truth: the device reconciles without n2.
        forced = subprocess.run([sys.executable, "-m", "kvmesh", "--url", n1.cmd_url,
                                 "resync", "--node", "n1", "--force"],
                                capture_output=True, text=True, timeout=60)
        assert forced.returncode == 0 and "declared current" in forced.stderr, forced
        wait_until(lambda: n1.device().get("state") == "KNOWN", timeout=60)
        assert ns.dump() == before


# KVMESH_TEST_SEEDS=S1,S2,...: one crash round per seed; default: 2 rounds of random seeds. One
# test per round, so that two workers run them side by side (one test of both was the longest of
# the suite); the seeds are drawn when a round runs (xdist's workers must collect the same ids).
GIVEN_SEEDS = [int(s) for s in os.environ.get("KVMESH_TEST_SEEDS", "").split(",") if s]


@pytest.mark.parametrize("round_index", range(len(GIVEN_SEEDS) or 2))
def test_whole_cluster_crash_loses_no_acknowledged_write(tmp_path: Path,
                                                         round_index: int) -> None:
    """Three nodes, a writer doing `config set` through the CLI in a loop, SIGKILL of every
    node at a random moment; after the restart every acknowledged write is on every node and
    each namespace's kernel matches it."""
    seed = GIVEN_SEEDS[round_index] if GIVEN_SEEDS else random.randrange(2**32)
    try:
        crash_round(tmp_path / str(seed), seed)
    except AssertionError as exc:
        raise AssertionError(
            f"seed {seed}: {exc}\nrerun: KVMESH_TEST_SEEDS={seed} {sys.executable} -m pytest "
            f"'{__file__}::test_whole_cluster_crash_loses_no_acknowledged_write'") from None


def crash_round(workdir: Path, seed: int) -> None:
    rng = random.Random(seed)
    workdir.mkdir(parents=True)
    with contextlib.ExitStack() as stack:
        spaces = [stack.enter_context(temporary_netns("kvcr")) for _ in range(3)]
        nodes = [Proc(f"c{i + 1}", workdir, netns=ns) for i, ns in enumerate(spaces)]
        for i, node in enumerate(nodes):  # a chain: c1 - c2 - c3
            for j in (i - 1, i + 1):
                if 0 <= j < len(nodes):
                    node.peers[nodes[j].name] = nodes[j].cmd_url
        stack.enter_context(processes(*nodes))
        for node in nodes:
            node.start()
        acked: dict[tuple[str, str], int] = {}  # (node, bridge) -> last acknowledged mtu
        # Writes tried after the last acknowledgement of their key: one may have landed.
        unacked: dict[tuple[str, str], list[int]] = {}
        stop = threading.Event()

        def writer() -> None:
            wrng = random.Random(seed + 1)
            while not stop.is_set():
                target = wrng.choice(nodes)
                via = wrng.choice(nodes)
                bridge = f"br{wrng.randrange(4)}"
                mtu = wrng.randrange(1280, 9000)
                unacked.setdefault((target.name, bridge), []).append(mtu)
                result = subprocess.run(
                    [sys.executable, "-m", "kvmesh", "--url", via.cmd_url, "config", "set",
                     target.name, f"linux/interface/{bridge}",
                     json.dumps({"type": "bridge", "mtu": mtu})],
                    capture_output=True, text=True, timeout=60)
                if result.returncode == 0:
                    acked[(target.name, bridge)] = mtu  # one writer: the last ack wins
                    unacked[(target.name, bridge)] = []

        thread = threading.Thread(target=writer, daemon=True)
        thread.start()
        wait_until(lambda: len(acked) >= rng.randrange(3, 8), timeout=120,
                   message="some writes acknowledged")
        for node in nodes:
            node.proc.send_signal(signal.SIGKILL)  # type: ignore[union-attr]
        stop.set()
        thread.join(timeout=120)
        for node in nodes:
            node.kill()
        expected = dict(acked)
        for node in rng.sample(nodes, len(nodes)):
            node.start()

        def converged() -> bool:
            for node in nodes:
                with node.client() as client:
                    stored = client.dump(prefix="config/")
                for target, bridge in expected:
                    record = stored.get(f"config/{target}/linux/interface/{bridge}")
                    if record is None or not record.value:
                        return False
            return True

        wait_until(converged, timeout=60, message=f"acknowledged writes on every node: "
                                                  f"{expected}")
        for node in nodes:
            with node.client() as client:
                stored = client.dump(prefix=f"config/{node.name}/")
            for key, record in stored.items():
                bridge = key.rsplit("/", 1)[-1]
                mtu = decode_config(record.value)["mtu"]
                if (node.name, bridge) in expected:
                    # The last acknowledged write, or a later one whose ack the crash ate.
                    allowed = [expected[(node.name, bridge)], *unacked[(node.name, bridge)]]
                    assert mtu in allowed, (key, mtu, allowed)
                ns = node.netns
                assert ns is not None
                wait_until(kernel_mtu_is(ns, bridge, mtu), timeout=60,
                           message=f"{node.name}: kernel {bridge} has mtu {mtu}")
            for target, bridge in expected:
                if target == node.name:
                    assert f"config/{node.name}/linux/interface/{bridge}" in stored


def kernel_mtu_is(ns: Netns, link: str, mtu: int) -> Any:
    return lambda: (ns.link(link) or {}).get("mtu") == mtu


def decode_config(raw: bytes | None) -> dict[str, Any]:
    import msgpack
    decoded = msgpack.unpackb(raw or b"\x80", raw=False)
    assert isinstance(decoded, dict)
    return decoded


def test_warm_restart_writes_nothing_and_traffic_flows(tmp_path: Path) -> None:
    """Ping across a kvmesh-made veth pair (and bridge) while the agent, then the node, then
    both are killed and restarted: no packet lost, no southbound write by the restarted agent."""
    with temporary_netns("kvwr") as ns, temporary_netns("kvwp") as peer_ns:
        n2 = Proc("n2", tmp_path)
        n1 = Proc("n1", tmp_path, netns=ns, peers={"n2": n2.cmd_url})
        n2.peers["n1"] = n1.cmd_url
        with processes(n1, n2):
            n2.start()
            n1.start()
            values = {
                "linux/interface/br0": {"type": "bridge"},
                "linux/interface/kv0": {"type": "veth", "veth": {"peer": "kv1"},
                                        "addresses": ["10.77.0.1/24"]},
                "linux/interface/kv1": {"type": "veth", "veth": {"peer": "kv0"},
                                        "master": "br0"},
            }
            set_config(n1, "n1", values)
            wait_until(lambda: all_configured(n1, list(values)), timeout=60)
            # The far end: a veth of the test's own from the peer namespace into br0.
            ns.ip("link", "add", "h0", "type", "veth", "peer", "name", "h1", "netns",
                  peer_ns.name)
            ns.ip("link", "set", "h0", "master", "br0", "up")
            peer_ns.ip("addr", "add", "10.77.0.2/24", "dev", "h1")
            peer_ns.ip("link", "set", "h1", "up")
            wait_until(lambda: peer_ns.exec("ping", "-c", "1", "-W", "1", "10.77.0.1",
                                            check=False).returncode == 0, timeout=30)
            ping = subprocess.Popen(["ip", "netns", "exec", peer_ns.name, "ping", "-O", "-i",
                                     "0.01", "10.77.0.1"], stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True)
            try:
                # The agent alone (its node restarts it), then the node, then both.
                first = n1.agent_pids()
                for pid in first:
                    os.kill(pid, signal.SIGKILL)
                wait_until(lambda: n1.agent_pids() and n1.agent_pids() != first, timeout=60)
                wait_until(lambda: n1.device().get("state") == "KNOWN"
                           and southbound_writes_or_none(n1) is not None, timeout=60)
                assert not any(southbound_writes(n1).values()), southbound_writes(n1)
                n1.kill()
                n1.start()
                wait_until(lambda: southbound_writes_or_none(n1) is not None
                           and n1.device().get("state") == "KNOWN", timeout=60)
                assert not any(southbound_writes(n1).values()), southbound_writes(n1)
                n2.kill()
                n1.kill()
                n2.start()
                n1.start()
                wait_until(lambda: southbound_writes_or_none(n1) is not None
                           and n1.device().get("state") == "KNOWN", timeout=60)
                assert not any(southbound_writes(n1).values()), southbound_writes(n1)
            finally:
                ping.send_signal(signal.SIGINT)
                output, _ = ping.communicate(timeout=30)
            sent, received = map(int, re.search(r"(\d+) packets transmitted, (\d+) received",
                                               output).groups())  # type: ignore[union-attr]
            unanswered = re.findall(r"no answer yet for icmp_seq=(\d+)", output)
            assert sent > 100, output[-500:]
            # The only packet allowed without an answer is the one in flight at the SIGINT.
            assert sent - received <= 1 and unanswered in ([], [str(sent)]), output[-2000:]


def southbound_writes_or_none(proc: Proc) -> dict[str, int] | None:
    try:
        return southbound_writes(proc)
    except (OSError, RestError):  # the agent is (re)starting
        return None

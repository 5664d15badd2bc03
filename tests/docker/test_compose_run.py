"""The container image and docker-compose.yml, built and run for real (issue 30).

The `docker` tier: left out of the README's test command (`-m "not docker"`) and run by .ci/run
after it. It installs docker.io, docker-compose and debootstrap if missing, starts dockerd if none
runs (and stops it, restoring the FORWARD policy it changed), builds the image with
tools/build-image.sh and runs the compose file under a project name of its own (`down -v` at the
end, whatever happened). The tests run in file order: each starts from where the previous left the
cluster.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kvstore.node_ports import free_tcp_port
from kvstore.version import __version__
from tests.util import wait_until

REPO = Path(__file__).resolve().parents[2]
COMPOSE = REPO / "docker-compose.yml"
IMAGE = "kvmesh:latest"
NODES = ("n1", "n2", "n3")
HEALTHY_WITHIN_S = 60.0

pytestmark = [pytest.mark.docker, pytest.mark.process, pytest.mark.netns, pytest.mark.slow]

BRIDGE = {"type": "bridge"}
NFT_KEY = "linux/nftables/inet/kvmtest"
NFT_TABLE = {"chains": [{"name": "input", "type": "filter", "hook": "input", "prio": 0,
                         "policy": "accept"}],
             "rules": [{"chain": "input", "expr": [
                 {"match": {"op": "==", "left": {"payload": {"protocol": "tcp",
                                                             "field": "dport"}},
                            "right": 5999}}, {"drop": None}]}]}

# In a node's container: SIGKILL its agent (the node restarts it: a warm restart, the network
# namespace and everything the agent made in it kept); prints the pid killed.
KILL_AGENT = """
import os, signal
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        args = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\\0")
    except OSError:
        continue
    if b"agent" in args and b"run" in args:
        os.kill(int(pid), signal.SIGKILL)
        print(pid)
"""
# In a node's container: its agent's pid and scheduler's southbound writes since it started.
AGENT_WRITES = """
import json, os
from kvstore import KvStoreClient
from kvmesh.rest_client import AgentRest, find_agent
pids = []
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        args = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\\0")
    except OSError:
        continue
    if b"agent" in args and b"run" in args:
        pids.append(int(pid))
with KvStoreClient("tcp://127.0.0.1:60002", timeout_s=5) as client:
    address = find_agent(client, os.uname().nodename)
stats = json.loads(AgentRest(address).request("GET", "/scheduler/stats"))
print(json.dumps({"pids": pids, "writes": stats["scheduler"]["southbound_writes"]}))
"""


def sh(*args: str | Path, timeout: float = 300, check: bool = True,
       env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([str(a) for a in args], capture_output=True, text=True,
                            timeout=timeout, env=env, stdin=subprocess.DEVNULL)
    if check:
        assert result.returncode == 0, (f"{' '.join(map(str, args))} exited "
                                        f"{result.returncode}: {result.stderr[-3000:]}")
    return result


def docker_answers() -> bool:
    return sh("docker", "info", check=False, timeout=30).returncode == 0


def forward_policy() -> str | None:
    result = sh("iptables", "-S", "FORWARD", check=False)
    first = result.stdout.split("\n", 1)[0].split()
    return first[2] if result.returncode == 0 and first[:2] == ["-P", "FORWARD"] else None


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A running Docker engine: the one already there, else a dockerd of our own."""
    wanted = {"dockerd": "docker.io", "docker-compose": "docker-compose",
              "debootstrap": "debootstrap", "iptables": "iptables"}
    missing = sorted({pkg for cmd, pkg in wanted.items() if not shutil.which(cmd)})
    if missing:
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        sh("apt-get", "update", "-qq", env=env, timeout=600)
        sh("apt-get", "install", "-y", "-qq", *missing, env=env, timeout=900)
    if not shutil.which("docker"):
        pytest.fail("no docker client after installing docker.io")
    started: subprocess.Popen[bytes] | None = None
    policy = None
    if not docker_answers():
        policy = forward_policy()
        log = (tmp_path_factory.mktemp("dockerd") / "dockerd.log").open("wb")
        started = subprocess.Popen(["dockerd"], stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True)
        try:
            wait_until(docker_answers, timeout=60, interval=0.5, message="dockerd answers")
        except AssertionError:
            started.kill()
            started.wait()
            raise
    try:
        yield
    finally:
        if started is not None:
            started.terminate()
            try:
                started.wait(timeout=60)
            except subprocess.TimeoutExpired:
                started.kill()
                started.wait()
            if policy is not None and forward_policy() != policy:
                sh("iptables", "-P", "FORWARD", policy, check=False)


@pytest.fixture(scope="module")
def image(engine: None) -> str:
    sh(REPO / "tools" / "build-image.sh", timeout=1200)
    return IMAGE


class Compose:
    """docker-compose on the repository's file, under a project of its own."""

    def __init__(self) -> None:
        self.project = f"kvmeshtest{uuid.uuid4().hex[:8]}"
        self.env = {**os.environ, "KVMESH_N1_PORT": str(free_tcp_port())}

    def __call__(self, *args: str, timeout: float = 300,
                 check: bool = True) -> subprocess.CompletedProcess[str]:
        return sh("docker-compose", "-f", COMPOSE, "-p", self.project, *args,
                  timeout=timeout, check=check, env=self.env)

    def exec(self, service: str, *args: str, check: bool = True,
             timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return self("exec", "-T", service, *args, check=check, timeout=timeout)

    def kvmesh_json(self, service: str, *args: str) -> Any:
        return json.loads(self.exec(service, "kvmesh", "--json", *args).stdout)

    def container(self, service: str) -> str:
        return self("ps", "-q", service).stdout.strip()

    def health(self, service: str) -> str:
        container = self.container(service)
        if not container:
            return "absent"
        return sh("docker", "inspect", "-f", "{{.State.Health.Status}}", container,
                  check=False).stdout.strip()

    def all_healthy(self) -> bool:
        return all(self.health(n) == "healthy" for n in NODES)

    def wait_healthy(self, since: float) -> float:
        """Seconds from `since` until every node is healthy (fails past HEALTHY_WITHIN_S)."""
        wait_until(self.all_healthy, timeout=HEALTHY_WITHIN_S - (time.monotonic() - since),
                   interval=1.0, message="all three nodes healthy")
        return time.monotonic() - since

    def python(self, service: str, code: str) -> Any:
        return json.loads(self.exec(service, "python3", "-c", code).stdout)

    def resources(self) -> list[str]:
        """Containers, volumes and networks of this project still there."""
        label = f"label=com.docker.compose.project={self.project}"
        found = []
        for kind in (["ps", "-a"], ["volume", "ls"], ["network", "ls"]):
            found += sh("docker", *kind, "-q", "--filter", label).stdout.split()
        return found


@pytest.fixture(scope="module")
def compose(image: str) -> Iterator[Compose]:
    project = Compose()
    try:
        yield project
    finally:
        project("down", "-v", "--remove-orphans", "-t", "5", check=False, timeout=300)


def set_config(compose: Compose, key: str, value: dict[str, Any]) -> None:
    compose.exec("n1", "kvmesh", "config", "set", "n3", key, json.dumps(value))


def configured(compose: Compose, *keys: str) -> bool:
    rows = compose.kvmesh_json("n1", "status", "n3").get("n3", {})
    return all(rows.get(key, {}).get("state") == "CONFIGURED" for key in keys)


def n3_has_br0_and_table(compose: Compose) -> bool:
    link = compose.exec("n3", "ip", "link", "show", "br0", check=False)
    ruleset = compose.exec("n3", "nft", "list", "ruleset", check=False)
    return link.returncode == 0 and "table inet kvmtest" in ruleset.stdout


def test_image_holds_the_node_and_its_tools(image: str) -> None:
    labels = json.loads(sh("docker", "image", "inspect", "-f", "{{json .Config.Labels}}",
                           image).stdout)
    assert labels["org.opencontainers.image.version"] == __version__
    probe = ("import importlib.metadata as m, shutil, os;"
             "print(m.version('kvmesh'), os.getuid(),"
             " *(bool(shutil.which(t)) for t in ('ip', 'nft', 'dot')))")
    out = sh("docker", "run", "--rm", "--entrypoint", "python3", image, "-c", probe).stdout
    assert out.split() == [__version__, out.split()[1], "True", "True", "True"]
    assert out.split()[1] != "0", "the image's default user is not root"


def test_up_makes_three_healthy_nodes_within_60s(compose: Compose) -> None:
    started = time.monotonic()
    compose("up", "-d")
    compose.wait_healthy(started)


def test_config_set_on_n1_configures_n3_container(compose: Compose) -> None:
    set_config(compose, "linux/interface/br0", BRIDGE)
    set_config(compose, NFT_KEY, NFT_TABLE)
    wait_until(lambda: n3_has_br0_and_table(compose), timeout=60, interval=0.5,
               message="br0 and the nftables table in n3's container")
    wait_until(lambda: configured(compose, "linux/interface/br0", NFT_KEY), timeout=60,
               interval=0.5, message="kvmesh status n3 says CONFIGURED")
    # ... and nowhere else: each agent configures its own container.
    assert compose.exec("n2", "ip", "link", "show", "br0", check=False).returncode != 0


def test_restart_n2_heals_the_mesh_without_losing_an_acknowledged_write(
        compose: Compose) -> None:
    """n2 joins n1 and n3: while it restarts, writes to n1 are acknowledged; afterwards every one
    is on n3, and the three stores are equal."""
    restart = threading.Thread(target=lambda: compose("restart", "n2"))
    acknowledged: list[str] = []
    restart.start()
    try:
        while restart.is_alive() or len(acknowledged) < 3:
            key = f"heal/k{len(acknowledged)}"
            if compose.exec("n1", "kvmesh", "key", "set", key, "v",
                            check=False).returncode == 0:
                acknowledged.append(key)
    finally:
        restart.join()
    assert len(acknowledged) >= 3

    def on_n3() -> bool:
        return set(compose.kvmesh_json("n3", "key", "dump", "--prefix", "heal/")) \
            >= set(acknowledged)

    wait_until(on_n3, timeout=60, interval=0.5, message="every acknowledged write on n3")

    def stores_equal() -> bool:
        # The written keys and the desired state (status keys churn: TTL refreshes).
        replies = [compose.exec(n, "kvmesh", "signature", "--prefix", prefix, check=False)
                   for prefix in ("heal/", "config/") for n in NODES]
        return all(r.returncode == 0 for r in replies) and len({r.stdout for r in replies}) == 2

    wait_until(stores_equal, timeout=60, interval=0.5, message="equal signatures")


def test_warm_restart_of_n3s_agent_writes_nothing(compose: Compose) -> None:
    before = compose.python("n3", AGENT_WRITES)
    assert compose.exec("n3", "python3", "-c", KILL_AGENT).stdout.split()

    def restarted() -> dict[str, Any] | None:
        result = compose.exec("n3", "python3", "-c", AGENT_WRITES, check=False)
        if result.returncode != 0:
            return None  # the agent is starting
        state = json.loads(result.stdout)
        fresh = state["pids"] and set(state["pids"]).isdisjoint(before["pids"])
        return state if fresh and configured(compose, "linux/interface/br0", NFT_KEY) else None

    after = wait_until(restarted, timeout=60, interval=1.0, message="n3's agent restarted")
    assert after is not None
    assert not any(after["writes"].values()), after["writes"]
    assert n3_has_br0_and_table(compose)


def test_down_and_up_keeps_the_configuration(compose: Compose) -> None:
    compose("down", "-t", "20")
    started = time.monotonic()
    compose("up", "-d")
    compose.wait_healthy(started)
    # The desired state came back from n3's own volume: its agent applies it in the new container.
    wait_until(lambda: n3_has_br0_and_table(compose), timeout=60, interval=0.5,
               message="n3's configuration back after down/up")
    assert configured(compose, "linux/interface/br0", NFT_KEY)
    assert set(compose.kvmesh_json("n3", "key", "dump", "--prefix", "heal/"))


def test_down_v_removes_everything_it_made(compose: Compose) -> None:
    assert compose.resources()
    compose("down", "-v", "-t", "20")
    assert compose.resources() == []


def test_namespace_tests_pass_beside_a_running_dockerd(engine: None) -> None:
    """dockerd loads br_netfilter (bridged frames then pass through iptables) and, on a machine
    where it had to turn IP forwarding on, sets the FORWARD policy to DROP (set here for the run
    when an earlier dockerd found forwarding on already): namespace tests whose traffic crosses
    bridges still pass beside it."""
    assert docker_answers()
    assert Path("/proc/sys/net/bridge/bridge-nf-call-iptables").read_text().strip() == "1"
    policy = forward_policy()
    assert policy is not None
    tests = [
        "tests/test_cluster_isolated.py::"
        "test_isolated_cluster_talks_over_the_bridge_and_down_removes_everything",
        "tests/agent/test_safe_restart.py::test_warm_restart_writes_nothing_and_traffic_flows",
    ]
    sh("iptables", "-P", "FORWARD", "DROP")
    try:
        result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                                 *tests], cwd=REPO, capture_output=True, text=True, timeout=900)
    finally:
        sh("iptables", "-P", "FORWARD", policy)
    assert result.returncode == 0, result.stdout[-5000:]
    assert " passed" in result.stdout and "skipped" not in result.stdout.split("\n")[-2]

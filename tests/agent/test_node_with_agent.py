"""`kvmesh node run --agent`: the node supervises its agent process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from kvmesh import launch
from kvmesh.agent.supervisor import local_url
from kvmesh.rest_client import AgentRest, RestError
from kvstore.client import KvStoreClient
from tests.kvstore.conftest import Keyring, free_port
from tests.netns import netns_available, temporary_netns
from tests.util import agent_pids_serving, wait_until


def test_local_url_maps_wildcards_to_loopback() -> None:
    assert local_url("tcp://0.0.0.0:60002") == "tcp://127.0.0.1:60002"
    assert local_url("tcp://*:5") == "tcp://127.0.0.1:5"
    assert local_url("tcp://10.1.2.3:5") == "tcp://10.1.2.3:5"


def agent_pid(http_port: int) -> int | None:
    try:
        AgentRest.at(f"127.0.0.1:{http_port}", timeout_s=1).json("GET", "/scheduler/stats")
    except RestError:
        return None
    return next(iter(agent_pids(http_port)), None)


def agent_pids(http_port: int) -> list[int]:
    """Agent processes serving REST on `http_port` (found through /proc)."""
    return agent_pids_serving(f"127.0.0.1:{http_port}")


@pytest.mark.netns
@pytest.mark.skipif(not netns_available(), reason="needs root and iproute2 (ip netns)")
def test_node_supervises_restarts_and_stops_its_agent(tmp_path: Path) -> None:
    """Secured: the supervised agent authenticates with its node's key and may publish its
    node's own keys (node/s1/agent), which an unbound operator could not."""
    http_port = free_port()
    keyring = Keyring(tmp_path)
    keyring.authorize("watcher", "reader")
    cmd_url = f"tcp://127.0.0.1:{free_port()}"
    with temporary_netns("kvs") as ns:
        node = launch.start(launch.NodeSpec(
            "s1", cmd_url, f"tcp://127.0.0.1:{free_port()}", ephemeral=True,
            key_file=keyring.secret("s1"), authorized_keys=keyring.auth,
            agent=launch.AgentOptions(assume_current=True, linux_netns=ns.name,
                                      http=f"127.0.0.1:{http_port}")), tmp_path / "node.log")
        try:
            first = wait_until(lambda: agent_pid(http_port) or 0, timeout=60,
                               message="agent started by the node")

            def registered() -> bool:
                with KvStoreClient(cmd_url, curve=keyring.curve("watcher", "s1")) as client:
                    return "node/s1/agent" in client.get(["node/s1/agent"])

            wait_until(registered, timeout=30, message="the agent wrote node/s1/agent")
            os.kill(first, signal.SIGKILL)
            second = wait_until(lambda: (agent_pid(http_port) or first) != first
                                and agent_pid(http_port), timeout=60,
                                message="agent restarted after it died")
            assert node.stop(signal.SIGTERM, timeout=60) == 0
            wait_until(lambda: not Path(f"/proc/{second}").exists(), timeout=30,
                       message="agent stopped with its node")
        finally:
            node.kill()
            for pid in agent_pids(http_port):
                os.kill(pid, signal.SIGKILL)
    assert "agent exited" in (tmp_path / "node.log").read_text(errors="replace")


def test_agent_options_without_agent_are_refused() -> None:
    # The CLI's own option checks: `kvmesh node run` is called as a user would, not launched.
    result = subprocess.run(
        [sys.executable, "-m", "kvmesh", "node", "run", "--name", "x", "--linux"],
        capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "need --agent" in result.stderr


def test_agent_dials_the_bound_port_of_a_wildcard_cmd_url(tmp_path: Path) -> None:
    """`--cmd-url tcp://127.0.0.1:*`: the supervisor hands the agent the port the node bound."""
    from kvstore.client import KvStoreClient

    log_path = tmp_path / "node.log"
    node = launch.start(launch.NodeSpec("wild", "tcp://127.0.0.1:*", "tcp://127.0.0.1:*",
                                        ephemeral=True, agent=launch.AgentOptions()), log_path)
    try:
        ready = wait_until(
            lambda: next((line for line in log_path.read_text().splitlines()
                          if line.startswith("node wild ready")), None),
            timeout=30, message="node ready line")
        assert ready is not None
        cmd_url = ready.split("cmd=")[1].split()[0]
        assert not cmd_url.endswith(":*")

        def agent_registered() -> bool:
            # The agent follows the node's publications: it found the node.
            with KvStoreClient(cmd_url, timeout_s=1.0) as client:
                return client.counters()["kvstore.subscriptions"] >= 1

        wait_until(agent_registered, timeout=30, message=f"agent of wild on {cmd_url}")
        assert node.stop(signal.SIGTERM, timeout=60) == 0
    finally:
        node.kill()


def test_an_agent_whose_node_is_gone_stops_by_itself(tmp_path: Path) -> None:
    """The parent-death signal once failed to reach an agent whose node was SIGKILLed (a CI
    run): the orphan went on applying, and the restarted node would have started a second
    agent. An agent started by a node (KVMESH_AGENT_PARENT_PID) also stops when that node is
    no longer its parent: here it never was."""
    from kvmesh.agent.supervisor import PARENT_PID_ENV

    agent = launch.start(launch.AgentSpec("orphan", f"tcp://127.0.0.1:{free_port()}"),
                         tmp_path / "agent.log", env={PARENT_PID_ENV: str(os.getpid() + 10**7)})
    try:
        assert agent.wait(timeout=60) == 0, agent.log()
    finally:
        agent.kill()
    assert "that started this agent is gone: stopping" in agent.log()

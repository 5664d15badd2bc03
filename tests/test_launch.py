"""The launcher's library API for one process (kvmesh/launch.py)."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import pytest

from kvmesh import launch
from kvmesh.cluster import ClusterState, NodeInfo, node_command
from kvstore.node_ports import free_tcp_port

KVMESH = [sys.executable, "-m", "kvmesh"]


def test_an_insecure_ephemeral_node() -> None:
    spec = launch.NodeSpec("a", "tcp://127.0.0.1:1", "tcp://127.0.0.1:2", ephemeral=True,
                           peers={"b": "tcp://127.0.0.1:3", "c": "tcp://127.0.0.1:4,tcp://x:5"})
    assert spec.argv() == [*KVMESH, "node", "run", "--name", "a", "--cmd-url",
                           "tcp://127.0.0.1:1", "--pub-url", "tcp://127.0.0.1:2", "--ephemeral",
                           "--insecure", "--peer", "b=tcp://127.0.0.1:3",
                           "--peer", "c=tcp://127.0.0.1:4,tcp://x:5"]


def test_a_secured_durable_node_with_its_agent_in_a_namespace(tmp_path: Path) -> None:
    agent = launch.AgentOptions(http="10.0.0.1:8080", linux=True, vpp_socket="/run/vpp.sock",
                                http_cert=tmp_path / "c.pem", http_key=tmp_path / "k.pem",
                                http_token_file=tmp_path / "token", downstream_resync_s=3600,
                                assume_current=True)
    spec = launch.NodeSpec("a", "tcp://10.0.0.1:1", "tcp://10.0.0.1:2",
                           data_dir=tmp_path / "data", config=tmp_path / "a.toml",
                           key_file=tmp_path / "a.key_secret", authorized_keys=tmp_path / "auth",
                           agent=agent, netns="lab-a")
    assert spec.argv() == [
        "ip", "netns", "exec", "lab-a", *KVMESH, "node", "run", "--name", "a",
        "--cmd-url", "tcp://10.0.0.1:1", "--pub-url", "tcp://10.0.0.1:2",
        "--data-dir", str(tmp_path / "data"), "--config", str(tmp_path / "a.toml"),
        "--key-file", str(tmp_path / "a.key_secret"), "--authorized-keys", str(tmp_path / "auth"),
        "--agent", "--http", "10.0.0.1:8080", "--linux", "--vpp-socket", "/run/vpp.sock",
        "--http-cert", str(tmp_path / "c.pem"), "--http-key", str(tmp_path / "k.pem"),
        "--http-token-file", str(tmp_path / "token"), "--downstream-resync-s", "3600",
        "--assume-current"]


def test_a_data_dir_and_ephemeral_contradict_each_other() -> None:
    with pytest.raises(ValueError, match="a data dir or ephemeral, not both"):
        launch.NodeSpec("a", "u", "p", data_dir="/d", ephemeral=True).argv()


def test_an_agent_on_its_own() -> None:
    spec = launch.AgentSpec("a", "tcp://127.0.0.1:1",
                            launch.AgentOptions(linux_netns="ns1", http="127.0.0.1:8"))
    assert spec.argv() == [*KVMESH, "--url", "tcp://127.0.0.1:1", "agent", "run", "--name",
                           "a", "--http", "127.0.0.1:8", "--linux-netns", "ns1"]


def test_the_cluster_builds_its_nodes_through_the_launcher(tmp_path: Path) -> None:
    state = ClusterState(str(tmp_path), "chain", {
        "n1": NodeInfo("tcp://127.0.0.1:1", "tcp://127.0.0.1:2", "kvmesh-n1", "127.0.0.1:3",
                       data_dir=str(tmp_path / "data" / "n1"), peers=["n2"],
                       key_file=str(tmp_path / "n1.key_secret")),
        "n2": NodeInfo("tcp://127.0.0.1:4", "tcp://127.0.0.1:5", None, None, peers=["n1"],
                       leaf=True)})
    argv = node_command("n1", state)
    assert argv[:len(KVMESH)] == KVMESH  # loopback: not inside the namespace
    joined = " ".join(argv)
    assert f"--data-dir {tmp_path / 'data' / 'n1'}" in joined
    assert f"--authorized-keys {tmp_path / 'authorized-keys'}" in joined
    assert "--peer n2=tcp://127.0.0.1:4" in joined
    assert "--agent --http 127.0.0.1:3 --linux-netns kvmesh-n1" in joined
    assert "--insecure" not in argv and "--leaf" not in argv
    assert "--insecure" in node_command("n2", state, agent=False)
    assert "--peer n1=tcp://127.0.0.1:1 --leaf --agent" in " ".join(node_command("n2", state))


def test_start_wait_and_stop_a_node(tmp_path: Path) -> None:
    cmd_url = f"tcp://127.0.0.1:{free_tcp_port()}"
    node = launch.start(launch.NodeSpec("a", cmd_url, f"tcp://127.0.0.1:{free_tcp_port()}",
                                        ephemeral=True), tmp_path / "a.log")
    try:
        node.wait_answering(cmd_url, timeout=30)
        assert launch.node_ready(cmd_url)
        assert (tmp_path / "a.log").stat().st_mode & 0o077 == 0  # logs carry configuration
        assert node.stop(signal.SIGTERM) == 0 and not node.alive()
    finally:
        node.kill()
    assert "node a ready" in node.log()


def test_a_node_that_exits_is_reported_with_its_log(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("ttl_decrement_ms = -1\n")
    cmd_url = f"tcp://127.0.0.1:{free_tcp_port()}"
    node = launch.start(launch.NodeSpec("a", cmd_url, f"tcp://127.0.0.1:{free_tcp_port()}",
                                        ephemeral=True, config=bad), tmp_path / "a.log")
    try:
        with pytest.raises(launch.LaunchError, match=r"(?s)the process exited.*ttl_decrement_ms"):
            node.wait_answering(cmd_url, timeout=30)
    finally:
        node.kill()


def test_a_planted_log_symlink_is_refused(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("")
    (tmp_path / "a.log").symlink_to(victim)
    with pytest.raises(OSError, match="symlink"):
        launch.start(launch.NodeSpec("a", "u", "p", ephemeral=True), tmp_path / "a.log")
    assert victim.read_text() == ""

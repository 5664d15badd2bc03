"""The node as a process: clean shutdown on signals, configuration errors, busy ports."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from kvstore.client import make_value
from tests.kvstore.conftest import REPO, Mesh, free_port, wait_for_value


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_shuts_down_cleanly_with_exit_code_0(mesh: Mesh, sig: int) -> None:
    node = mesh.start(mesh.allocate("n"))
    with node.client() as client:
        client.set({"k": make_value(b"v", version=1, originator_id="n")})
    assert node.stop(sig) == 0
    log = node.log()
    assert "stopped" in log
    assert "Traceback" not in log


def run_node(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kvmesh", "node", "run", *args,
         *(() if "--data-dir" in args else ("--ephemeral",))],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("ttl_decrement_ms = -1\n", "ttl_decrement_ms"),
        ("sync_interval_s = 'often'\n", "sync_interval_s"),
        ("no_such_knob = 1\n", "no_such_knob"),
        ("this is not toml\n", "invalid TOML"),
        ("flood_msg_per_sec = 10\n", "flood_msg_burst"),
        ("max_message_bytes = true\n", "max_message_bytes"),
        ("[peers]\nx = 'http://nope'\n", "peers.x"),
    ],
)
def test_invalid_config_exits_2_with_one_clear_line(
    tmp_path: Path, content: str, expected: str
) -> None:
    config = tmp_path / "bad.toml"
    config.write_text(content)
    result = run_node("--name", "n", "--config", str(config))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert expected in lines[0]
    assert str(config) in lines[0]


def test_missing_config_file_and_bad_peer_argument(tmp_path: Path) -> None:
    result = run_node("--name", "n", "--config", str(tmp_path / "absent.toml"))
    assert result.returncode == 2 and "cannot read" in result.stderr
    result = run_node("--name", "n", "--peer", "no-equals-sign")
    assert result.returncode == 2 and "NAME=CMD_URL" in result.stderr
    result = run_node("--name", "n", "--peer", "n=tcp://127.0.0.1:1")
    assert result.returncode == 2 and "itself" in result.stderr


def test_busy_port_is_a_clear_error(mesh: Mesh) -> None:
    first = mesh.start(mesh.allocate("first"))
    result = run_node(
        "--name", "second", "--cmd-url", first.cmd_url, "--pub-url",
        f"tcp://127.0.0.1:{free_port()}", "--insecure",
    )
    assert result.returncode == 1
    assert "cannot bind" in result.stderr
    assert first.answers()


def test_config_file_values_are_used(mesh: Mesh) -> None:
    node = mesh.allocate("cfg", ttl_decrement_ms=300, ttl_threshold_ms=0, zmq_hwm=1000)
    peer = mesh.allocate("peer")
    mesh.start(peer)
    mesh.start(node, peers=[peer])
    with node.client() as client:
        client.set({"t": make_value(b"v", version=1, originator_id="cfg", ttl_ms=10_000)})

    # The hop removed the configured 300 ms (plus the time in flight).
    wait_for_value([peer], "t", lambda v: v is not None and v.ttl_ms <= 9_700)

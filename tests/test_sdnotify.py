"""sd_notify (kvstore/sdnotify.py) against a real NOTIFY_SOCKET datagram socket: PID 1 here is not
systemd, so the test plays its part, with a real `kvmesh node run --agent` process."""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from kvstore import KvStoreClient, KvStoreError
from kvstore.node_ports import free_tcp_port
from kvstore.sdnotify import ServiceNotifier, socket_address, watchdog_interval_s
from tests.util import wait_until


def test_socket_address_forms() -> None:
    assert socket_address("/run/systemd/notify") == "/run/systemd/notify"
    assert socket_address("@kvmesh/notify") == b"\0kvmesh/notify"
    for bad in ("", "@", "relative/path"):
        assert socket_address(bad) is None


def test_watchdog_interval_is_half_the_timeout_and_only_for_its_pid() -> None:
    assert watchdog_interval_s({"WATCHDOG_USEC": "3000000"}, 42) == 1.5
    assert watchdog_interval_s({"WATCHDOG_USEC": "3000000", "WATCHDOG_PID": "42"}, 42) == 1.5
    assert watchdog_interval_s({"WATCHDOG_USEC": "3000000", "WATCHDOG_PID": "41"}, 42) is None
    assert watchdog_interval_s({"WATCHDOG_USEC": "0"}, 42) is None
    assert watchdog_interval_s({"WATCHDOG_USEC": "soon"}, 42) is None
    assert watchdog_interval_s({}, 42) is None


def test_without_notify_socket_nothing_is_sent() -> None:
    notifier = ServiceNotifier.from_env({})
    assert not notifier.enabled and not notifier.send("READY=1")


@pytest.fixture
def receiver(tmp_path: Path) -> Iterator[tuple[socket.socket, str]]:
    """systemd's end: an abstract datagram socket with a unique name."""
    name = f"@kvmesh-test-{uuid.uuid4().hex}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(b"\0" + name[1:].encode())
    try:
        yield sock, name
    finally:
        sock.close()


def recv(sock: socket.socket, timeout: float) -> str | None:
    sock.settimeout(timeout)
    try:
        return sock.recv(4096).decode()
    except TimeoutError:
        return None


def test_keep_alives_stop_while_the_event_loop_is_blocked(
        receiver: tuple[socket.socket, str]) -> None:
    """WATCHDOG=1 comes from the loop itself: a loop stuck in a blocking call sends none."""
    sock, name = receiver
    notifier = ServiceNotifier(socket_address(name), watchdog_s=0.02)
    stamps: list[float] = []
    real_send = notifier.send

    def send(message: str) -> bool:
        if message == "WATCHDOG=1":
            stamps.append(time.monotonic())
        return real_send(message)

    notifier.send = send  # type: ignore[method-assign]

    async def main() -> None:
        stopped = asyncio.Event()
        notifier.serving(stopped.set)
        while len(stamps) < 3:
            await asyncio.sleep(0.01)
        time.sleep(0.5)  # the fault: a blocking call on the loop's thread
        count = len(stamps)
        while len(stamps) < count + 3:
            await asyncio.sleep(0.01)
        os.kill(os.getpid(), signal.SIGTERM)  # the node's stop handler, wrapped
        await asyncio.wait_for(stopped.wait(), 5)

    asyncio.run(main())
    gaps = [b - a for a, b in itertools.pairwise(stamps)]
    assert max(gaps) >= 0.45, gaps  # nothing sent while blocked
    assert sorted(gaps)[len(gaps) // 2] < 0.2  # and steadily otherwise
    messages = []
    while (message := recv(sock, 0.5)) is not None:
        messages.append(message)
    assert messages.count("WATCHDOG=1") == len(stamps)
    assert messages[-1].startswith("STOPPING=1")


def rest_listens(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def run_until_stopped(sock: socket.socket, name: str, tmp_path: Path, run: int) -> None:
    """One life of a node with its agent under a fake systemd: READY=1 only once the node answers
    and the agent has started (its REST API listens), WATCHDOG=1 all along, STOPPING=1 at
    SIGTERM, exit 0."""
    cmd_url = f"tcp://127.0.0.1:{free_tcp_port()}"
    http_port = free_tcp_port()
    env = {**os.environ, "NOTIFY_SOCKET": name, "WATCHDOG_USEC": "400000"}
    log = (tmp_path / f"node-{run}.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "kvmesh", "node", "run", "--name", "sd1", "--cmd-url", cmd_url,
         "--pub-url", f"tcp://127.0.0.1:{free_tcp_port()}", "--insecure",
         "--data-dir", str(tmp_path / "data"), "--agent", "--http", f"127.0.0.1:{http_port}"],
        env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        before_ready: list[str] = []
        deadline = time.monotonic() + 60
        while (message := recv(sock, max(0.0, deadline - time.monotonic()))) is not None:
            if message.startswith("READY=1"):
                break
            before_ready.append(message)
        assert message is not None and message.startswith("READY=1"), "no READY=1 within 60 s"
        # At READY=1 the node answers and its agent has started: its REST API listens.
        assert rest_listens(http_port)
        with KvStoreClient(cmd_url, timeout_s=5) as client:
            assert client.node_info().name == "sd1"
        assert all(m == "WATCHDOG=1" for m in before_ready)
        keep_alives = [recv(sock, 2.0) for _ in range(5)]
        assert keep_alives == ["WATCHDOG=1"] * 5
        proc.send_signal(signal.SIGTERM)
        after = wait_until(lambda: recv(sock, 0.2) or "", timeout=10, message="STOPPING=1")
        while after == "WATCHDOG=1":
            after = recv(sock, 5.0) or ""
        assert after.startswith("STOPPING=1")
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()


@pytest.mark.process
def test_node_with_agent_notifies_ready_watchdog_and_stopping(
        receiver: tuple[socket.socket, str], tmp_path: Path) -> None:
    sock, name = receiver
    run_until_stopped(sock, name, tmp_path, 1)
    # Restarted on its durable store (what systemd's Restart= does): READY=1 again.
    run_until_stopped(sock, name, tmp_path, 2)


@pytest.mark.process
def test_node_without_systemd_runs_as_before(tmp_path: Path) -> None:
    """No NOTIFY_SOCKET: no notifier, the node answers and stops on SIGTERM with code 0."""
    cmd_url = f"tcp://127.0.0.1:{free_tcp_port()}"
    env = {k: v for k, v in os.environ.items() if k != "NOTIFY_SOCKET"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "kvmesh", "node", "run", "--name", "sd2", "--cmd-url", cmd_url,
         "--pub-url", f"tcp://127.0.0.1:{free_tcp_port()}", "--insecure", "--ephemeral"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        def answers() -> bool:
            try:
                with KvStoreClient(cmd_url, timeout_s=1) as client:
                    client.node_info()
                return True
            except KvStoreError:
                return False

        wait_until(answers, timeout=30, message="node answers")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

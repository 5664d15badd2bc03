"""Client side of the emulator: the control channel, and starting/stopping the emulator process."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import Any


class ControlError(RuntimeError):
    """The emulator refused a control request."""


class EmulatorControl:
    """Synchronous client of the emulator's JSON control socket (one request per connection)."""

    def __init__(self, control_path: str, timeout: float = 30.0) -> None:
        self.control_path = control_path
        self.timeout = timeout

    def request(self, **request: Any) -> dict[str, Any]:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(self.timeout)
            sock.connect(self.control_path)
            sock.sendall(json.dumps(request).encode() + b"\n")
            data = b""
            while not data.endswith(b"\n"):
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
        reply: dict[str, Any] = json.loads(data)
        if not reply.get("ok"):
            raise ControlError(reply.get("error", "unknown error"))
        return reply

    def ping(self) -> int:
        return int(self.request(op="ping")["pid"])

    def fail(self, message: str, retval: int = -1, count: int | None = 1) -> None:
        """Answer the next `count` calls of `message` with `retval` (None: until cleared)."""
        self.request(op="fail", message=message, retval=retval, count=count)

    def delay(self, message: str, seconds: float, count: int | None = 1) -> None:
        """Hold the replies to the next `count` calls of `message` (or "*") for `seconds`."""
        self.request(op="delay", message=message, seconds=seconds, count=count)

    def drop_on(self, message: str, count: int = 1) -> None:
        """Close the connection instead of answering the next call of `message`."""
        self.request(op="drop", message=message, count=count)

    def clear_faults(self) -> None:
        self.request(op="clear_faults")

    def disconnect(self) -> int:
        """Close every API connection now."""
        return int(self.request(op="disconnect")["dropped"])

    def restart(self, downtime: float = 0.0, wait: bool = True) -> None:
        """Emulate a VPP restart: connections drop and all state is lost."""
        self.request(op="restart", downtime=downtime, wait=wait)

    def state(self) -> dict[str, Any]:
        state: dict[str, Any] = self.request(op="state")["state"]
        return state

    def counters(self) -> dict[str, int]:
        counters: dict[str, int] = self.request(op="counters")["counters"]
        return counters


class EmulatorProcess:
    """`kvmesh vpp-emulator` as a child process, optionally inside a network namespace.

    Use as a context manager; the process is stopped with SIGTERM (then SIGKILL) on exit.
    """

    def __init__(
        self,
        socket_path: str,
        netns: str | None = None,
        host_check: bool = True,
        startup_timeout: float = 30.0,
        api_dir: str | None = None,
    ) -> None:
        self.socket_path = socket_path
        self.api_dir = api_dir
        self.control_path = socket_path + ".ctl"
        self.netns = netns
        self.host_check = host_check
        self.startup_timeout = startup_timeout
        self.process: subprocess.Popen[bytes] | None = None
        self.control = EmulatorControl(self.control_path)

    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", "kvmesh", "vpp-emulator", "--socket", self.socket_path]
        if not self.host_check:
            cmd.append("--no-host-check")
        if self.api_dir:
            cmd += ["--api-dir", self.api_dir]
        if self.netns:
            cmd = ["ip", "netns", "exec", self.netns, *cmd]
        return cmd

    def start(self) -> EmulatorProcess:
        for path in (self.socket_path, self.control_path):
            Path(path).unlink(missing_ok=True)
        self.process = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + self.startup_timeout
        while not self._accepts():
            if self.process.poll() is not None:
                raise RuntimeError(f"vpp-emulator exited with status {self.process.returncode}")
            if time.monotonic() > deadline:
                self.stop()
                raise TimeoutError(f"vpp-emulator not ready on {self.socket_path}")
            time.sleep(0.02)
        return self

    def _accepts(self) -> bool:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            try:
                sock.connect(self.socket_path)
            except OSError:
                return False
        return True

    def stop(self, timeout: float = 10.0) -> None:
        proc = self.process
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.process = None
        for path in (self.socket_path, self.control_path):
            if os.path.exists(path):
                Path(path).unlink(missing_ok=True)

    def __enter__(self) -> EmulatorProcess:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

"""`kvmesh node run --agent`: the node runs its agent beside it, in a process of its own.

A separate process, so a southbound call that hangs or crashes never stalls flooding. The
supervisor starts the agent once the node answers, restarts it with backoff if it dies, and stops
it (SIGTERM, then SIGKILL) when the node shuts down.
"""

from __future__ import annotations

import ctypes
import logging
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence

from kvstore import KvStoreClient, KvStoreError

log = logging.getLogger("kvmesh.agent.supervisor")

# Set for the agent to the node's pid: the agent stops once the node is no longer its parent, in
# case the parent-death signal does not reach it (`kvmesh.agent.agent.run_agent`).
PARENT_PID_ENV = "KVMESH_AGENT_PARENT_PID"
# Set for the agent, when the supervisor wants to know, to a pipe's write end: the agent writes one
# byte there once started (southbounds registered, REST API bound), then closes it.
STARTED_FD_ENV = "KVMESH_AGENT_STARTED_FD"


def parent_pid_from_env() -> int | None:
    """The node's pid the supervisor gave its agent (PARENT_PID_ENV), or None."""
    raw = os.environ.get(PARENT_PID_ENV, "")
    return int(raw) if raw.isdigit() else None


def tell_supervisor_started() -> None:
    """In the agent, once started: one byte to the supervisor's pipe (STARTED_FD_ENV), if any."""
    raw = os.environ.pop(STARTED_FD_ENV, "")
    if raw.isdigit():
        try:
            os.write(int(raw), b"1")
            os.close(int(raw))
        except OSError:
            pass  # the supervisor is gone: nobody to tell


def _die_with_parent() -> None:
    """In the child, before exec: get SIGTERM when the parent (the node) dies."""
    libc = ctypes.CDLL(None, use_errno=True)
    pr_set_pdeathsig = 1
    libc.prctl(pr_set_pdeathsig, signal.SIGTERM, 0, 0, 0)


def local_url(bound_url: str) -> str:
    """A URL to reach a socket bound to `bound_url` from this host (wildcards -> loopback)."""
    for wildcard in ("://0.0.0.0:", "://*:", "://[::]:"):
        if wildcard in bound_url:
            return bound_url.replace(wildcard, "://127.0.0.1:", 1)
    return bound_url


class AgentSupervisor:
    """`on_started` is called once, from the supervisor's thread, when the first agent has
    started (it says so through a pipe: `tell_supervisor_started`)."""

    def __init__(self, node_name: str, node_url: str, agent_args: Sequence[str],
                 backoff: tuple[float, float] = (0.5, 30.0), stop_timeout: float = 20.0,
                 on_started: Callable[[], None] | None = None) -> None:
        self.node_name = node_name
        self.node_url = local_url(node_url)
        self.agent_args = list(agent_args)
        self.backoff = backoff
        self.stop_timeout = stop_timeout
        self.on_started = on_started
        self.restarts = 0
        self._proc: subprocess.Popen[bytes] | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="agent-supervisor", daemon=True)

    def command(self) -> list[str]:
        return [sys.executable, "-m", "kvmesh", "--url", self.node_url, "agent", "run",
                "--name", self.node_name, *self.agent_args]

    def start(self, bound_url: str | None = None) -> None:
        """Start supervising; `bound_url`: the node's command socket as bound (LAST_ENDPOINT),
        which resolves a `*` port the configured URL leaves open."""
        if bound_url is not None:
            self.node_url = local_url(bound_url)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=self.stop_timeout)
            except subprocess.TimeoutExpired:
                log.warning("agent did not stop in %.0fs: killing it", self.stop_timeout)
                proc.kill()
                proc.wait(timeout=10)
        if self._thread.is_alive():
            self._thread.join(timeout=self.stop_timeout + 15)

    def _node_ready(self) -> bool:
        try:
            with KvStoreClient(self.node_url, timeout_s=1.0) as client:
                client.node_info(refresh=True)
            return True
        except KvStoreError:
            return False

    def _report_started(self, started_fd: int, proc: subprocess.Popen[bytes]) -> None:
        """Call `on_started` once the agent spawned as `proc` writes to `started_fd` (an end of
        file instead: it died first, and its restart tries again)."""
        try:
            while not self._stop.is_set() and proc.poll() is None:
                readable, _, _ = select.select([started_fd], [], [], 0.2)
                if readable:
                    if os.read(started_fd, 1) and self.on_started is not None:
                        callback, self.on_started = self.on_started, None
                        callback()
                    return
        finally:
            os.close(started_fd)

    def _run(self) -> None:
        while not self._stop.is_set() and not self._node_ready():
            self._stop.wait(0.1)
        delay = self.backoff[0]
        while not self._stop.is_set():
            started = time.monotonic()
            # The agent inherits stdout/stderr: its log lines go where the node's go. Its own
            # session keeps a terminal's Ctrl-C away from it (the supervisor stops it, in order);
            # the parent-death signal stops it if the node is killed outright.
            env = {**os.environ, PARENT_PID_ENV: str(os.getpid())}
            started_r, started_w = os.pipe() if self.on_started is not None else (-1, -1)
            if started_w >= 0:
                env[STARTED_FD_ENV] = str(started_w)
            try:
                self._proc = subprocess.Popen(
                    self.command(), stdin=subprocess.DEVNULL, env=env, start_new_session=True,
                    preexec_fn=_die_with_parent, pass_fds=(started_w,) if started_w >= 0 else ())
            finally:
                if started_w >= 0:
                    os.close(started_w)
            log.info("agent started (pid %d)", self._proc.pid)
            if started_r >= 0:
                self._report_started(started_r, self._proc)
            code = self._proc.wait()
            if self._stop.is_set():
                return
            if time.monotonic() - started > 60:
                delay = self.backoff[0]  # it ran fine for a while: not a crash loop
            log.warning("agent exited with code %d; restarting in %.1fs", code, delay)
            self.restarts += 1
            if self._stop.wait(delay):
                return
            delay = min(self.backoff[1], delay * 2)

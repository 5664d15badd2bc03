"""`kvmesh node run --agent`: the node runs its agent beside it, in a process of its own.

A separate process, so a southbound call that hangs or crashes never stalls flooding. The
supervisor starts the agent once the node answers, restarts it with backoff if it dies, and stops
it (SIGTERM, then SIGKILL) when the node shuts down.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence

from kvmesh.agent.keys import NODE
from kvstore import KvStoreClient, KvStoreError

log = logging.getLogger("kvmesh.agent.supervisor")

# Set for the agent to the node's pid: the agent stops once the node is no longer its parent, in
# case the parent-death signal does not reach it (`kvmesh.agent.agent.run_agent`).
PARENT_PID_ENV = "KVMESH_AGENT_PARENT_PID"


def parent_pid_from_env() -> int | None:
    """The node's pid the supervisor gave its agent (PARENT_PID_ENV), or None."""
    raw = os.environ.get(PARENT_PID_ENV, "")
    return int(raw) if raw.isdigit() else None


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


# The agent options that make it announce itself under node/<name>/ (a device's state, its REST
# address): without any, it has nothing to announce, and it counts as started once spawned.
ANNOUNCING_OPTIONS = ("--linux", "--linux-netns", "--vpp-socket", "--http")


class AgentSupervisor:
    """`on_started` is called once, from the supervisor's thread, when the first agent has
    started: it announced itself (a new record under `node/<name>/`) since it was spawned."""

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

    def _announcements(self) -> dict[str, tuple[int, str, int | None]] | None:
        """What the agent has announced under node/<name>/ (identity of each record), or None
        when the node does not answer."""
        try:
            with KvStoreClient(self.node_url, timeout_s=1.0) as client:
                values = client.hash_dump(f"{NODE}{self.node_name}/")
        except KvStoreError:
            return None
        return {k: (v.version, v.originator_id, v.hash) for k, v in values.items()}

    def _report_started(self, before: dict[str, tuple[int, str, int | None]] | None,
                        proc: subprocess.Popen[bytes]) -> None:
        """Call `on_started` once the agent spawned as `proc` has announced itself."""
        if self.on_started is None:
            return
        if any(arg in ANNOUNCING_OPTIONS for arg in self.agent_args):
            while not self._stop.is_set() and proc.poll() is None:
                now, earlier = self._announcements() or {}, before or {}
                if any(earlier.get(key) != identity for key, identity in now.items()):
                    break  # a record made or changed since the spawn (not one expiring)
                self._stop.wait(0.1)
            else:
                return  # stopped, or the agent died first: its restart tries again
        callback, self.on_started = self.on_started, None
        callback()

    def _run(self) -> None:
        while not self._stop.is_set() and not self._node_ready():
            self._stop.wait(0.1)
        delay = self.backoff[0]
        while not self._stop.is_set():
            started = time.monotonic()
            before = self._announcements() if self.on_started is not None else None
            # The agent inherits stdout/stderr: its log lines go where the node's go. Its own
            # session keeps a terminal's Ctrl-C away from it (the supervisor stops it, in order);
            # the parent-death signal stops it if the node is killed outright.
            env = {**os.environ, PARENT_PID_ENV: str(os.getpid())}
            self._proc = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL, env=env,
                                          start_new_session=True, preexec_fn=_die_with_parent)
            log.info("agent started (pid %d)", self._proc.pid)
            self._report_started(before, self._proc)
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

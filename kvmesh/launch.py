"""Start one kvmesh process: a KvStore node (with or without its supervised agent) or an agent.

This is the launcher's library API for one process (docs/testing.md "Starting processes"): the
cluster launcher (`kvmesh.cluster`), the demo, the tests and the benchmarks all start nodes and
agents here, so the options of `kvmesh node run` / `kvmesh agent run` are written in one place.
A spec (`NodeSpec`, `AgentSpec`) says what to run and renders its argv; `start` runs it with
its output appended to a log file (created 0600, a planted symlink refused: logs carry
configuration values) and returns a `Launched` handle (pid, log, stop / kill / wait).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kvstore import ClientCurve, KvStoreClient, KvStoreError, safefs

KVMESH = (sys.executable, "-m", "kvmesh")


class LaunchError(RuntimeError):
    """A process that exited or did not answer in time; the message ends with its log."""


def pid_alive(pid: int) -> bool:
    """Does process `pid` still run (a process of another user counts; a zombie child of ours,
    which still answers kill(0), does not)?"""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        done, _status = os.waitpid(pid, os.WNOHANG)
        return done == 0
    except ChildProcessError:  # not our child
        return True


@dataclass
class AgentOptions:
    """The agent's options, the same for `node run --agent` and `agent run`."""

    http: str | None = None  # ADDR:PORT of the REST API
    linux: bool = False  # the Linux southbound in the agent's own namespace
    linux_netns: str | None = None  # ... or in this namespace
    vpp_socket: str | None = None
    http_cert: str | os.PathLike[str] | None = None
    http_key: str | os.PathLike[str] | None = None
    http_token_file: str | os.PathLike[str] | None = None
    downstream_resync_s: float | None = None
    heartbeat_ms: int | None = None
    assume_current: bool = False

    def args(self) -> list[str]:
        args: list[str] = []
        if self.http:
            args += ["--http", self.http]
        if self.linux:
            args.append("--linux")
        if self.linux_netns:
            args += ["--linux-netns", self.linux_netns]
        if self.vpp_socket:
            args += ["--vpp-socket", self.vpp_socket]
        for option, value in (("--http-cert", self.http_cert), ("--http-key", self.http_key),
                              ("--http-token-file", self.http_token_file)):
            if value is not None:
                args += [option, os.fspath(value)]
        if self.downstream_resync_s is not None:
            args += ["--downstream-resync-s", f"{self.downstream_resync_s:g}"]
        if self.heartbeat_ms is not None:
            args += ["--heartbeat-ms", str(self.heartbeat_ms)]
        if self.assume_current:
            args.append("--assume-current")
        return args


@dataclass
class NodeSpec:
    """One `kvmesh node run`. Without `key_file` the node runs `--insecure` (loopback only).
    Its store is `data_dir`, or memory only with `ephemeral`; with neither, the node decides
    (a `data_dir` in the `config` file, else its default)."""

    name: str
    cmd_url: str
    pub_url: str
    peers: Mapping[str, str] = field(default_factory=dict)  # name -> CMD_URL[,PUB_URL]
    data_dir: str | os.PathLike[str] | None = None
    ephemeral: bool = False
    config: str | os.PathLike[str] | None = None  # a TOML file (cluster.write_node_config)
    key_file: str | os.PathLike[str] | None = None
    authorized_keys: str | os.PathLike[str] | None = None
    agent: AgentOptions | None = None  # also run (and supervise) the node's agent
    netns: str | None = None  # run the process inside this network namespace
    # A KvStore leaf: with its agent, its filters default to what the agent needs
    # (docs/kvstore.md, "Leaf nodes"); one or two core peers, never a transit.
    leaf: bool = False

    def argv(self) -> list[str]:
        if self.ephemeral and self.data_dir is not None:
            raise ValueError(f"node {self.name}: a data dir or ephemeral, not both")
        args = [*KVMESH, "node", "run", "--name", self.name,
                "--cmd-url", self.cmd_url, "--pub-url", self.pub_url]
        if self.data_dir is not None:
            args += ["--data-dir", os.fspath(self.data_dir)]
        if self.ephemeral:
            args.append("--ephemeral")
        if self.config is not None:
            args += ["--config", os.fspath(self.config)]
        if self.key_file is not None:
            args += ["--key-file", os.fspath(self.key_file)]
            if self.authorized_keys is not None:
                args += ["--authorized-keys", os.fspath(self.authorized_keys)]
        else:
            args.append("--insecure")
        for peer, url in self.peers.items():
            args += ["--peer", f"{peer}={url}"]
        if self.leaf:
            args.append("--leaf")
        if self.agent is not None:
            args += ["--agent", *self.agent.args()]
        return in_netns(self.netns, args)


@dataclass
class AgentSpec:
    """One `kvmesh agent run` for the node whose command socket is `node_url`."""

    name: str
    node_url: str
    options: AgentOptions = field(default_factory=AgentOptions)
    netns: str | None = None

    def argv(self) -> list[str]:
        return in_netns(self.netns, [*KVMESH, "--url", self.node_url, "agent", "run",
                                     "--name", self.name, *self.options.args()])


def in_netns(netns: str | None, args: list[str]) -> list[str]:
    return args if netns is None else ["ip", "netns", "exec", netns, *args]


@dataclass
class Launched:
    """A started process (ours: `wait` reaps it)."""

    argv: list[str]
    proc: subprocess.Popen[bytes]
    log_path: Path | None

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def poll(self) -> int | None:
        return self.proc.poll()

    def send_signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def log(self, tail: int | None = None) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        text = self.log_path.read_text(errors="replace")
        return text if tail is None else text[-tail:]

    def wait(self, timeout: float | None = None) -> int:
        return self.proc.wait(timeout=timeout)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> int:
        """Send `sig` (if it still runs) and wait for the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout=timeout)

    def kill(self, timeout: float = 10.0) -> None:
        """SIGKILL it (if it still runs) and reap it."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=timeout)

    def terminate(self, timeout: float = 10.0) -> int:
        """SIGTERM, then SIGKILL if it is still there after `timeout`; the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.wait_or_kill(timeout)

    def wait_or_kill(self, timeout: float = 10.0) -> int:
        """Its exit code, waiting `timeout` for it to exit, then SIGKILLing it."""
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill(timeout)
            return self.proc.wait()

    def wait_until(self, check: Callable[[], bool], timeout: float, what: str) -> None:
        """Until `check()` holds; LaunchError (with the log's tail) if the process exits
        first or the time is up."""
        deadline = time.monotonic() + timeout
        while not check():
            if not self.alive():
                raise LaunchError(f"{what}: the process exited ({self.proc.returncode}):\n"
                                  f"{self.log(tail=4000)}")
            if time.monotonic() > deadline:
                raise LaunchError(f"timed out after {timeout:g}s waiting for {what}:\n"
                                  f"{self.log(tail=4000)}")
            time.sleep(0.05)

    def wait_answering(self, cmd_url: str, curve: ClientCurve | None = None,
                       initial_sync: bool = False, timeout: float = 30.0) -> None:
        """Until the node on `cmd_url` answers (and, with `initial_sync`, has finished its
        initial peer sync)."""
        self.wait_until(lambda: node_ready(cmd_url, curve, initial_sync), timeout,
                        f"node on {cmd_url}")


def node_ready(url: str, curve: ClientCurve | None = None, initial_sync: bool = False) -> bool:
    """Does the node on `url` answer (and has it finished its initial sync, if asked)?"""
    try:
        with KvStoreClient(url, timeout_s=0.5, curve=curve) as client:
            info = client.node_info(refresh=True)
    except KvStoreError:
        return False
    return not initial_sync or bool(info.initial_sync_done)


def start(spec: NodeSpec | AgentSpec | Sequence[str], log: str | os.PathLike[str] | None, *,
          env: Mapping[str, str] | None = None, cwd: str | os.PathLike[str] | None = None,
          new_session: bool = False, preexec_fn: Callable[[], None] | None = None) -> Launched:
    """Start `spec` (or an argv: a VPP emulator, say) with stdout and stderr appended to `log`
    (None: discarded) and stdin closed. `env`: added to this process's environment.
    `new_session`: the process outlives this one's terminal (a cluster's). `preexec_fn`: run
    in the child before it executes (resource limits)."""
    argv = list(spec) if isinstance(spec, Sequence) else spec.argv()
    out = subprocess.DEVNULL if log is None else safefs.open_log(log)
    try:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, cwd=cwd,
                                env=None if env is None else {**os.environ, **env},
                                start_new_session=new_session, preexec_fn=preexec_fn)
    finally:
        if log is not None:
            os.close(out)
    return Launched(argv, proc, None if log is None else Path(log))

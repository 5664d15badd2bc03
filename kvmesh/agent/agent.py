"""The node agent: desired state from the local KvStore -> KVScheduler -> southbounds.

The agent wires its parts together, each with one job (and at most one lock):

  NorthboundFollower  (agent-nb)      follows `config/<node>/` (dump, then the stream),
                                       coalesces updates into transactions, re-dumps
                                       periodically, runs the periodic downstream resync;
  StatusPublishing    (agent-status)  publishes value statuses and device states under
                                       `status/<node>/` and `node/<node>/` (typed events,
                                       kvmesh.agent.events), refreshing their TTLs;
  ConfirmWatcher      (agent-confirm) rolls back revisions not confirmed in time;
  Devices + Reconciliation             the southbound plugins (southbound.plugin_api) and the
                                       reconciliation services run for each (re)connected
                                       device (recon-* threads);
  RestBackend, MetricsScrape           the REST API and /metrics;
  MemberTokensFollower (agent-members) the REST tokens the mesh vouches for (`member/`), with
                                       the REST API only;
plus the scheduler's own worker and the southbound watchers. Each thread owns its KvStore
client (ZeroMQ sockets are not thread-safe).

A device (the Linux namespace, the VPP connection) becomes KNOWN only after the reconciliation
services ran for it in priority order; until then the agent holds back northbound changes for
that device's values, so old state is never pushed over new.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvmesh.agent.config import AgentConfig
from kvmesh.agent.confirm import ConfirmWatcher
from kvmesh.agent.counters import AgentCounters
from kvmesh.agent.devices import Device, Devices
from kvmesh.agent.events import AgentAnnounced, ValueStatusChanged
from kvmesh.agent.northbound import NorthboundFollower
from kvmesh.agent.recon import ReconciliationManager
from kvmesh.agent.reconcile import Reconciliation
from kvmesh.agent.rest_backend import RestBackend
from kvmesh.agent.scrape import MetricsScrape
from kvmesh.agent.status_loop import StatusPublishing
from kvstore import version
from scheduler import KVScheduler

if TYPE_CHECKING:
    from kvmesh.agent.http_api import ConsoleView, HttpApi
    from southbound.linux import LinuxPlugin
    from southbound.plugin_api import SouthboundPlugin
    from southbound.vpp import VppPlugin

    # mypy checks here that both plugins implement the protocol the agent uses.
    def _conforms(linux: LinuxPlugin, vpp: VppPlugin) -> list[SouthboundPlugin]:
        return [linux, vpp]

__all__ = ["Agent", "AgentConfig", "run_agent"]

log = logging.getLogger("kvmesh.agent")


class Agent:
    def __init__(self, config: AgentConfig, scheduler: KVScheduler | None = None) -> None:
        self.config = config
        self.scheduler = scheduler or KVScheduler()
        self.recon = ReconciliationManager()
        self._counters = AgentCounters()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.scrape = MetricsScrape(config, self.scheduler, self.recon, self._counters)
        self.status = StatusPublishing(config, self._counters, self.scrape.metrics)
        self.devices = Devices(config, self.scheduler, self.recon, self._counters, self._stop)
        self.northbound = NorthboundFollower(config, self.scheduler, self._counters,
                                             self.status.post, self.devices.may_apply,
                                             self.devices.periodic_resync)
        self.reconciliation = Reconciliation(config, self.scheduler, self.recon, self.devices,
                                             self.northbound, self.status.post)
        self.confirm = ConfirmWatcher(config, self._counters, self.scrape.metrics)
        self.rest = RestBackend(self.scheduler, self._counters, self.northbound,
                                self.reconciliation, self.scrape)
        self._http: HttpApi | None = None
        self._token_file: tuple[Path, str] | None = None  # a token this agent made, to remove
        self._unwatch: Callable[[], None] | None = None

    @property
    def counters(self) -> dict[str, int]:
        return self._counters.snapshot()

    @property
    def http_address(self) -> tuple[str, int] | None:
        return None if self._http is None else self._http.address

    def start(self) -> None:
        self._unwatch = self.scheduler.watch_value_status(
            lambda status: self.status.post(ValueStatusChanged(status)))
        self.reconciliation.register()
        self._spawn("agent-status", self.status.run)
        self._spawn("agent-nb", self.northbound.run)
        self._spawn("agent-confirm", self.confirm.run)
        self._start_southbounds()
        if not self.devices.all():
            # Nothing to reconcile: load the desired state right away (every value will be
            # reported UNIMPLEMENTED, which tells the operator what is missing).
            log.warning("no southbound enabled (--linux, --linux-netns, --vpp-socket)")
            self._spawn("agent-load", lambda stop: self.northbound.load_once())
        record = self._start_http(self.config.http) if self.config.http is not None else {}
        # Every agent announces itself (`node/<node>/agent`: its heartbeat, kvmesh.agent.liveness),
        # with the versions its node speaks (docs/compatibility.md): `kvmesh status` and the
        # operator see a mixed-release mesh.
        self.status.post(AgentAnnounced({**record, "version": version.__version__,
                                         "protocol": version.PROTOCOL_VERSION}))

    def stop(self) -> None:
        self._stop.set()
        self.status.wake()
        if self._http is not None:
            self._http.close()
        if self._token_file is not None:
            from kvmesh.agent.http_token import remove_token_file

            remove_token_file(*self._token_file)
        for thread in self._threads:
            thread.join(timeout=10)
        self.recon.close()
        self.devices.close()
        if self._unwatch is not None:
            self._unwatch()
        self.scheduler.close()

    def wait_stopped(self, timeout: float | None = None) -> bool:
        return self._stop.wait(timeout)

    def add_device(self, name: str, plugin: SouthboundPlugin) -> Device:
        """`plugin` (its descriptors registered on this agent's scheduler) as device `name`."""
        return self.devices.add(name, plugin)

    def _start_southbounds(self) -> None:
        cfg = self.config
        if cfg.linux or cfg.linux_netns is not None:
            import southbound.linux

            state = {"state_dir": cfg.linux_state_dir} if cfg.linux_state_dir else {}
            self.add_device("linux", southbound.linux.register(
                self.scheduler, netns=cfg.linux_netns, **state))
        if cfg.vpp_socket is not None:
            import southbound.vpp

            self.add_device("vpp", southbound.vpp.register(self.scheduler,
                                                           socket=cfg.vpp_socket))

    def _start_http(self, address: tuple[str, int]) -> dict[str, Any]:
        """The REST API; without a configured token, the agent's own token, written to the
        token directory for the local CLI once the address is known. Returns what the agent's
        record says about it."""
        from kvmesh.agent.http_api import HttpApi
        from kvmesh.agent.http_security import load_security
        from kvmesh.agent.http_token import token_dir, token_name, write_token_file
        from kvmesh.agent.member_tokens import MemberTokens, MemberTokensFollower

        cfg = self.config
        members = MemberTokens()
        self._spawn("agent-members", MemberTokensFollower(cfg.kv_url, members).run)
        security = load_security(cfg.http_cert, cfg.http_key, cfg.http_token_file,
                                 cfg.http_read_token_file, cfg.http_public_reads, members)
        self._http = HttpApi(self.rest, *address, security=security, node=cfg.node,
                             kv_url=cfg.kv_url, max_streams=cfg.http_max_streams,
                             console=_console)
        host, port = self._http.address
        if security.generated_token is not None:
            path = token_dir() / token_name(host, port)
            write_token_file(path, security.generated_token)
            self._token_file = (path, security.generated_token)
            log.info("REST API token (made at start) in %s", path)
        scheme = "https" if security.tls else "http"
        log.info("agent HTTP API on %s://%s:%d (bearer token required for writes%s)", scheme,
                 host, port, "" if cfg.http_public_reads else " and reads")
        if host in ("0.0.0.0", "::", ""):
            # Bound to every address: announce a name other nodes can resolve.
            host = socket.gethostname()
        record: dict[str, Any] = {"http": f"{host}:{port}"}
        if security.tls:
            record["tls"] = True
        return record

    def _spawn(self, name: str, target: Callable[[threading.Event], None]) -> None:
        """A thread running `target(stop)`; its failure stops the agent."""
        def run() -> None:
            try:
                target(self._stop)
            except Exception:
                log.exception("agent thread %s died; stopping the agent", name)
                self._stop.set()

        thread = threading.Thread(target=run, name=name, daemon=True)
        self._threads.append(thread)
        thread.start()


def _console(*args: Any, **kwargs: Any) -> ConsoleView:
    """The console (`kvmesh.agent.ui.console`), imported when the REST API makes it: on the
    first `/ui` request, not at start."""
    from kvmesh.agent.ui.console import Console

    return Console(*args, **kwargs)


STOP_DEADLINE_S = 10.0


class StopDeadline:
    """Once armed, exits the process (code 1) unless it has ended within `seconds`.

    A stopping agent whose thread hangs (a call into its dead node, a stuck southbound) must not
    outlive its node: the restarted node would start a second agent beside it. Exiting here is
    a crash, which the agent is built to survive (nothing it has not made durable is lost)."""

    def __init__(self, seconds: float = STOP_DEADLINE_S) -> None:
        self.seconds = seconds
        self._timer: threading.Timer | None = None

    def arm(self) -> None:
        if self._timer is None:
            self._timer = threading.Timer(self.seconds, self._expire)
            self._timer.daemon = True
            self._timer.start()

    def _expire(self) -> None:
        log.error("the agent did not stop within %g s: exiting", self.seconds)
        logging.shutdown()
        os._exit(1)


class SignalStop:
    """What SIGTERM/SIGINT do to a running agent: ask it to stop, and arm the deadline.

    No lock may be taken in a signal handler: it runs in the main thread between two bytecodes,
    possibly while that thread holds an Event's lock inside `Event.wait()` (`Event.set()` would
    then wait for itself forever: an agent that outlived its node, seen in CI) or threading's
    own locks while starting a thread (a `threading.Timer` would). So the handler appends to a
    list, which `run_agent`'s loop reads, and arms the kernel's alarm as the deadline: SIGALRM's
    default action ends the process even if its main thread never runs Python again."""

    def __init__(self, deadline_s: float = STOP_DEADLINE_S) -> None:
        self.deadline_s = deadline_s
        self._signals: list[int] = []

    def handle(self, signum: int, _frame: object) -> None:
        self._signals.append(signum)
        signal.alarm(int(self.deadline_s) + 1)

    def requested(self) -> bool:
        return bool(self._signals)


def run_agent(config: AgentConfig, stop: threading.Event,
              deadline: StopDeadline | None = None,
              on_started: Callable[[], None] | None = None,
              stop_requested: Callable[[], bool] = lambda: False) -> int:
    """Run an agent until `stop` is set or `stop_requested()` (a signal handler's flag: it may
    not set an Event) is true, or the agent fails; returns the exit code. Whatever ends it, the
    process is gone within `deadline` after (`StopDeadline`). `on_started`: called once the
    agent has started (its southbounds registered, its REST API bound)."""
    deadline = deadline or StopDeadline()
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    agent = Agent(config)
    try:
        agent.start()
    except Exception as exc:
        log.error("agent failed to start: %s", exc)
        deadline.arm()
        agent.stop()
        return 1
    if on_started is not None:
        on_started()
    while not stop.wait(0.2) and not stop_requested():
        if agent.wait_stopped(0):
            deadline.arm()
            agent.stop()
            return 1
        if config.parent_pid is not None and os.getppid() != config.parent_pid:
            # The parent-death signal normally stops us first; this catches it missing (an
            # orphan agent would go on applying, and the restarted node would start a second).
            log.warning("the node process (pid %d) that started this agent is gone: stopping",
                        config.parent_pid)
            break
    deadline.arm()
    agent.stop()
    return 0

"""The node agent: desired state from the local KvStore -> KVScheduler -> southbounds.

Threads (each owns its KvStore client: ZeroMQ sockets are not thread-safe):
  agent-nb       follows `config/<node>/` (dump, then the stream), coalesces updates into
                 transactions, re-dumps periodically and runs the periodic downstream resync;
  agent-status   publishes value statuses and device states under `status/<node>/` and
                 `node/<node>/`, refreshing their TTLs;
  recon-*        the reconciliation framework's runs, one per (re)connected device;
plus the scheduler's own worker and the southbound watchers.

A device (the Linux namespace, the VPP connection) becomes KNOWN only after the reconciliation
services ran for it in priority order; until then the agent holds back northbound changes for
that device's values, so old state is never pushed over new.
"""

from __future__ import annotations

import logging
import os
import queue
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from prometheus_client.core import Metric

from kvmesh.agent.config_writer import (
    WriteRefused,
    desired_values,
    mark,
    node_revisions,
    who_am_i,
    write_node_change,
)
from kvmesh.agent.desired import DesiredState, Model
from kvmesh.agent.keys import agent_key, config_prefix, device_key, device_of, status_prefix
from kvmesh.agent.metrics import (
    AgentMetrics,
    MetricFamily,
    flat_counters,
    flood_batch_histogram,
    kvstore_families,
)
from kvmesh.agent.recon import (
    CancelToken,
    DeviceState,
    ReconciliationManager,
    ReconciliationService,
    ResultIntent,
    RunOutcome,
)
from kvmesh.agent.revisions import ROLLED_BACK, ConfirmTimer, revision_key, rollback_values
from kvmesh.agent.status import StatusPublisher
from kvstore import KvStoreClient, KvStoreError, StoreState, store_is_current, why_not_current
from scheduler import (
    KVScheduler,
    RetryPolicy,
    SchedulerClosedError,
    TransactionError,
    ValueState,
    ValueStatus,
)

log = logging.getLogger("kvmesh.agent")

#: Reconciliation stages: descriptors are grouped by what they configure, and each group is
#: resynced in this order (interfaces before what sits on them, routes last).
STAGES: tuple[tuple[int, str, tuple[str, ...]], ...] = (
    (10, "interfaces", ("interface",)),
    (20, "l2-domains", ("bd", "bridge-domain")),
    (30, "routes", ("route",)),
)
DEFAULT_RETRY = RetryPolicy(period=1.0, max_count=10, exp_backoff=True)
#: Priority of the built-in service that waits for the KvStore's initial sync.
KVSTORE_SYNC_PRIORITY = 0
CONFIRM_POLL_S = 0.5  # how often the agent looks for revisions due for rollback


@dataclass(frozen=True)
class AgentConfig:
    node: str
    kv_url: str
    linux_netns: str | None = None
    linux: bool = False
    linux_state_dir: str | None = None  # None: the plugin's default (/var/lib/kvmesh/linux)
    vpp_socket: str | None = None
    http: tuple[str, int] | None = None
    # REST API TLS and bearer token (kvmesh.agent.http_server; docs/security.md).
    http_cert: str | None = None
    http_key: str | None = None
    http_token_file: str | None = None  # None: the agent makes a token (kvmesh.agent.http_token)
    http_read_token_file: str | None = None  # a reader's token: reads only
    http_public_reads: bool = False  # reads without a token (writes always need one)
    coalesce_s: float = 0.05  # longest a change waits for others to join its transaction
    quiet_s: float = 0.002  # a batch is applied once the stream is quiet this long
    repair_delay_s: float = 0.2  # drift reported by a southbound is repaired this much later
    max_batch: int = 5000
    redump_s: float = 15.0  # the guard against a missed publication (what it found is counted)
    downstream_resync_s: float = 300.0
    status_ttl_ms: int = 300_000
    # The store is asked whether it is current this often while the agent waits for it.
    store_poll_s: float = 0.2
    # Treat the store as current from the start (`--assume-current`): see `store_is_current`.
    assume_current: bool = False
    reconnect_backoff_s: tuple[float, float] = (0.5, 30.0)
    # The node process that started this agent (`kvmesh node run --agent`): the agent stops
    # once it is no longer its parent (see `run_agent`). None: started by hand.
    parent_pid: int | None = None
    # Failed values are retried (exponential backoff from 1 s, 10 tries) before turning FAILED;
    # the periodic downstream resync catches whatever is left.
    retry: RetryPolicy = DEFAULT_RETRY


class Plugin(Protocol):
    def close(self) -> None: ...


@dataclass
class Device:
    name: str
    plugin: Plugin
    descriptor_names: tuple[str, ...]
    reconnect: Callable[[float], None] | None = None


def stage_of(descriptor_name: str) -> str:
    """The reconciliation stage of a descriptor, from the last word of its name."""
    last = descriptor_name.rsplit("-", 1)[-1]
    for _prio, stage, suffixes in STAGES:
        if last in suffixes or any(descriptor_name.endswith(f"-{s}") for s in suffixes):
            return stage
    return "other"


class Agent:
    def __init__(self, config: AgentConfig, scheduler: KVScheduler | None = None) -> None:
        self.config = config
        self.scheduler = scheduler or KVScheduler()
        self.recon = ReconciliationManager()
        self.desired = DesiredState(config.node)
        self.publisher = StatusPublisher(config.node, ttl_ms=config.status_ttl_ms)
        self.devices: dict[str, Device] = {}
        self.counters: dict[str, int] = {
            "nb_transactions": 0, "nb_transaction_errors": 0, "nb_values_applied": 0,
            "redumps": 0, "downstream_resyncs": 0, "kvstore_errors": 0,
            "statuses_published": 0, "drift_repairs": 0, "nb_values_refused": 0,
            "redump_repairs": 0, "metrics_kvstore_unreachable": 0,
            "confirm_rollbacks": 0, "rest_transactions": 0, "rest_transaction_errors": 0,
        }
        self._lock = threading.RLock()  # guards desired + counters + _failures
        # Serialises northbound transactions (the NB loop's and REST POST /configuration), so
        # a batch taken from the mesh before a REST apply is not committed over it.
        self._txn_lock = threading.Lock()
        # ("status", ValueStatus) | ("device"/"agent", record) | ("refusal", (model key, reason))
        self._status_queue: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._initial_load_done = threading.Event()
        self._http: Any = None
        self._token_file: tuple[Path, str] | None = None  # a token this agent made, to remove
        self._failures: dict[str, int] = {}  # consecutive failed reconciliations per device
        self._repairs_pending: set[str] = set()
        self._unwatch: Callable[[], None] | None = None
        # An operator declared the store current (`--assume-current`, `resync --force`).
        self._assume_current = threading.Event()
        if config.assume_current:
            self._assume_current.set()
        self.store_state: StoreState | None = None  # as last read from the KvStore
        # Why a device is held out of KNOWN, while it is (published with its state).
        self._hold_reasons: dict[str, str] = {}
        self.metrics = AgentMetrics(self._metric_snapshot)
        self._txn_seen_start: float | None = None

    # -- lifecycle --------------------------------------------------------------------------------

    def start(self) -> None:
        self._unwatch = self.scheduler.watch_value_status(
            lambda status: self._status_queue.put(("status", status)))
        self.recon.add_listener(self._on_device_state)
        self._register_services()
        self._spawn("agent-status", self._status_loop)
        self._spawn("agent-nb", self._nb_loop)
        self._spawn("agent-confirm", self._confirm_loop)
        self._start_southbounds()
        if not self.devices:
            # Nothing to reconcile: load the desired state right away (every value will be
            # reported UNIMPLEMENTED, which tells the operator what is missing).
            log.warning("no southbound enabled (--linux, --linux-netns, --vpp-socket)")
            self._spawn("agent-load", self._load_without_devices)
        if self.config.http is not None:
            self._start_http(self.config.http)

    def _start_http(self, address: tuple[str, int]) -> None:
        """The REST API; without a configured token, the agent's own token, written to the
        token directory for the local CLI once the address is known."""
        from kvmesh.agent.http_api import HttpApi
        from kvmesh.agent.http_server import load_security
        from kvmesh.agent.http_token import token_dir, token_name, write_token_file

        cfg = self.config
        security = load_security(cfg.http_cert, cfg.http_key, cfg.http_token_file,
                                 cfg.http_read_token_file, cfg.http_public_reads)
        self._http = HttpApi(self, *address, security=security)
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
        self._status_queue.put(("agent", record))

    def add_device(self, name: str, register: Callable[[], Plugin],
                   reconnect: Callable[[float], None] | None = None) -> Device:
        """Register a southbound (`register()` adds its descriptors to the scheduler) as the
        device `name`; the descriptors it added are the device's reconciliation scope."""
        before = {d.name for d in self.scheduler.descriptors()}
        plugin = register()
        names = tuple(d.name for d in self.scheduler.descriptors() if d.name not in before)
        device = Device(name, plugin, names, reconnect)
        with self._lock:
            self.devices[name] = device
        return device

    def stop(self) -> None:
        self._stop.set()
        if self._http is not None:
            self._http.close()
        if self._token_file is not None:
            from kvmesh.agent.http_token import remove_token_file

            remove_token_file(*self._token_file)
        for thread in self._threads:
            thread.join(timeout=10)
        self.recon.close()
        for device in list(self.devices.values()):
            try:
                device.plugin.close()
            except Exception:
                log.exception("closing the %s southbound failed", device.name)
        if self._unwatch is not None:
            self._unwatch()
        self.scheduler.close()

    def _count(self, name: str, amount: int = 1) -> None:
        with self._lock:  # the NB and status threads both count
            self.counters[name] += amount

    def wait_stopped(self, timeout: float | None = None) -> bool:
        return self._stop.wait(timeout)

    @property
    def http_address(self) -> tuple[str, int] | None:
        return None if self._http is None else self._http.address

    def _spawn(self, name: str, target: Callable[[], None]) -> None:
        thread = threading.Thread(target=self._guard(name, target), name=name, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _guard(self, name: str, target: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                target()
            except Exception:
                log.exception("agent thread %s died; stopping the agent", name)
                self._stop.set()

        return run

    # -- southbounds and reconciliation -----------------------------------------------------------

    def _start_southbounds(self) -> None:
        cfg = self.config
        if cfg.linux or cfg.linux_netns is not None:
            import southbound.linux

            state = {"state_dir": cfg.linux_state_dir} if cfg.linux_state_dir else {}
            self.add_device("linux", lambda: southbound.linux.register(
                self.scheduler, netns=cfg.linux_netns, **state))
            # A namespace that exists is ready: reconcile it now.
            self._connect_device("linux")
        if cfg.vpp_socket is not None:
            import southbound.vpp

            socket_path = cfg.vpp_socket
            device = self.add_device("vpp", lambda: southbound.vpp.register(
                self.scheduler, socket=socket_path))
            vpp: Any = device.plugin
            device.reconnect = getattr(vpp, "reconnect", None)
            vpp.on_connect(lambda: self._connect_device("vpp"))
            # VPP deleting one of kvmesh's interfaces is drift: repair it without waiting for
            # the periodic resync.
            vpp.on_interface_event(
                lambda event: self._repair_soon("vpp") if event.deleted and event.name else None)
            vpp.on_disconnect(lambda: self.recon.device_disconnected("vpp"))
            if getattr(vpp, "connected", False):
                self._connect_device("vpp")

    def _connect_device(self, device: str) -> None:
        future = self.recon.device_connected(device)
        future.add_done_callback(lambda f: self._after_reconciliation(f.result()))

    def _after_reconciliation(self, outcome: RunOutcome) -> None:
        if outcome.state is DeviceState.KNOWN:
            with self._lock:  # future callbacks run on the reconciliation threads
                self._failures.pop(outcome.device, None)
            log.info("device %s is KNOWN%s", outcome.device,
                     f" (failed, tolerated: {outcome.failed})" if outcome.failed else "")
            return
        if not outcome.disconnect or self._stop.is_set():
            return
        with self._lock:
            failures = self._failures[outcome.device] = self._failures.get(outcome.device, 0) + 1
        first, cap = self.config.reconnect_backoff_s
        hold_off = min(cap, first * 2 ** (failures - 1))
        log.warning("reconciliation of %s failed (%s): disconnecting, retry in %.1fs",
                    outcome.device, outcome.failed, hold_off)
        device = self.devices.get(outcome.device)
        if device is not None and device.reconnect is not None:
            # The southbound drops its connection and reconnects after the hold-off; its
            # on_connect hook starts the next reconciliation.
            device.reconnect(hold_off)
        else:
            timer = threading.Timer(hold_off, lambda: None if self._stop.is_set()
                                    else self._connect_device(outcome.device))
            timer.daemon = True
            timer.start()

    def _register_services(self) -> None:
        # No timeout: the device waits for a current store as long as it takes (an operator
        # can cut that short with `kvmesh resync --force`), but it is not idle meanwhile.
        self.recon.register(ReconciliationService(
            "kvstore-initial-sync", KVSTORE_SYNC_PRIORITY, ResultIntent.DO_NOTHING,
            self._svc_kvstore_sync, timeout_s=None))
        for priority, stage, _suffixes in (*STAGES, (40, "other", ())):
            self.recon.register(ReconciliationService(
                f"resync-{stage}", priority, ResultIntent.DISCONNECT,
                self._stage_resync(stage), timeout_s=600))

    def _svc_kvstore_sync(self, device: str, token: CancelToken) -> bool:
        """Wait until the local KvStore is current, then let the deleting resyncs run.

        Until the store is known to be current (SYNCED, or RESTORED with no peers, or declared
        so by an operator) its absence of a key proves nothing: the device is held out of KNOWN
        with the reason published, and what the southbound holds that kvmesh made is adopted
        as it is. Creates and updates of the desired state go ahead; deletes wait.
        """
        with KvStoreClient(self.config.kv_url) as client:
            self._load_dump(client)
            adopted = False
            while True:
                state, num_peers = self._read_store_state(client)
                if store_is_current(state, num_peers, forced=self._assume_current.is_set()):
                    break
                self._hold(device, f"{why_not_current(state, num_peers)}: deletes held back "
                                   f"(kvmesh resync --node {self.config.node} --force overrides)")
                if not adopted or self._pending_for(device):
                    self._adopt(device, token)
                    adopted = True
                if token.wait(self.config.store_poll_s):
                    token.check()
            self._load_dump(client)  # what the sync brought (the stream has it too)
        self._hold(device, None)
        return True

    def _read_store_state(self, client: KvStoreClient) -> tuple[StoreState, int]:
        # Counters, not NODE_INFO: NODE_INFO also computes the store's root digest, which is
        # not free on a big store that is still receiving its initial sync.
        counters = client.counters()
        state = StoreState.from_code(int(counters.get("kvstore.store_state", 0)))
        self.store_state = state
        return state, int(counters.get("kvstore.num_peers", 0))

    def _hold(self, device: str, reason: str | None) -> None:
        """Publish why `device` is held out of KNOWN (None: it no longer is)."""
        with self._lock:
            if self._hold_reasons.get(device) == reason:
                return
            if reason is None:
                del self._hold_reasons[device]
            else:
                self._hold_reasons[device] = reason
        if reason is not None:
            log.warning("device %s held out of KNOWN: %s", device, reason)
        self._on_device_state(device, self.recon.device_state(device))

    def _pending_for(self, device: str) -> bool:
        with self._lock:
            return any(device_of(key) == device for key in self.desired.pending)

    def _adopt(self, device: str, token: CancelToken) -> None:
        """Apply the desired state of `device` stage by stage without deleting anything: what
        kvmesh made and the store does not (yet) hold is taken over as it is."""
        dev = self.devices.get(device)
        if dev is None:
            return
        for _priority, stage, _suffixes in (*STAGES, (40, "other", ())):
            names = [n for n in dev.descriptor_names if stage_of(n) == stage]
            if not names:
                continue
            token.check()
            with self._lock:
                values = self._snapshot_for(device, names)
            try:
                self.scheduler.resync(values, kind="full", descriptors=names,
                                      retry=self.config.retry, delete_missing=False,
                                      description=f"adopt {device}: {stage} (store not "
                                                  f"current: no deletes)")
            except TransactionError as exc:
                log.warning("adopting %s/%s: %s", device, stage, exc)

    def assume_current(self) -> dict[str, Any]:
        """An operator declares the store the truth: held devices reconcile with deletes."""
        self._assume_current.set()
        log.warning("KvStore declared current by an operator (was %s): deletes allowed",
                    self.store_state.value if self.store_state else "unknown")
        devices = self.recon.devices()
        return {"store_state": self.store_state.value if self.store_state else None,
                "devices": {d: st.value for d, st in devices.items()},
                "all_known": all(st is DeviceState.KNOWN for st in devices.values())}

    def _load_without_devices(self) -> None:
        with KvStoreClient(self.config.kv_url) as client:
            self._load_dump(client)  # nothing to delete from: no need to wait for the store

    def _stage_resync(self, stage: str) -> Callable[[str, CancelToken], bool]:
        def run(device: str, token: CancelToken) -> bool:
            dev = self.devices.get(device)
            if dev is None:
                return True
            names = [n for n in dev.descriptor_names if stage_of(n) == stage]
            if not names:
                return True
            token.check()
            with self._lock:
                values = self._snapshot_for(device, names)
            try:
                self.scheduler.resync(values, kind="full", descriptors=names,
                                      retry=self.config.retry,
                                      description=f"reconcile {device}: {stage}")
            except TransactionError as exc:
                # Value-level failures are visible in statuses (and retried); they are not a
                # reason to drop the device. Anything else propagates and fails the stage.
                log.warning("reconcile %s/%s: %s", device, stage, exc)
            # A connection lost during the stage made its reads fail (the scheduler then works
            # from what it could read): the device must not become KNOWN on that.
            if not getattr(dev.plugin, "connected", True):
                raise ConnectionError(f"connection to {device} lost while reconciling {stage}")
            return True

        return run

    def _snapshot_for(self, device: str, descriptor_names: list[str]) -> dict[str, Model]:
        """Desired values of `device` owned by the given descriptors; drops their pending
        changes (the resync applies the current desired state, deletions included)."""
        selectors = self._selectors(descriptor_names)

        def in_scope(key: str) -> bool:
            return device_of(key) == device and any(sel(key) for sel in selectors)

        for key in [k for k in self.desired.pending if in_scope(k)]:
            del self.desired.pending[key]
        return {k: v for k, v in self.desired.desired.items() if in_scope(k)}

    def _selectors(self, descriptor_names: list[str]) -> list[Callable[[str], bool]]:
        wanted = set(descriptor_names)
        return [d.key_selector for d in self.scheduler.descriptors() if d.name in wanted]

    def _on_device_state(self, device: str, state: DeviceState) -> None:
        payload: dict[str, Any] = {"device": device, "state": state.value,
                                   "time": round(time.time(), 3)}
        reason = self._hold_reasons.get(device)
        if reason is not None and state is not DeviceState.KNOWN:
            payload["reason"] = reason
        self._status_queue.put(("device", payload))

    # -- northbound -------------------------------------------------------------------------------

    def _device_known(self, model_key: str) -> bool:
        """May a change of `model_key` be applied now? Held back only while its device is
        being (re)connected; a model with no southbound on this node goes through, and the
        scheduler reports it UNIMPLEMENTED (visible in its status) instead of it waiting."""
        device = device_of(model_key)
        if device not in self.devices:
            return True
        return self.recon.device_state(device) is DeviceState.KNOWN

    def _load_dump(self, client: KvStoreClient) -> int:
        """Take the node's desired state from a dump; returns how many values changed."""
        dump = client.dump(prefix=config_prefix(self.config.node))
        raw = {k: (v.value if v.value is not None else b"") for k, v in dump.items()}
        with self._lock:
            changed = self.desired.load_dump(raw)
            self.counters["redumps"] += 1
            self._queue_refusals()
        self._initial_load_done.set()
        return changed

    def _redump(self, client: KvStoreClient) -> None:
        """The guard against a missed publication: reload the desired state from a dump; what
        it finds was missed (or crossed the dump), counted and logged so a lossy stream shows.

        Under the transaction lock: a REST apply (`apply_configuration`) applies its values
        first and writes them to the mesh after, so a dump taken in between would lack them
        and undo them in the kernel (then the stream brings them back: a flap)."""
        with self._txn_lock:
            missed = self._load_dump(client)
        if missed:
            self._count("redump_repairs", missed)
            log.info("periodic re-dump found %d change(s) the stream had not brought", missed)

    def _nb_loop(self) -> None:
        cfg = self.config
        client = KvStoreClient(cfg.kv_url)
        sub = None
        next_redump = time.monotonic() + cfg.redump_s
        next_downstream = time.monotonic() + cfg.downstream_resync_s
        try:
            while not self._stop.is_set():
                try:
                    if sub is None:
                        sub = client.subscribe(prefix=config_prefix(cfg.node))
                    received = self._drain(sub, timeout=self._poll_timeout())
                    now = time.monotonic()
                    if self._initial_load_done.is_set() and now >= next_redump:
                        next_redump = now + cfg.redump_s
                        self._drain(sub, timeout=0)
                        self._redump(client)
                    self._apply_pending(quiet=received == 0)
                    if now >= next_downstream:
                        next_downstream = now + cfg.downstream_resync_s
                        self._periodic_downstream_resync()
                except KvStoreError as exc:
                    self._count("kvstore_errors")
                    log.warning("KvStore %s: %s (retrying)", cfg.kv_url, exc)
                    if sub is not None:
                        sub.close()
                        sub = None
                    self._stop.wait(1.0)
        finally:
            if sub is not None:
                sub.close()
            client.close()

    def _poll_timeout(self) -> float:
        """How long to wait for the stream: briefly while a batch is open (it is applied as soon
        as the stream goes quiet), never past the end of the coalescing window."""
        first = self.desired.first_pending_at
        idle = 0.05
        if first is None:
            return idle
        left = first + self.config.coalesce_s - time.monotonic()
        if left <= 0:
            # The window is closed and what is still pending is held back (its device is not
            # KNOWN): new changes are applied as they come, so just wait for the stream.
            return idle
        return min(self.config.quiet_s, left)

    def _drain(self, sub: Any, timeout: float) -> int:
        """Take every publication that arrives within `timeout` (and what is queued after it);
        returns how many there were."""
        count = 0
        publication = sub.recv(timeout_s=timeout)
        while publication is not None:
            count += 1
            raw = {k: v.value for k, v in (publication.key_vals or {}).items()}
            with self._lock:
                self.desired.update(raw, publication.expired_keys or ())
                self._queue_refusals()
            publication = sub.recv(timeout_s=0)
        return count

    def _queue_refusals(self) -> None:
        """Desired values refused before the scheduler (undecodable): to `status/<node>/`,
        in order with the scheduler's statuses (the same queue)."""
        for model_key, reason in self.desired.take_refusals().items():
            if reason is not None:
                self.counters["nb_values_refused"] += 1  # under self._lock (callers hold it)
                log.warning("desired value %s refused: %s", model_key, reason)
            self._status_queue.put(("refusal", (model_key, reason)))

    def _apply_pending(self, quiet: bool) -> None:
        """Commit pending changes once the stream went quiet, the coalescing window closed, or
        the batch is full; changes for devices that are not KNOWN stay pending."""
        cfg = self.config
        with self._txn_lock:
            with self._lock:
                first = self.desired.first_pending_at
                if first is None or not self._initial_load_done.is_set():
                    return
                window_closed = time.monotonic() - first >= cfg.coalesce_s
                if not (quiet or window_closed or len(self.desired.pending) >= cfg.max_batch):
                    return
                batch = self.desired.take_pending(cfg.max_batch, accept=self._device_known)
            if not batch:
                return
            txn = self.scheduler.start_txn()
            for key, value in batch.items():
                txn.set_value(key, value)
            self._count("nb_transactions")
            self._count("nb_values_applied", len(batch))
            try:
                txn.commit(retry=self.config.retry,
                           description=f"northbound: {len(batch)} value(s) from the KvStore")
            except TransactionError as exc:
                self._count("nb_transaction_errors")
                log.warning("northbound transaction: %s", exc)

    def apply_configuration(self, values: Mapping[str, Model], replace: bool,
                            who: str) -> dict[str, Any]:
        """REST POST /configuration: `values` (already validated) as one transaction with
        revert — all or nothing — then recorded in the mesh (desired state with a revision;
        statuses as usual). ``replace`` also removes desired values `values` does not name.
        `who`: the identity the request's credential proved (the revision's `who`)."""
        node = self.config.node
        with self._txn_lock:
            with self._lock:
                current = dict(self.desired.desired)
            target: dict[str, Model | None] = dict(values)
            if replace:
                target.update({key: None for key in current if key not in values})
            changes = {key: value for key, value in target.items() if current.get(key) != value}
            if not changes:
                return {"ok": True, "seq": None, "revision": None, "changed": []}
            txn = self.scheduler.start_txn()
            for key, value in changes.items():
                txn.set_value(key, value)
            try:
                seq = txn.commit(revert=True, description=f"REST POST /configuration: "
                                                          f"{len(changes)} value(s)")
            except TransactionError as exc:
                self._count("rest_transaction_errors")
                return {"ok": False, "error": str(exc),
                        "errors": {key: f"{op}: {err}" for key, (op, err) in exc.errors.items()}}
            with self._lock:
                self.desired.record_applied(changes)
            try:
                with KvStoreClient(self.config.kv_url) as client:
                    rev = write_node_change(
                        client, node, changes, {key: current.get(key) for key in changes},
                        who=f"{who} (agent {node}, REST POST /configuration)",
                        description="REST POST /configuration")
            except (KvStoreError, WriteRefused) as exc:
                # Applied here but not in the mesh: the next re-dump brings the node back to
                # what the mesh says; the caller is told.
                return {"ok": False, "seq": seq, "error": f"applied, but not recorded in the "
                                                          f"mesh (it will be undone): {exc}"}
            self._count("rest_transactions")
            return {"ok": True, "seq": seq, "revision": rev, "changed": sorted(changes)}

    def _repair_soon(self, device: str) -> None:
        """A southbound reported drift: run a downstream resync of that device shortly, once
        for a burst of reports."""
        with self._lock:
            if device in self._repairs_pending or self._stop.is_set():
                return
            self._repairs_pending.add(device)
        timer = threading.Timer(self.config.repair_delay_s, self._repair, args=(device,))
        timer.daemon = True
        timer.start()

    def _repair(self, device: str) -> None:
        with self._lock:
            self._repairs_pending.discard(device)
        dev = self.devices.get(device)
        if (dev is None or self._stop.is_set()
                or self.recon.device_state(device) is not DeviceState.KNOWN):
            return  # a device being reconciled is resynced by its reconciliation
        try:
            self.scheduler.resync(kind="downstream", descriptors=list(dev.descriptor_names),
                                  retry=self.config.retry,
                                  description=f"repair {device}: drift reported by the southbound")
        except TransactionError as exc:
            log.warning("repairing %s: %s", device, exc)
        except SchedulerClosedError:
            return
        self._count("drift_repairs")

    def _confirm_loop(self) -> None:
        """Rolls back this node's revisions left unconfirmed past their confirm timeout (see
        kvmesh.agent.revisions): held here, so it happens even when the operator's CLI died."""
        timer = ConfirmTimer()
        client: KvStoreClient | None = None
        seen_rev = -1  # revisions already taken into the config-to-applied histogram
        while not self._stop.wait(CONFIRM_POLL_S):
            try:
                client = client or KvStoreClient(self.config.kv_url)
                kept = node_revisions(client, self.config.node)
                for rev in sorted(r for r in kept if r > seen_rev):
                    record = kept[rev][1]
                    for key, change in record["changes"].items():
                        if change.get("after") is not None:
                            self.metrics.written(key, float(record["time"]))
                seen_rev = max(kept, default=seen_rev)
                due = timer.due({rev: record for rev, (_v, record) in kept.items()},
                                time.monotonic())
                for rev in due:
                    self._roll_back(client, rev, *kept[rev])
                    timer.forget(rev)
            except KvStoreError as exc:
                log.warning("confirm timer: KvStore %s: %s (retrying)", self.config.kv_url, exc)
                if client is not None:
                    client.close()
                client = None
        if client is not None:
            client.close()

    def _roll_back(self, client: KvStoreClient, rev: int, value: Any,
                   record: dict[str, Any]) -> None:
        node = self.config.node
        writes = rollback_values(record)
        current = desired_values(client, node, writes)
        new_rev = write_node_change(
            client, node, writes, current, who=who_am_i(f"agent {node}"),
            description=f"rollback of revision {rev}: not confirmed in time",
            extra={revision_key(node, rev): mark(client, value, record, ROLLED_BACK)})
        self._count("confirm_rollbacks")
        log.warning("revision %d not confirmed in time: rolled back (revision %d)", rev, new_rev)

    def _periodic_downstream_resync(self) -> None:
        if any(self.recon.device_state(d) is not DeviceState.KNOWN for d in self.devices):
            return  # a device being reconciled gets its own resync
        try:
            self.scheduler.resync(kind="downstream", retry=self.config.retry,
                                  description="periodic downstream resync")
        except TransactionError as exc:
            log.warning("periodic downstream resync: %s", exc)
        self._count("downstream_resyncs")

    # -- status publication -----------------------------------------------------------------------

    def _status_loop(self) -> None:
        client = KvStoreClient(self.config.kv_url)
        prefix = status_prefix(self.config.node)
        seeded = False
        try:
            while not self._stop.is_set():
                try:
                    if not seeded:
                        self.publisher.seed(client.dump(prefix=prefix))
                        seeded = True
                    self._collect_statuses(timeout=0.05)
                    out = self.publisher.take(time.monotonic())
                    if out:
                        client.set(out)
                        self._count("statuses_published", len(out))
                except KvStoreError as exc:
                    self._count("kvstore_errors")
                    log.warning("publishing statuses: %s (retrying)", exc)
                    self._stop.wait(1.0)
        finally:
            client.close()

    def _observe_transactions(self) -> None:
        """Transaction durations into their histogram, from the history (at scrape time: a
        transaction trimmed from the history before a scrape — 10 000 kept — is not seen)."""
        records = self.scheduler.transaction_history(since=self._txn_seen_start)
        fresh = [r for r in records if r.seq > self.metrics.last_txn_seq and r.end is not None]
        if fresh:
            self.metrics.observe_transactions(fresh)
            self._txn_seen_start = max(r.start for r in fresh)

    def _collect_statuses(self, timeout: float) -> None:
        try:
            item = self._status_queue.get(timeout=timeout)
        except queue.Empty:
            return
        while True:
            kind, payload = item
            if isinstance(payload, ValueStatus):
                self.publisher.on_status(payload)
                if payload.state is ValueState.CONFIGURED and payload.derived_from is None:
                    self.metrics.configured(payload.key, time.time())
            elif kind == "device":
                self.publisher.publish(device_key(self.config.node, str(payload["device"])),
                                       payload)
            elif kind == "agent":
                self.publisher.publish(agent_key(self.config.node), payload)
            elif kind == "refusal":
                model_key, reason = payload
                self.publisher.refuse(model_key, reason)
            try:
                item = self._status_queue.get_nowait()
            except queue.Empty:
                return

    # -- the REST API backend (kvmesh.agent.http_api.ApiBackend) ---------------------------------

    def txn_history(self, seq: int | None, since: float | None, until: float | None) -> list[Any]:
        return list(self.scheduler.transaction_history(since=since, until=until, seq=seq))

    def key_timeline(self, key: str) -> list[Any]:
        return list(self.scheduler.key_timeline(key))

    def graph_snapshot(self, time: float | None) -> Any:
        return self.scheduler.graph_snapshot(time)

    def dump(self, descriptor: str | None, key_prefix: str | None, view: str,
             state: str | None = None) -> Any:
        return self.scheduler.dump(descriptor=descriptor, key_prefix=key_prefix, view=view,
                                   state=None if state is None else ValueState[state])

    def value_status(self, key: str | None) -> Any:
        if key is not None:
            return self.scheduler.get_value_status(key)
        return self.scheduler.get_value_statuses()

    def graph_dot(self, txn: int | None = None) -> str:
        return self.scheduler.graph_dot(txn)

    def stats(self) -> Any:
        return {"scheduler": self.scheduler.stats(), "agent": dict(self.counters),
                "devices": {d: s.value for d, s in self.recon.devices().items()}}

    def downstream_resync(self, retry: bool) -> Any:
        """The resync's record and its failed values (a resync that ran with failures is not
        an error of the request)."""
        errors: dict[str, str] = {}
        try:
            seq = self.scheduler.resync(kind="downstream", retry=retry or None,
                                        description="downstream resync (REST)")
        except TransactionError as exc:
            if exc.seq is None:
                raise
            seq = exc.seq
            errors = {key: f"{op}: {err}" for key, (op, err) in exc.errors.items()}
        records = self.scheduler.transaction_history(seq=seq)
        return {"record": records[0] if records else {"seq": seq}, "errors": errors}

    def plan_values(self, values: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The operations a transaction of `values` (model key -> value, None deletes) would
        execute, in order; read-only (the scheduler simulates it on its graph)."""
        return [{"operation": op.op.value, "key": op.key, "flags": op.flags(),
                 "new_state": op.new_state.name, "details": list(op.details),
                 "error": None if op.error is None else str(op.error)}
                for op in self.scheduler.plan(dict(values))]

    def recon_services(self) -> Any:
        return {
            "services": [{"priority": p, "name": s.name, "intent": s.intent.value}
                         for p, level in self.recon.registered_services().items()
                         for s in level],
            "devices": {d: s.value for d, s in self.recon.devices().items()},
            "status": self.recon.status(),
            "held": dict(self._hold_reasons),
            "store_state": self.store_state.value if self.store_state else None,
        }

    def metrics_text(self) -> str:
        self._observe_transactions()
        return self.metrics.text()

    def _metric_snapshot(self) -> list[Metric]:
        """What /metrics reads at scrape time (counters and states)."""
        families: list[MetricFamily] = []
        extra: list[Metric] = []
        up = MetricFamily("kvmesh_kvstore_up", "gauge",
                          "1 when this scrape read the local KvStore node's counters")
        try:
            with KvStoreClient(self.config.kv_url, timeout_s=2.0) as client:
                kv = client.counters()
            up.add(1)
            families += kvstore_families(kv)
            histogram = flood_batch_histogram(kv)
            if histogram is not None:
                extra.append(histogram)
        except KvStoreError as exc:
            # The scrape still answers (scheduler, agent, recon), and says what is missing.
            up.add(0)
            self._count("metrics_kvstore_unreachable")
            log.warning("/metrics: KvStore %s did not answer (%s): its counters are left out "
                        "of this scrape (kvmesh_kvstore_up 0)", self.config.kv_url, exc)
        families.append(up)
        sched = _numbers(self.scheduler.stats())
        families += flat_counters("kvmesh_scheduler", sched, help_prefix="scheduler stat ")
        families += flat_counters("kvmesh_agent", self.counters, help_prefix="agent counter ")
        dev = MetricFamily("kvmesh_recon_device_known", "gauge", "1 when the device is KNOWN")
        for name, state in self.recon.devices().items():
            dev.add(1 if state is DeviceState.KNOWN else 0, device=name)
        families.append(dev)
        per_service = {
            "successes": MetricFamily("kvmesh_recon_successes", "counter",
                                      "Successful reconciliation runs"),
            "failures": MetricFamily("kvmesh_recon_failures", "counter",
                                     "Failed reconciliation runs"),
            "cancellations": MetricFamily("kvmesh_recon_cancellations", "counter",
                                          "Reconciliation runs cancelled by a disconnect"),
        }
        for device, services in self.recon.status().items():
            for service, st in services.items():
                for field, family in per_service.items():
                    value = st[field]
                    if isinstance(value, int):
                        family.add(value, device=device, service=service)
        families += per_service.values()
        return [f.to_prometheus() for f in families if f.samples] + extra


def _numbers(stats: Mapping[str, Any], prefix: str = "") -> dict[str, float]:
    """Flatten nested stats into `a.b` -> number (non-numbers dropped)."""
    out: dict[str, float] = {}
    for key, value in stats.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(_numbers(value, f"{name}."))
        elif isinstance(value, int | float) and not isinstance(value, bool):
            out[name] = value
    return out


def run_agent(config: AgentConfig, stop: threading.Event) -> int:
    """Run an agent until `stop` is set (or the agent fails); returns the exit code."""
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    agent = Agent(config)
    try:
        agent.start()
    except Exception as exc:
        log.error("agent failed to start: %s", exc)
        agent.stop()
        return 1
    while not stop.wait(0.2):
        if agent.wait_stopped(0):
            agent.stop()
            return 1
        if config.parent_pid is not None and os.getppid() != config.parent_pid:
            # The parent-death signal normally stops us first; this catches it missing (an
            # orphan agent would go on applying, and the restarted node would start a second).
            log.warning("the node process (pid %d) that started this agent is gone: stopping",
                        config.parent_pid)
            break
    agent.stop()
    return 0

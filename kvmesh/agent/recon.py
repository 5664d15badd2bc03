"""Reconciliation framework: ordered reconciliation of a (re)connected southbound device.

After OpenDaylight's framework (seed 004), with the lessons its implementation taught:

* services run in ascending priority number (lower first); services of equal priority run in
  parallel, and the next priority starts only when the whole level is done;
* the outcome is derived from what actually happened combined with each service's declared
  intent (not from a vote over intents): a failed DISCONNECT service stops the run and the caller
  drops the device; a failed DO_NOTHING service is recorded and the run continues;
* every service has a timeout; a timeout is a failure;
* a disconnect in the middle of a run cancels it: the cancel token is set for the services still
  running, and every service's end callback is called in priority order;
* per-service, per-device counters and states are kept for the CLI and /metrics.

A device is KNOWN only after a run completes without a DISCONNECT failure. Until then, callers
hold back northbound transactions for that device (see `wait_known`).
"""

from __future__ import annotations

import contextlib
import enum
import logging
import math
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, InvalidStateError, ThreadPoolExecutor, wait
from dataclasses import dataclass, field

log = logging.getLogger("kvmesh.recon")


class ResultIntent(enum.Enum):
    """What the framework does when a service fails."""

    DO_NOTHING = "DO_NOTHING"
    DISCONNECT = "DISCONNECT"


class ServiceState(enum.Enum):
    IDLE = "IDLE"
    STARTED = "STARTED"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"


class DeviceState(enum.Enum):
    DISCONNECTED = "DISCONNECTED"
    RECONCILING = "RECONCILING"
    KNOWN = "KNOWN"
    FAILED = "FAILED"


class ReconciliationCancelled(Exception):
    """Raised by `CancelToken.check` inside a service whose device went away."""


class CancelToken:
    """Lets a long-running service notice that its device disconnected (or that it timed out:
    each service call gets a child token of its run's token, cancelled on either)."""

    def __init__(self) -> None:
        self._event = threading.Event()
        # Completed on cancel so the orchestrator can wait on services and cancellation at once.
        self.fired: Future[None] = Future()
        self._children: list[CancelToken] = []
        self._children_lock = threading.Lock()

    def child(self) -> CancelToken:
        """A token cancelled with this one, and cancellable on its own."""
        token = CancelToken()
        with self._children_lock:
            self._children.append(token)
            cancelled = self._event.is_set()
        if cancelled:
            token.cancel()
        return token

    def cancel(self) -> None:
        with self._children_lock:
            self._event.set()
            children, self._children = self._children, []
        if not self.fired.done():
            with contextlib.suppress(InvalidStateError):  # cancelled from two threads at once
                self.fired.set_result(None)
        for token in children:
            token.cancel()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def check(self) -> None:
        if self._event.is_set():
            raise ReconciliationCancelled()

    def wait(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds; True if cancelled meanwhile."""
        return self._event.wait(timeout)


StartFn = Callable[[str, CancelToken], bool | None]
EndFn = Callable[[str], None]


@dataclass(frozen=True)
class ReconciliationService:
    """A participant in device reconciliation.

    `start(device, token)` does the work; it fails by raising or by returning False. `end(device)`
    is called when a run is cancelled by a disconnect, so the service can drop its own tasks.
    """

    name: str
    priority: int
    intent: ResultIntent
    start: StartFn
    end: EndFn | None = None
    timeout_s: float | None = 120.0  # None: no timeout (the service waits on a condition)


@dataclass
class ServiceStatus:
    """Counters and state of one service for one device."""

    state: ServiceState = ServiceState.IDLE
    successes: int = 0
    failures: int = 0
    cancellations: int = 0
    last_start: float | None = None
    last_end: float | None = None
    last_error: str = ""

    def as_dict(self) -> dict[str, object]:
        return {
            "state": self.state.value,
            "successes": self.successes,
            "failures": self.failures,
            "cancellations": self.cancellations,
            "last_start": self.last_start,
            "last_end": self.last_end,
            "last_error": self.last_error,
        }


@dataclass
class RunOutcome:
    """How one reconciliation run of a device ended."""

    device: str
    state: DeviceState
    failed: dict[str, str] = field(default_factory=dict)
    cancelled: bool = False

    @property
    def disconnect(self) -> bool:
        """The caller must drop the device connection (and reconnect later)."""
        return self.state is DeviceState.FAILED and not self.cancelled


DeviceListener = Callable[[str, DeviceState], None]


class Registration:
    """Handle returned by `register`; `close()` unregisters the service."""

    def __init__(self, manager: ReconciliationManager, service: ReconciliationService) -> None:
        self._manager = manager
        self.service = service

    def close(self) -> None:
        self._manager.unregister(self.service.name)


@dataclass
class _DeviceRun:
    token: CancelToken
    future: Future[RunOutcome]


class ReconciliationManager:
    """Runs registered services for each connected device, in priority order."""

    def __init__(self, max_parallel: int = 8) -> None:
        self._lock = threading.RLock()
        self._services: dict[str, ReconciliationService] = {}
        self._status: dict[tuple[str, str], ServiceStatus] = {}
        self._devices: dict[str, DeviceState] = {}
        self._runs: dict[str, _DeviceRun] = {}
        self._listeners: list[DeviceListener] = []
        self._known = threading.Condition(self._lock)
        # Listeners are told a device's state under this lock, reading the state when they are
        # told: notifications never overtake each other, and the last one a listener hears is
        # the device's current state.
        self._notify_lock = threading.RLock()
        self._notified: dict[str, DeviceState] = {}
        # The last call of each (device, service): a new run waits for it to return before it
        # calls the service again, so a timed-out or cancelled call that ignores its token never
        # runs alongside the next one.
        self._calls: dict[tuple[str, str], Future[bool | None]] = {}
        # Service bodies run here; run orchestration runs on its own thread per device so a
        # level's services can use every pool worker.
        self._pool = ThreadPoolExecutor(max_workers=max_parallel, thread_name_prefix="recon-svc")
        self._closed = False

    # -- registration -------------------------------------------------------------------------

    def register(self, service: ReconciliationService) -> Registration:
        with self._lock:
            if service.name in self._services:
                raise ValueError(f"reconciliation service {service.name!r} is already registered")
            self._services[service.name] = service
        return Registration(self, service)

    def unregister(self, name: str) -> None:
        with self._lock:
            self._services.pop(name, None)

    def registered_services(self) -> dict[int, list[ReconciliationService]]:
        """Services grouped by priority, in the order they run."""
        with self._lock:
            levels: dict[int, list[ReconciliationService]] = {}
            for svc in sorted(self._services.values(), key=lambda s: (s.priority, s.name)):
                levels.setdefault(svc.priority, []).append(svc)
            return levels

    def add_listener(self, listener: DeviceListener) -> None:
        """`listener(device, state)` is called on every device state change (outside locks)."""
        with self._lock:
            self._listeners.append(listener)

    # -- device lifecycle -----------------------------------------------------------------------

    def device_connected(self, device: str) -> Future[RunOutcome]:
        """Start reconciling `device`; a run already in progress for it is returned as is."""
        with self._lock:
            if self._closed:
                raise RuntimeError("reconciliation manager is closed")
            run = self._runs.get(device)
            if run is not None and not run.future.done():
                return run.future
            token = CancelToken()
            future: Future[RunOutcome] = Future()
            self._runs[device] = _DeviceRun(token, future)
        self._set_device_state(device, DeviceState.RECONCILING)
        thread = threading.Thread(
            target=self._run_device, args=(device, token, future), name=f"recon-{device}",
            daemon=True,
        )
        thread.start()
        return future

    def device_disconnected(self, device: str) -> None:
        """Cancel a run in progress (calling every end callback in order) and forget the device.

        The run is dropped and the device marked DISCONNECTED in one step under the lock, so a
        run ending at the same moment cannot mark it KNOWN afterwards (it finds itself no longer
        the device's run)."""
        with self._lock:
            run = self._runs.pop(device, None)
            services = [s for level in self.registered_services().values() for s in level]
            self._store_state(device, DeviceState.DISCONNECTED)
        if run is not None and not run.future.done():
            run.token.cancel()
            for svc in services:
                if svc.end is None:
                    continue
                try:
                    svc.end(device)
                except Exception:  # a broken end callback must not stop the others
                    log.exception("end-of-reconciliation callback of %s failed", svc.name)
        self._notify(device)

    def device_state(self, device: str) -> DeviceState:
        with self._lock:
            return self._devices.get(device, DeviceState.DISCONNECTED)

    def devices(self) -> dict[str, DeviceState]:
        with self._lock:
            return dict(self._devices)

    def wait_known(self, device: str, timeout: float | None = None) -> bool:
        """Block until `device` is KNOWN (the gate for northbound transactions)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._known:
            while self._devices.get(device) is not DeviceState.KNOWN:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._known.wait(remaining)
            return True

    def status(self, device: str | None = None) -> dict[str, dict[str, dict[str, object]]]:
        """{device: {service: counters}} for one device or all of them."""
        with self._lock:
            out: dict[str, dict[str, dict[str, object]]] = {}
            for (dev, name), st in sorted(self._status.items()):
                if device is None or dev == device:
                    out.setdefault(dev, {})[name] = st.as_dict()
            return out

    def close(self) -> None:
        with self._lock:
            self._closed = True
            runs = list(self._runs.values())
        for run in runs:
            run.token.cancel()
        self._pool.shutdown(wait=False, cancel_futures=True)

    # -- internals --------------------------------------------------------------------------------

    def _status_of(self, device: str, name: str) -> ServiceStatus:
        key = (device, name)
        st = self._status.get(key)
        if st is None:
            st = self._status[key] = ServiceStatus()
        return st

    def _store_state(self, device: str, state: DeviceState) -> None:
        """Record a state; the caller holds the lock and calls `_notify` after releasing it."""
        self._devices[device] = state
        self._known.notify_all()

    def _set_device_state(self, device: str, state: DeviceState,
                          run: CancelToken | None = None) -> None:
        """Set and announce a state; with `run`, only if that run is still the device's run
        (checked and set in one step: a disconnect cannot land in between)."""
        with self._lock:
            if run is not None:
                current = self._runs.get(device)
                if current is None or current.token is not run:
                    return
            self._store_state(device, state)
        self._notify(device)

    def _notify(self, device: str) -> None:
        with self._notify_lock:
            with self._lock:
                state = self._devices.get(device, DeviceState.DISCONNECTED)
                if self._notified.get(device) is state:
                    return
                self._notified[device] = state
                listeners = list(self._listeners)
            for listener in listeners:
                try:
                    listener(device, state)
                except Exception:
                    log.exception("device-state listener failed")

    def _run_device(self, device: str, token: CancelToken, future: Future[RunOutcome]) -> None:
        outcome = RunOutcome(device=device, state=DeviceState.KNOWN)
        try:
            for priority, level in self.registered_services().items():
                if token.cancelled:
                    break
                log.info("device %s: reconciling priority %d: %s", device, priority,
                         ", ".join(s.name for s in level))
                failures = self._run_level(device, level, token)
                outcome.failed.update(failures)
                if any(_intent_of(level, name) is ResultIntent.DISCONNECT
                       for name in failures):
                    outcome.state = DeviceState.FAILED
                    break
        except Exception as exc:  # orchestration bug: never leave the future pending
            log.exception("reconciliation of %s failed", device)
            outcome.state = DeviceState.FAILED
            outcome.failed["<framework>"] = repr(exc)
        if token.cancelled:
            outcome.cancelled = True
            outcome.state = DeviceState.DISCONNECTED
        self._set_device_state(device, outcome.state, run=token)
        future.set_result(outcome)

    def _run_level(
        self, device: str, level: list[ReconciliationService], token: CancelToken
    ) -> dict[str, str]:
        """Run one priority level in parallel; returns {service: error} of those that failed."""
        futures: dict[Future[bool | None], ReconciliationService] = {}
        deadlines: dict[str, float] = {}
        call_tokens: dict[str, CancelToken] = {}
        now = time.monotonic()
        with self._lock:
            for svc in level:
                st = self._status_of(device, svc.name)
                st.state = ServiceState.STARTED
                st.last_start = time.time()
                deadlines[svc.name] = math.inf if svc.timeout_s is None else now + svc.timeout_s
        for svc in level:
            call_token = call_tokens[svc.name] = token.child()
            with self._lock:
                previous = self._calls.get((device, svc.name))
                fut = self._pool.submit(_call_service, svc, device, call_token, previous)
                self._calls[(device, svc.name)] = fut
            futures[fut] = svc
        failures: dict[str, str] = {}
        pending: set[Future[bool | None]] = set(futures)
        while pending:
            if token.cancelled:
                # The device is gone: stop waiting for services that ignore the token.
                for fut in pending:
                    fut.cancel()
                    self._finish(device, futures[fut], "cancelled", token)
                break
            first_deadline = min(deadlines[futures[f].name] for f in pending)
            timeout = (None if first_deadline == math.inf
                       else max(0.0, first_deadline - time.monotonic()))
            waitables: set[Future[object]] = {*pending, token.fired}  # type: ignore[arg-type]
            done_any, _ = wait(waitables, timeout=timeout, return_when=FIRST_COMPLETED)
            done = {f for f in pending if f in done_any}
            pending -= done
            for fut in done:
                svc = futures[fut]
                error = _error_of(fut)
                self._finish(device, svc, error, token)
                if error is not None:
                    failures[svc.name] = error
            expired = {f for f in pending if deadlines[futures[f].name] <= time.monotonic()}
            for fut in expired:
                svc = futures[fut]
                fut.cancel()  # best effort: a started thread cannot be interrupted...
                call_tokens[svc.name].cancel()  # ...but it is told to stop
                error = f"timed out after {svc.timeout_s:g}s"
                self._finish(device, svc, error, token)
                failures[svc.name] = error
            pending -= expired
        return failures

    def _finish(
        self, device: str, svc: ReconciliationService, error: str | None, token: CancelToken
    ) -> None:
        with self._lock:
            st = self._status_of(device, svc.name)
            st.last_end = time.time()
            if token.cancelled:
                st.state = ServiceState.CANCELLED
                st.cancellations += 1
            elif error is None:
                st.state = ServiceState.COMPLETED
                st.successes += 1
                st.last_error = ""
            else:
                st.state = ServiceState.FAILED
                st.failures += 1
                st.last_error = error
        if error is not None and not token.cancelled:
            log.warning("device %s: reconciliation service %s failed (%s): %s", device, svc.name,
                        svc.intent.value, error)


def _intent_of(level: list[ReconciliationService], name: str) -> ResultIntent:
    return next(s.intent for s in level if s.name == name)


def _call_service(svc: ReconciliationService, device: str, token: CancelToken,
                  previous: Future[bool | None] | None) -> bool | None:
    """Call the service once its previous call for this device has returned."""
    if previous is not None and not previous.done():
        wait({previous, token.fired}, return_when=FIRST_COMPLETED)  # type: ignore[arg-type]
        if not previous.done():
            raise ReconciliationCancelled()
    return svc.start(device, token)


def _error_of(fut: Future[bool | None]) -> str | None:
    exc = fut.exception()
    if isinstance(exc, ReconciliationCancelled):
        return "cancelled"
    if exc is not None:
        return f"{type(exc).__name__}: {exc}"
    if fut.result() is False:
        return "service reported failure"
    return None

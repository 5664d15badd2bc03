"""KVScheduler: the thread-safe facade over the engine (queue, worker thread, retries, watchers)."""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
import types
from collections import deque
from collections.abc import Callable, Collection, Mapping
from typing import Any

from scheduler.api import (
    Cancel,
    Descriptor,
    DescriptorError,
    DumpedValue,
    Key,
    KeySelector,
    Metadata,
    ResyncKind,
    RetryPolicy,
    SchedulerClosedError,
    StatusCallback,
    TransactionError,
    Value,
    ValueOrigin,
    ValueState,
    ValueStatus,
    shown_value,
)
from scheduler.dot import graph_to_dot, revisions_to_dot
from scheduler.engine import Engine, RetryRequest, TxnOutcome
from scheduler.history import NodeRevision
from scheduler.records import RecordedOp, TxnRecord

log = logging.getLogger("scheduler")

_EMPTY_MAP: Mapping[str, Metadata] = types.MappingProxyType({})


class _Job:
    """A unit of work for the worker thread; callers may wait for its result."""

    def __init__(self, run: Callable[[Engine], TxnOutcome | None], *, wait: bool) -> None:
        self.run = run
        self.done = threading.Event() if wait else None
        self.outcome: TxnOutcome | None = None
        self.error: BaseException | None = None

    def finish(self) -> None:
        if self.done is not None:
            self.done.set()


class _NotificationBatch(_Job):
    """Queued SB notifications, merged into one transaction while they wait for the worker."""

    def __init__(self) -> None:
        super().__init__(self._apply, wait=False)
        self.items: dict[Key, tuple[Value, Metadata]] = {}

    def _apply(self, engine: Engine) -> TxnOutcome:
        return engine.run_notifications((k, v, m) for k, (v, m) in self.items.items())


class Txn:
    """A set of changes to commit together (``set_value(key, None)`` deletes; last set wins)."""

    def __init__(self, scheduler: KVScheduler) -> None:
        self._scheduler = scheduler
        self._values: dict[Key, Value] = {}

    def set_value(self, key: Key, value: Value) -> Txn:
        self._values[key] = value
        return self

    @property
    def values(self) -> Mapping[Key, Value]:
        return types.MappingProxyType(self._values)

    def commit(
        self,
        revert: bool = False,
        retry: RetryPolicy | bool | None = None,
        description: str = "",
    ) -> int:
        """Run the transaction (blocking) and return its sequence number.

        Raises TransactionError (``.errors``: key -> (operation, exception)) if any value failed.
        """
        return self._scheduler._commit(
            dict(self._values), revert=revert, retry=retry, description=description
        )


class KVScheduler:
    """Transaction-based reconciliation of key-value pairs through registered descriptors."""

    def __init__(
        self,
        *,
        record_history: bool = True,
        max_history: int = 10_000,
        history_age_limit: float = 24 * 3600.0,
        clock: Callable[[], float] = time.time,
        name: str = "kvscheduler",
        gc_pause_threshold: int = 1_000,
    ) -> None:
        self._engine = Engine(
            clock,
            record_history=record_history,
            max_history=max_history,
            history_age_limit=history_age_limit,
            gc_pause_threshold=gc_pause_threshold,
        )
        self._lock = threading.RLock()  # guards the engine (graph, registry, history)
        self._cond = threading.Condition()  # guards the queues below
        self._queue: deque[_Job] = deque()
        self._delayed: list[tuple[float, int, _Job]] = []
        self._tiebreak = itertools.count()
        self._closed = False
        self._watchers: list[tuple[StatusCallback, KeySelector | None]] = []
        self._watchers_lock = threading.Lock()
        self._worker = threading.Thread(target=self._work, name=f"{name}-worker", daemon=True)
        self._worker.start()

    # -- registration ----------------------------------------------------------------------

    def register_descriptor(self, descriptor: Descriptor) -> None:
        """Register a descriptor (unique name). Values waiting as UNIMPLEMENTED are re-applied."""
        with self._lock:
            self._engine.registry.register(descriptor)
            waiting = {
                node.key: node.nb_value
                for node in self._engine.graph.iter_nodes()
                if node.state is ValueState.UNIMPLEMENTED and descriptor.key_selector(node.key)
            }
            graph = self._engine.graph
            for key in waiting:
                node = graph.nodes[key]
                graph.remove(key)  # re-added so the per-descriptor index sees the new owner
                node.descriptor = descriptor
                node.label = descriptor.label_of(key)
                graph.add(node)
        if waiting:
            self._enqueue(
                _Job(
                    lambda engine: engine.run_nb(
                        waiting,
                        description=f"values of newly registered {descriptor.name}",
                        keep_retry_policy=True,  # the policy they were committed with
                    ),
                    wait=False,
                )
            )

    # -- transactions ----------------------------------------------------------------------

    def start_txn(self) -> Txn:
        return Txn(self)

    def _commit(
        self,
        values: dict[Key, Value],
        *,
        revert: bool,
        retry: RetryPolicy | bool | None,
        description: str,
    ) -> int:
        self._check_keys(values)
        policy = _policy(retry)
        job = _Job(
            lambda engine: engine.run_nb(
                values, revert=revert, retry=policy, description=description
            ),
            wait=True,
        )
        return self._run_and_wait(job)

    def resync(
        self,
        values: Mapping[Key, Value] | None = None,
        kind: ResyncKind | str = "full",
        retry: RetryPolicy | bool | None = None,
        description: str = "",
        descriptors: Collection[str] | None = None,
        delete_missing: bool = True,
    ) -> int:
        """Reconcile: ``full`` (Retrieve SB, diff with ``values``), ``upstream`` (no Retrieve),
        ``downstream`` (Retrieve, re-apply the last NB state; ``values`` ignored).

        ``descriptors`` limits the resync to the values of these descriptors: only they are
        retrieved, and only their NB values are deleted when missing from ``values`` (full,
        upstream) or re-applied (downstream).

        ``delete_missing=False`` (full, upstream): NB values missing from ``values`` are not
        deleted but adopted as they are (their current value becomes the desired one), for a
        caller that cannot yet tell "not desired" from "not known".
        """
        try:
            resync_kind = ResyncKind(kind)
        except ValueError:
            self._engine.stats.add(rejected_requests=1)
            raise TransactionError(
                f"unknown resync kind {kind!r} (use full, upstream or downstream)"
            ) from None
        desired: dict[Key, Value] = {}
        if resync_kind is not ResyncKind.DOWNSTREAM:
            desired = dict(values or {})
            self._check_keys(desired)
        scope = self._scope(descriptors)
        policy = _policy(retry)
        job = _Job(
            lambda engine: engine.run_resync(
                desired, resync_kind, retry=policy, description=description, scope=scope,
                delete_missing=delete_missing,
            ),
            wait=True,
        )
        return self._run_and_wait(job)

    def push_sb_notification(
        self, key: Key, value: Value | None, metadata: Metadata = None
    ) -> None:
        """Report a value created/changed (or removed: ``None``) in the SB by someone else.

        Never blocks on a running transaction: the notification is queued (consecutive queued
        notifications are applied together in one transaction).
        """
        if not isinstance(key, str) or not key:
            self._engine.stats.add(rejected_requests=1)
            raise ValueError(f"notification key must be a non-empty string, got {key!r}")
        with self._cond:
            if self._closed:
                raise SchedulerClosedError("scheduler is closed")
            last = self._queue[-1] if self._queue else None
            if isinstance(last, _NotificationBatch):
                last.items[key] = (value, metadata)
                return
            batch = _NotificationBatch()
            batch.items[key] = (value, metadata)
            self._queue.append(batch)
            self._cond.notify()

    def plan(
        self,
        values: Mapping[Key, Value],
        resync: ResyncKind | str | None = None,
        descriptors: Collection[str] | None = None,
    ) -> list[RecordedOp]:
        """The operations a transaction (or resync) with ``values`` would execute; read-only."""
        desired = dict(values)
        self._check_keys(desired)
        try:
            kind = None if resync is None else ResyncKind(resync)
        except ValueError:
            self._engine.stats.add(rejected_requests=1)
            raise TransactionError(f"unknown resync kind {resync!r}") from None
        scope = self._scope(descriptors)
        with self._lock:
            return self._engine.plan(desired, kind, scope)

    def transaction_barrier(self) -> None:
        """Wait until everything queued before this call (incl. notifications) has run."""
        self._run_and_wait(_Job(lambda engine: None, wait=True), raise_errors=False)

    # -- reading state ---------------------------------------------------------------------

    def descriptors(self) -> list[Descriptor]:
        """The registered descriptors, in registration order."""
        return self._engine.registry.descriptors

    def get_value_status(self, key: Key) -> ValueStatus:
        return self._engine.status(key)

    def get_value_statuses(self, key_selector: KeySelector | None = None) -> list[ValueStatus]:
        """Statuses of every known value (optionally filtered), sorted by key; never waits."""
        statuses = self._engine.statuses.all()
        if key_selector is not None:
            statuses = [s for s in statuses if key_selector(s.key)]
        return sorted(statuses, key=lambda status: status.key)

    def watch_value_status(
        self, callback: StatusCallback, key_selector: KeySelector | None = None
    ) -> Cancel:
        """Call ``callback(status)`` for every value whose status changed in a transaction.

        Called from the worker thread after the transaction, outside internal locks. A removed
        value is reported once with state REMOVED. Returns a function that stops the watch.
        """
        entry = (callback, key_selector)
        with self._watchers_lock:
            self._watchers.append(entry)

        def cancel() -> None:
            with self._watchers_lock:
                if entry in self._watchers:
                    self._watchers.remove(entry)

        return cancel

    def get_metadata_map(self, descriptor_name: str) -> Mapping[str, Metadata]:
        """Label -> metadata of a descriptor: a live read-only view, safe to read from any
        thread; iterating it (or ``copy()``) walks a snapshot taken at one instant."""
        registry = self._engine.registry
        if registry.get(descriptor_name) is None:
            raise KeyError(f"no descriptor named {descriptor_name!r}")
        found = registry.metadata_map(descriptor_name)
        return found if found is not None else _EMPTY_MAP

    def transaction_history(
        self, since: float | None = None, until: float | None = None, seq: int | None = None
    ) -> list[TxnRecord]:
        return self._engine.history.transactions(since, until, seq)

    def key_timeline(self, key: Key) -> list[NodeRevision]:
        return self._engine.history.timeline(key)

    def graph_snapshot(self, time: float | None = None) -> list[NodeRevision]:
        """Values of the graph at ``time`` (seconds since the epoch; None = now), by key."""
        with self._lock:
            engine = self._engine
            if time is None:
                now = engine.clock()
                return [
                    NodeRevision.of(engine.graph.nodes[key], now, engine.next_seq - 1)
                    for key in engine.graph.keys
                ]
            return engine.history.snapshot(time)

    def dump(
        self, descriptor: str | None = None, key_prefix: str | None = None, view: str = "cached",
        state: ValueState | None = None,
    ) -> list[DumpedValue]:
        """Values by descriptor and/or key prefix: ``cached`` (the graph), ``NB`` (last desired
        state), ``SB`` (calls Retrieve). ``state`` keeps the values in that state (in the
        cached view also values that do not exist, e.g. PENDING ones)."""
        dumped = self._dump(descriptor, key_prefix, view, state)
        if state is None:
            return dumped
        with self._lock:
            statuses = self._engine.statuses
            return [item for item in dumped
                    if (found := statuses.get(item.key)) is not None and found.state is state]

    def _dump(
        self, descriptor: str | None, key_prefix: str | None, view: str,
        state: ValueState | None,
    ) -> list[DumpedValue]:
        normalized = view.upper() if view.lower() in ("nb", "sb") else view.lower()
        if normalized not in ("cached", "NB", "SB"):
            self._engine.stats.add(rejected_requests=1)
            raise ValueError(f"unknown view {view!r} (use cached, NB or SB)")
        with self._lock:
            engine = self._engine
            if descriptor is not None and engine.registry.get(descriptor) is None:
                raise KeyError(f"no descriptor named {descriptor!r}")
            if normalized == "SB":
                return self._dump_sb(descriptor, key_prefix)
            keys = (
                engine.graph.keys_with_prefix(key_prefix)
                if key_prefix is not None
                else iter(engine.graph.keys)
            )
            out: list[DumpedValue] = []
            for key in keys:
                node = engine.graph.nodes[key]
                if node.derived_from is not None:
                    continue
                if descriptor is not None and (
                    node.descriptor is None or node.descriptor.name != descriptor
                ):
                    continue
                if normalized == "NB":
                    if node.origin is ValueOrigin.FROM_NB and node.nb_value is not None:
                        shown = shown_value(node.descriptor, key, node.nb_value)
                        out.append(DumpedValue(key, shown, node.metadata, node.origin))
                elif node.available or (state is not None and node.state is state):
                    out.append(DumpedValue(key, shown_value(node.descriptor, key, node.value),
                                           node.metadata, node.origin))
            return out

    def _dump_sb(self, descriptor: str | None, key_prefix: str | None) -> list[DumpedValue]:
        engine = self._engine
        selected = [
            d
            for d in engine.registry.retrieve_order()
            if descriptor is None or d.name == descriptor
        ]
        if descriptor is not None and selected and selected[0].retrieve is None:
            raise ValueError(f"descriptor {descriptor!r} does not support Retrieve operation")
        out: list[DumpedValue] = []
        for d in selected:
            if d.retrieve is None:
                continue
            correlate = []
            for key in sorted(engine.graph.keys_of_descriptor(d.name)):
                node = engine.graph.nodes[key]
                if node.derived_from is None and node.available:
                    correlate.append((key, node.value, node.metadata))
            for key, value, metadata, origin in d.retrieve(correlate) or ():
                if key_prefix is None or key.startswith(key_prefix):
                    out.append(DumpedValue(key, d.shown(key, value), metadata, origin))
        out.sort(key=lambda item: item.key)
        return out

    def stats(self) -> dict[str, Any]:
        """A copy of the counters (never waits for a running transaction)."""
        with self._cond:
            queued = len(self._queue)
            delayed = len(self._delayed)
        snapshot = self._engine.stats.snapshot()
        snapshot["queue_length"] = queued
        snapshot["scheduled_retries"] = delayed
        return snapshot

    def graph_dot(self, txn: int | None = None) -> str:
        """The graph in Graphviz DOT (clusters per descriptor, colours per state); with
        ``txn``, the graph as it was right after that transaction (from the history), the
        values it touched highlighted. KeyError when the transaction is not in the history."""
        if txn is None:
            with self._lock:
                return graph_to_dot(self._engine.graph)
        records = self.transaction_history(seq=txn)
        if not records or records[0].end is None:
            raise KeyError(f"no finished transaction {txn} in the history")
        record = records[0]
        touched = {op.key for op in record.executed} | {v.key for v in record.values}
        snapshot = [rev for rev in self.graph_snapshot(record.end) if rev.seq <= txn]
        return revisions_to_dot(snapshot, touched)

    # -- lifecycle -------------------------------------------------------------------------

    def close(self) -> None:
        """Stop the worker: queued transactions fail (SchedulerClosedError), retries are dropped."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            dropped = list(self._queue) + [job for _, _, job in self._delayed]
            self._queue.clear()
            self._delayed.clear()
            self._cond.notify_all()
        for job in dropped:
            job.error = SchedulerClosedError("scheduler closed before the transaction ran")
            job.finish()
        if threading.current_thread() is not self._worker:
            self._worker.join()

    def __enter__(self) -> KVScheduler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals -------------------------------------------------------------------------

    def _scope(self, descriptors: Collection[str] | None) -> set[str] | None:
        if descriptors is None:
            return None
        if isinstance(descriptors, str):
            descriptors = [descriptors]
        scope = set(descriptors)
        unknown = sorted(n for n in scope if self._engine.registry.get(n) is None)
        if unknown:
            self._engine.stats.add(rejected_requests=1)
            raise TransactionError(f"unknown descriptors {unknown!r}")
        return scope

    def _check_keys(self, values: Mapping[Any, Value]) -> None:
        bad = [key for key in values if not isinstance(key, str) or not key]
        if bad:
            self._engine.stats.add(rejected_requests=1)
            raise TransactionError(f"keys must be non-empty strings, got {bad[:5]!r}")

    def _enqueue(self, job: _Job) -> None:
        with self._cond:
            if self._closed:
                raise SchedulerClosedError("scheduler is closed")
            self._queue.append(job)
            self._cond.notify()

    def _run_and_wait(self, job: _Job, *, raise_errors: bool = True) -> int:
        if threading.current_thread() is self._worker:
            self._engine.stats.add(rejected_requests=1)
            raise TransactionError(
                "a transaction cannot be committed from inside a descriptor callback or a "
                "status watcher (it would wait for itself); use push_sb_notification"
            )
        self._enqueue(job)
        assert job.done is not None
        job.done.wait()
        if job.error is not None:
            raise job.error
        outcome = job.outcome
        if outcome is None:
            return -1
        record = outcome.record
        if raise_errors and record.errors:
            raise TransactionError.of_transaction(record.seq, record.errors)
        return record.seq

    def _next_job(self) -> _Job | None:
        with self._cond:
            while True:
                if self._closed:
                    return None
                now = time.monotonic()
                if self._delayed and self._delayed[0][0] <= now:
                    return heapq.heappop(self._delayed)[2]
                if self._queue:
                    return self._queue.popleft()
                timeout = self._delayed[0][0] - now if self._delayed else None
                self._cond.wait(timeout)

    def _work(self) -> None:
        while True:
            job = self._next_job()
            if job is None:
                return
            self._run_job(job)
            outcome = job.outcome
            if outcome is not None:
                self._schedule_retries(outcome.retries)
                # Before the committer is released: when commit() returns, watchers have run.
                self._notify_watchers(outcome.changed)
            job.finish()

    def _run_job(self, job: _Job) -> None:
        """Run one job; what it raises goes to the caller waiting for it, never kills the
        worker. Descriptor failures are data (in the record); anything else an Exception
        raises is a bug: logged, counted, and reported as a TransactionError. A BaseException
        that is not an Exception (KeyboardInterrupt, SystemExit raised by a callback) reaches
        the caller as it is. The engine rolls the graph back in every case."""
        try:
            with self._lock:
                job.outcome = job.run(self._engine)
        except Exception as exc:
            log.exception("scheduler job failed")
            self._engine.stats.add(internal_errors=1)
            if isinstance(exc, TransactionError):
                job.error = exc
            else:
                job.error = TransactionError(f"internal error: {exc!r}")
                job.error.__cause__ = exc
        except BaseException as exc:
            log.error("scheduler job interrupted by %r", exc)
            self._engine.stats.add(internal_errors=1)
            job.error = exc

    def _schedule_retries(self, requests: list[RetryRequest]) -> None:
        if not requests:
            return
        with self._cond:
            if self._closed:
                return
            now = time.monotonic()
            for request in requests:
                job = _Job(_retry_runner(request), wait=False)
                heapq.heappush(self._delayed, (now + request.delay, next(self._tiebreak), job))
            self._cond.notify()

    def _notify_watchers(self, changed: list[ValueStatus]) -> None:
        if not changed:
            return
        with self._watchers_lock:
            watchers = list(self._watchers)
        for callback, selector in watchers:
            for status in changed:
                try:
                    if selector is None or selector(status.key):
                        callback(status)
                except Exception:
                    log.exception("value status watcher failed for %s", status.key)


def _retry_runner(request: RetryRequest) -> Callable[[Engine], TxnOutcome]:
    def run(engine: Engine) -> TxnOutcome:
        return engine.run_retry(request.keys, request.for_seq, request.attempt)

    return run


def _policy(retry: RetryPolicy | bool | None) -> RetryPolicy | None:
    if retry is None or retry is False:
        return None
    if retry is True:
        return RetryPolicy()
    if isinstance(retry, RetryPolicy):
        return retry
    raise TransactionError(f"retry must be a RetryPolicy, True/False or None, got {retry!r}")


__all__ = ["DescriptorError", "KVScheduler", "Txn"]

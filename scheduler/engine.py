"""The transaction pipeline, single-threaded: pre-process, simulate, log, execute, post-process.

No threads and no clock of its own (the clock is passed in); the only I/O is what descriptors do.
The facade in ``scheduler.scheduler`` serialises calls into it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from scheduler.api import (
    Key,
    Metadata,
    ResyncKind,
    RetryPolicy,
    TxnOperation,
    TxnType,
    Value,
    ValueOrigin,
    ValueState,
    ValueStatus,
)
from scheduler.conflicts import find_conflicts
from scheduler.context import WalkContext
from scheduler.effects import ExecuteEffects, PlanEffects
from scheduler.gcpause import GcPause
from scheduler.graph import Graph, Node
from scheduler.history import History
from scheduler.readiness import WaitedKeys, absent_labels
from scheduler.records import RecordedOp, RecordedValue, TxnRecord
from scheduler.refresh import Refresher, RefreshResult
from scheduler.registry import Registry
from scheduler.stats import StateChange, Stats
from scheduler.statuses import StatusTable
from scheduler.walk import Walker, base_of

txn_log = logging.getLogger("scheduler.txn")

NB = ValueOrigin.FROM_NB
SB = ValueOrigin.FROM_SB


@dataclass
class RetryRequest:
    """Base keys to retry in a later transaction."""

    keys: list[Key]
    for_seq: int
    attempt: int
    delay: float


@dataclass
class TxnOutcome:
    record: TxnRecord
    changed: list[ValueStatus] = field(default_factory=list)
    retries: list[RetryRequest] = field(default_factory=list)


Applier = Callable[[Walker], None]


@dataclass
class Txn:
    """One transaction to process: its context, record and the walk that applies its values."""

    ctx: WalkContext
    record: TxnRecord
    apply: Applier
    # Revert (NB transactions): the values in order, to undo those applied before a failure.
    revert_values: list[tuple[Key, Value]] | None = None
    # Values a resync's refresh changed before the walk: their statuses are published too.
    extra_touched: dict[Key, None] | None = None
    # Retry transactions: the transaction whose failed values they retry.
    retry_for: int | None = None


class Engine:
    def __init__(
        self,
        clock: Callable[[], float],
        *,
        record_history: bool = True,
        max_history: int = 10_000,
        history_age_limit: float = 24 * 3600.0,
        gc_pause_threshold: int = 1_000,
    ) -> None:
        self.clock = clock
        self.gc_pause_threshold = gc_pause_threshold
        self.graph = Graph()
        self.registry = Registry()
        self.history = History(
            max_transactions=max_history, age_limit=history_age_limit, enabled=record_history
        )
        self.stats = Stats()
        self.statuses = StatusTable()
        self.next_seq = 0
        self.resync_count = 0
        self._last_trim = 0.0

    # -- transactions ----------------------------------------------------------------------

    def run_nb(
        self,
        values: Mapping[Key, Value],
        *,
        revert: bool = False,
        retry: RetryPolicy | None = None,
        description: str = "",
        keep_retry_policy: bool = False,
    ) -> TxnOutcome:
        """An NB transaction. ``keep_retry_policy``: the values keep the retry policy they were
        last set with (re-application of values that waited for their descriptor)."""
        record = self._new_record(TxnType.NB_TRANSACTION, description)
        record.revert = revert
        record.values = [RecordedValue(k, v, NB) for k, v in values.items()]
        ctx = WalkContext(
            seq=record.seq,
            txn_type=record.txn_type,
            revert=revert,
            retry=retry,
            keep_retry_policy=keep_retry_policy,
        )
        ctx.txn_keys = set(values)
        ordered = self._ordered(values, ctx)
        return self._process(Txn(ctx, record, self._nb_applier(ordered), revert_values=ordered))

    def run_resync(
        self,
        values: Mapping[Key, Value] | None,
        kind: ResyncKind,
        *,
        retry: RetryPolicy | None = None,
        description: str = "",
        refresh: bool = True,
        scope: set[str] | None = None,
        delete_missing: bool = True,
    ) -> TxnOutcome:
        record = self._new_record(TxnType.NB_TRANSACTION, description)
        record.resync = kind
        self.resync_count += 1
        refreshed = RefreshResult()
        if kind is not ResyncKind.UPSTREAM and refresh:
            bulk = len(self.graph) + len(values or ()) >= self.gc_pause_threshold > 0
            with GcPause(bulk):
                refreshed = Refresher(
                    self.graph, self.registry, update_metadata_maps=True
                ).refresh_all(values if kind is ResyncKind.FULL else None, scope)
            self._count_refresh(refreshed)
        desired = self._resync_values(values, kind, scope, delete_missing)
        if kind is not ResyncKind.DOWNSTREAM:
            record.values = [RecordedValue(k, v, NB) for k, v in desired.items() if v is not None]
        ctx = WalkContext(seq=record.seq, txn_type=record.txn_type, retry=retry)
        ctx.txn_keys = set(desired)
        ordered = self._ordered(desired, ctx)
        follow_up = list(refreshed.availability_changed)
        apply = self._nb_applier(ordered, follow_up)
        return self._process(Txn(ctx, record, apply, extra_touched=refreshed.touched))

    def run_notifications(self, items: Iterable[tuple[Key, Value, Metadata]]) -> TxnOutcome:
        record = self._new_record(TxnType.SB_NOTIFICATION, "")
        accepted: dict[Key, tuple[Value, Metadata]] = {}
        ignored = 0
        for key, value, metadata in items:
            if self._accept_notification(key):
                accepted[key] = (value, metadata)
            else:
                ignored += 1
        if ignored:
            self.stats.add(notifications_ignored=ignored)
        record.values = [RecordedValue(k, v, SB) for k, (v, _) in accepted.items()]
        ctx = WalkContext(seq=record.seq, txn_type=record.txn_type)
        ctx.txn_keys = set(accepted)

        def apply(walker: Walker) -> None:
            for key, (value, metadata) in accepted.items():
                walker.apply_sb(key, value, metadata)

        return self._process(Txn(ctx, record, apply))

    def run_retry(self, keys: Iterable[Key], for_seq: int, attempt: int) -> TxnOutcome:
        record = self._new_record(TxnType.RETRY_FAILED_OPS, "")
        record.retry_for = for_seq
        record.retry_attempt = attempt
        live: list[Key] = []
        for key in sorted(set(keys)):
            node = self.graph.get(key)
            if node is None or node.nb_seq > for_seq:
                continue  # gone, or changed by a newer transaction: nothing stale is re-applied
            live.append(key)
        record.values = [RecordedValue(k, self.graph.nodes[k].nb_value, NB) for k in live]
        ctx = WalkContext(seq=record.seq, txn_type=record.txn_type, retry_attempt=attempt)
        ctx.txn_keys = set(live)

        def apply(walker: Walker) -> None:
            for key in live:
                walker.apply_retry(key)

        outcome = self._process(Txn(ctx, record, apply, retry_for=for_seq))
        self.stats.add(retries=1)
        return outcome

    def plan(
        self,
        values: Mapping[Key, Value],
        resync: ResyncKind | None = None,
        scope: set[str] | None = None,
    ) -> list[RecordedOp]:
        """Simulate a transaction (or resync) and return its plan: the graph is left unchanged."""
        graph = self.graph
        graph.begin_journal()
        try:
            if resync is not None:
                if resync is not ResyncKind.UPSTREAM:
                    # Retrieve only reads the SB; its effect on the graph is rolled back below.
                    Refresher(graph, self.registry, update_metadata_maps=False).refresh_all(
                        values if resync is ResyncKind.FULL else None, scope
                    )
                desired = self._resync_values(values, resync, scope)
            else:
                desired = dict(values)
            ctx = WalkContext(seq=self.next_seq, txn_type=TxnType.NB_TRANSACTION)
            ctx.txn_keys = set(desired)
            ctx.reset_outcome()
            walker = Walker(graph, self.registry, ctx, PlanEffects())
            self._nb_applier(self._ordered(desired, ctx))(walker)
            ops = ctx.recorded_ops()
            # What the values left waiting lack for good, on the graph as the plan leaves it
            # (`kvmesh plan`: "not on the node and not in the desired state").
            waited_keys = WaitedKeys(graph)
            for op in ops:
                node = graph.nodes.get(op.key)
                if op.new_state is ValueState.PENDING and node is not None \
                        and node.state is ValueState.PENDING:
                    op.absent = absent_labels(graph, node)
                    op.waits_for = waited_keys(node)
            return ops
        finally:
            graph.rollback()

    # -- pipeline --------------------------------------------------------------------------

    def _process(self, txn: Txn) -> TxnOutcome:
        with GcPause(len(txn.ctx.txn_keys) >= self.gc_pause_threshold > 0) as gc_pause:
            return self._process_paused(txn, gc_pause)

    def _process_paused(self, txn: Txn, gc_pause: GcPause) -> TxnOutcome:
        graph = self.graph
        ctx, record, apply = txn.ctx, txn.record, txn.apply
        # 1. planning: the walk runs on the live graph with an undo journal; southbound calls
        #    are collected, not made.
        graph.begin_journal()
        plan = PlanEffects()
        try:
            ctx.reset_outcome()
            apply(Walker(graph, self.registry, ctx, plan))
        except BaseException:
            graph.rollback()
            raise
        record.planned = ctx.recorded_ops()
        if txn_log.isEnabledFor(logging.INFO):
            txn_log.info("\n%s", record.header_text())

        # 2. execution: make the planned calls in order. If they all succeed the planned graph
        #    is the result (no second walk). At the first failure, the graph is rolled back and
        #    walked again for real, replaying the outcomes of the calls already made.
        # A plan that already fails (e.g. validation) with revert needs the real walk.
        gc_pause.resume()  # southbound calls run with the collector on
        execute = ExecuteEffects(self.registry)
        try:
            replay = [] if ctx.revert and ctx.errors else execute.run(plan.planned, graph.nodes)
        except BaseException:  # not a descriptor failure (those are Exceptions): give up cleanly
            graph.rollback()
            raise
        gc_pause.pause()
        if replay is None:
            graph.end_journal()
        else:
            graph.rollback()
            ctx.reset_outcome()
            processed: list[tuple[Key, Value]] = []
            if ctx.revert and txn.revert_values is not None:
                apply = self._tracking_applier(txn.revert_values, processed)
            walker = Walker(graph, self.registry, ctx, ExecuteEffects(self.registry, replay))
            apply(walker)
            walker.settle_failures()
            if ctx.stop and ctx.revert:
                self._revert(walker, processed)
            else:
                self._refresh_failed(walker)
        record.executed = ctx.recorded_ops()
        if record.executed == record.planned:
            record.executed = record.planned  # the usual case: keep one copy
        record.errors = dict(ctx.errors)
        record.end = self.clock()

        # 3. post-processing: history, statuses, retries, stats
        touched = dict(ctx.touched)
        if txn.extra_touched:
            touched.update(txn.extra_touched)
        changed = self._publish(touched, record)
        retries = self._retries(ctx, txn.retry_for)
        self.history.add_transaction(record)
        if record.end - self._last_trim > 60.0:
            self._last_trim = record.end
            self.history.trim(record.end)
        self.stats.count(record, graph_size=len(self.graph))
        if ctx.comparisons.errors:
            self.stats.add(comparison_errors=ctx.comparisons.errors)
        if txn_log.isEnabledFor(logging.INFO):
            txn_log.info("\n%s", record.executed_text())
        return TxnOutcome(record=record, changed=changed, retries=retries)

    def _nb_applier(
        self, ordered: list[tuple[Key, Value]], follow_up: list[Key] | None = None
    ) -> Applier:
        def apply(walker: Walker) -> None:
            for key, value in ordered:
                if walker.ctx.stop:
                    return
                walker.apply_nb(key, value)
            for key in follow_up or ():
                walker.refresh_dependents(key)

        return apply

    def _tracking_applier(
        self, ordered: list[tuple[Key, Value]], processed: list[tuple[Key, Value]]
    ) -> Applier:
        def apply(walker: Walker) -> None:
            for key, value in ordered:
                if walker.ctx.stop:
                    return
                node = self.graph.get(key)
                previous = (
                    node.nb_value
                    if node is not None and node.origin is NB and node.derived_from is None
                    else None
                )
                processed.append((key, previous))
                walker.apply_nb(key, value)

        return apply

    def _revert(self, walker: Walker, processed: list[tuple[Key, Value]]) -> None:
        ctx = walker.ctx
        failed_bases = {
            base_of(self.graph, node).key
            for key in ctx.failed
            if (node := self.graph.get(key)) is not None
        }
        self._refresh_keys(walker, failed_bases)
        with ctx.reverting_changes():
            for key, previous in reversed(processed):
                walker.apply_nb(key, previous)

    def _refresh_failed(self, walker: Walker) -> None:
        failed = walker.ctx.failed
        if not failed:
            return
        bases = {
            base_of(self.graph, node).key
            for key in failed
            if (node := self.graph.get(key)) is not None
        }
        self._refresh_keys(walker, bases)

    def _refresh_keys(self, walker: Walker, keys: set[Key]) -> None:
        if not keys:
            return
        result = Refresher(self.graph, self.registry, update_metadata_maps=True).refresh_keys(keys)
        self._count_refresh(result)
        walker.ctx.touched.update(result.touched)
        for key in result.availability_changed:
            node = self.graph.get(key)
            if (
                node is not None
                and node.last_op is TxnOperation.DELETE
                and node.state
                in (
                    ValueState.FAILED,
                    ValueState.RETRYING,
                )
            ):
                continue  # on its way out (its delete failed): dependents stay removed
            walker.refresh_dependents(key)

    # -- helpers ---------------------------------------------------------------------------

    def _new_record(self, txn_type: TxnType, description: str) -> TxnRecord:
        seq = self.next_seq
        self.next_seq += 1
        return TxnRecord(seq=seq, txn_type=txn_type, start=self.clock(), description=description,
                         shown=self.registry.shown)

    def _ordered(self, values: Mapping[Key, Value], ctx: WalkContext) -> list[tuple[Key, Value]]:
        """``values`` in order, with the NB values whose conflict verdict they change (see
        ``scheduler.conflicts``); the keys that give way go to ``ctx.refused``."""
        verdicts = find_conflicts(self.graph, self.registry, values)
        ctx.refused = verdicts.refused
        applied = {**values, **verdicts.reapply} if verdicts.reapply else values
        return self._order(applied, verdicts.refused)

    def _order(self, values: Mapping[Key, Value],
               giving_way: Mapping[Key, str] | None = None) -> list[tuple[Key, Value]]:
        """Deletes, then existing values that give way to a conflicting one (removed: the one
        that wins may need their place), then creates, then updates; by key within each group
        (deterministic)."""
        deletes: list[tuple[Key, Value]] = []
        removed: list[tuple[Key, Value]] = []
        creates: list[tuple[Key, Value]] = []
        updates: list[tuple[Key, Value]] = []
        nodes = self.graph.nodes
        for key, value in values.items():
            if value is None:
                deletes.append((key, value))
                continue
            node = nodes.get(key)
            if node is None or not node.available:
                creates.append((key, value))
            elif giving_way and key in giving_way:
                removed.append((key, value))
            else:
                updates.append((key, value))
        for group in (deletes, removed, creates, updates):
            group.sort(key=_key_of)
        return deletes + removed + creates + updates

    def _resync_values(
        self,
        values: Mapping[Key, Value] | None,
        kind: ResyncKind,
        scope: set[str] | None = None,
        delete_missing: bool = True,
    ) -> dict[Key, Value]:
        """The values a resync applies. ``scope``: only NB values of these descriptors are
        re-applied (downstream) or deleted when missing from ``values`` (full, upstream);
        without ``delete_missing`` those are kept with the value they have (adopted)."""

        def in_scope(node: Node) -> bool:
            if node.derived_from is not None or node.origin is not NB:
                return False
            return scope is None or (node.descriptor is not None and node.descriptor.name in scope)

        graph = self.graph
        if kind is ResyncKind.DOWNSTREAM:
            return {node.key: node.nb_value for node in graph.iter_nodes() if in_scope(node)}
        desired: dict[Key, Value] = dict(values or {})
        for node in graph.iter_nodes():
            if node.key not in desired and in_scope(node):
                if delete_missing:
                    desired[node.key] = None  # NB no longer wants it (OBTAINED values stay)
                else:
                    kept = node.nb_value if node.nb_value is not None else node.value
                    if kept is not None:
                        desired[node.key] = kept
        return desired

    def _accept_notification(self, key: Key) -> bool:
        node = self.graph.get(key)
        if node is not None:
            return node.origin is SB and node.derived_from is None
        try:
            return self.registry.lookup(key) is not None
        except ValueError:
            return False

    def _publish(self, touched: dict[Key, None], record: TxnRecord) -> list[ValueStatus]:
        changed: list[ValueStatus] = []
        previous_of = self.statuses.previous(touched)
        updates: dict[Key, ValueStatus | None] = {}
        transitions: list[StateChange] = []
        now = record.end if record.end is not None else self.clock()
        changes: list[tuple[Key, Node | None]] = []
        # A value a northbound transaction names gets its status republished (with this seq)
        # even when unchanged: whoever set it learns that it was processed. Resyncs, which
        # touch everything, publish real changes only.
        named = ({value.key for value in record.values}
                 if record.txn_type is TxnType.NB_TRANSACTION and record.resync is None
                 else set())
        waited_keys = WaitedKeys(self.graph)
        for key in touched:
            node = self.graph.get(key)
            changes.append((key, node))
            previous = previous_of.get(key)
            if node is None:
                if previous is None:
                    continue
                updates[key] = None
                transitions.append((previous.state, None))
                changed.append(
                    ValueStatus(
                        key=key,
                        state=ValueState.REMOVED,
                        last_op=TxnOperation.DELETE,
                        origin=previous.origin,
                        derived_from=previous.derived_from,
                        seq=record.seq,
                    )
                )
                continue
            status = _status_of(node, record.seq, waited_keys)
            if previous is not None and _same_status(previous, status) and key not in named:
                continue
            updates[key] = status
            transitions.append((None if previous is None else previous.state, status.state))
            changed.append(status)
        self.statuses.publish(updates)
        self.stats.states_changed(transitions)
        self.history.record_nodes(changes, now, record.seq)
        return changed

    def _count_refresh(self, result: RefreshResult) -> None:
        self.stats.add(
            retrieve_errors=len(result.retrieve_errors),
            retrieve_rejected=result.rejected,
            comparison_errors=result.comparisons.errors,
        )

    def _retries(self, ctx: WalkContext, retry_for: int | None) -> list[RetryRequest]:
        """Retries of the values left RETRYING: for the transaction that first failed them
        (``retry_for`` for the values this retry transaction retried, else this one)."""
        groups: dict[tuple[int, int, float], list[Key]] = {}
        for key, attempt in ctx.retry_keys.items():
            node = self.graph.get(key)
            if node is None or node.state is not ValueState.RETRYING:
                continue
            base = base_of(self.graph, node)
            policy = base.retry_policy
            if policy is None:
                continue
            for_seq = retry_for if retry_for is not None and ctx.retries(base.key) else ctx.seq
            groups.setdefault((for_seq, attempt, policy.delay(attempt)), []).append(base.key)
        return [
            RetryRequest(keys=sorted(set(keys)), for_seq=for_seq, attempt=attempt, delay=delay)
            for (for_seq, attempt, delay), keys in sorted(groups.items())
        ]

    # -- reads -----------------------------------------------------------------------------

    def status(self, key: Key) -> ValueStatus:
        found = self.statuses.get(key)
        return found if found is not None else ValueStatus(key=key, state=ValueState.NONEXISTENT)


def _status_of(node: Node, seq: int, waited_keys: WaitedKeys) -> ValueStatus:
    return ValueStatus(
        key=node.key,
        state=node.state,
        error=node.error,
        last_op=node.last_op,
        details=node.details,
        origin=node.origin,
        derived_from=node.derived_from,
        seq=seq,
        waits_for=waited_keys(node),
    )


def _same_status(a: ValueStatus, b: ValueStatus) -> bool:
    return (
        a.state is b.state
        and a.error is b.error
        and a.last_op is b.last_op
        and a.details == b.details
        and a.origin is b.origin
    )


def _key_of(pair: tuple[Key, Value]) -> Key:
    return pair[0]

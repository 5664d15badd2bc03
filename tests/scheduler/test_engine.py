"""The single-threaded engine with an injected clock: retry bookkeeping, history bounds."""

from __future__ import annotations

import pytest

from scheduler import RetryPolicy, TxnType, ValueState
from scheduler.context import WalkContext
from scheduler.engine import Engine
from scheduler.walk import Walker
from tests.scheduler.mocksb import MockSB, prefix_descriptor


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        self.now += 0.001
        return self.now


def engine_with(sb: MockSB, **kwargs: object) -> Engine:
    engine = Engine(FakeClock(), **kwargs)  # type: ignore[arg-type]
    engine.registry.register(prefix_descriptor(sb, "if", "if/"))
    return engine


def test_retry_requests_follow_policy_and_backoff() -> None:
    sb = MockSB()
    engine = engine_with(sb)
    for _ in range(3):
        sb.fail_next("if/a")
    outcome = engine.run_nb({"if/a": {"v": 1}}, retry=RetryPolicy(0.5, 3, True))
    assert engine.status("if/a").state is ValueState.RETRYING
    (request,) = outcome.retries
    assert (request.keys, request.attempt, request.delay) == (["if/a"], 1, 0.5)
    outcome = engine.run_retry(request.keys, request.for_seq, request.attempt)
    (request,) = outcome.retries
    assert (request.attempt, request.delay) == (2, 1.0)  # doubled
    assert request.for_seq == 0  # still for the original transaction
    outcome = engine.run_retry(request.keys, request.for_seq, request.attempt)
    (request,) = outcome.retries
    assert (request.attempt, request.delay) == (3, 2.0)
    outcome = engine.run_retry(request.keys, request.for_seq, request.attempt)
    assert outcome.retries == []
    assert engine.status("if/a").state is ValueState.CONFIGURED
    assert engine.stats.retries == 3


def test_value_changed_meanwhile_is_not_retried_with_stale_data() -> None:
    sb = MockSB()
    engine = engine_with(sb)
    sb.fail_next("if/a")
    outcome = engine.run_nb({"if/a": {"v": 1}}, retry=RetryPolicy(1.0, 3, False))
    (request,) = outcome.retries
    engine.run_nb({"if/a": {"v": 2}})  # a newer transaction sets another value: it succeeds
    assert sb.values == {"if/a": {"v": 2}}
    sb.pop_calls()
    outcome = engine.run_retry(request.keys, request.for_seq, request.attempt)
    assert outcome.record.txn_type is TxnType.RETRY_FAILED_OPS
    assert outcome.record.values == [] and outcome.record.executed == []
    assert sb.pop_calls() == []
    assert sb.values == {"if/a": {"v": 2}}


def test_retry_of_deleted_value_is_dropped() -> None:
    sb = MockSB()
    engine = engine_with(sb)
    sb.fail_next("if/a")
    (request,) = engine.run_nb({"if/a": {}}, retry=RetryPolicy(1.0, 3, False)).retries
    engine.run_nb({"if/a": None})
    outcome = engine.run_retry(request.keys, request.for_seq, request.attempt)
    assert outcome.record.executed == []
    assert engine.status("if/a").state is ValueState.NONEXISTENT


def test_history_is_bounded_by_count_and_operations() -> None:
    sb = MockSB()
    engine = engine_with(sb, max_history=5)
    for n in range(8):
        engine.run_nb({f"if/{n}": {}})
    assert [r.seq for r in engine.history.transactions()] == [3, 4, 5, 6, 7]
    engine.history.max_ops = 10
    engine.run_nb({f"if/x{n}": {} for n in range(12)})
    # The big record alone exceeds the budget but the newest record is always kept.
    assert [r.seq for r in engine.history.transactions()] == [8]


def test_history_age_trimming_keeps_recent_revisions() -> None:
    sb = MockSB()
    engine = engine_with(sb, history_age_limit=10.0)
    engine.run_nb({"if/a": {"v": 1}})
    engine.run_nb({"if/a": {"v": 2}})
    assert len(engine.history.timeline("if/a")) == 2
    engine.history.trim(engine.clock() + 100.0)
    timeline = engine.history.timeline("if/a")
    assert [rev.value for rev in timeline] == [{"v": 2}]  # the open revision stays
    assert engine.history.transactions() == []


def test_planned_equal_to_executed_is_stored_once() -> None:
    sb = MockSB()
    engine = engine_with(sb)
    record = engine.run_nb({"if/a": {}}).record
    assert record.planned is record.executed
    sb.fail_next("if/b")
    record = engine.run_nb({"if/b": {}}).record
    assert record.planned is not record.executed
    assert record.planned[0].new_state is ValueState.CONFIGURED
    assert record.executed[0].new_state is ValueState.FAILED


def test_gc_is_paused_only_during_bulk_planning_and_restored() -> None:
    import gc

    from scheduler.gcpause import GcPause

    seen: list[bool] = []
    sb = MockSB()
    engine = Engine(FakeClock(), gc_pause_threshold=3)

    def create(key: str, value: object) -> None:
        seen.append(gc.isenabled())  # southbound calls run with the collector on

    from scheduler import Descriptor

    planning: list[bool] = []

    def dependencies(key: str, value: object) -> list[object]:
        planning.append(gc.isenabled())
        return []

    engine.registry.register(
        Descriptor(
            name="x",
            key_selector=lambda k: True,
            create=create,
            delete=sb.delete,
            dependencies=dependencies,  # type: ignore[arg-type]
        )
    )
    assert gc.isenabled()
    engine.run_nb({f"k{n}": {} for n in range(5)})
    assert planning == [False] * 5
    assert seen == [True] * 5
    assert gc.isenabled()
    planning.clear()
    engine.run_nb({"small": {}})  # below the threshold: not paused
    assert planning == [True]
    gc.disable()
    try:
        with GcPause(True):
            assert not gc.isenabled()
        assert not gc.isenabled()  # the application's choice is left alone
    finally:
        gc.enable()


class _Abort(BaseException):
    """Not a descriptor failure (those are Exceptions): it goes through the walk."""


def test_revert_flag_does_not_leak_when_a_descriptor_raises_inside_revert(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sb = MockSB()
    engine = engine_with(sb)
    contexts: list[WalkContext] = []
    revert = Engine._revert

    def spy(self: Engine, walker: Walker, processed: list[tuple[str, object]]) -> None:
        contexts.append(walker.ctx)
        revert(self, walker, processed)

    monkeypatch.setattr(Engine, "_revert", spy)
    engine.run_nb({"if/a": {"v": 1}})
    # The transaction deletes if/a, then fails at if/b: if/a is put back, and that create
    # raises through the walk.
    sb.fail_next("if/b", side_effect=lambda: sb.fail_next("if/a", _Abort()))
    with pytest.raises(_Abort):
        engine.run_nb({"if/a": None, "if/b": {"v": 1}}, revert=True)
    (ctx,) = contexts
    assert ctx.reverting is False

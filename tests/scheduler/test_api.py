"""The rest of the public API: validation, unimplemented values, plan, history, timelines,
snapshots, DOT, stats, bad input, threads, close."""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest

from scheduler import (
    Dependency,
    Descriptor,
    DescriptorError,
    InvalidValueError,
    KVScheduler,
    ResyncKind,
    RetryPolicy,
    SchedulerClosedError,
    TransactionError,
    TxnOperation,
    TxnType,
    ValueOrigin,
    ValueState,
)
from tests.scheduler.mocksb import MockSB, prefix_descriptor
from tests.util import wait_until

IF = "if/"
RT = "rt/"


def base_setup(sched: KVScheduler, sb: MockSB, **iface: Any) -> None:
    sched.register_descriptor(prefix_descriptor(sb, "if", IF, **iface))
    sched.register_descriptor(
        prefix_descriptor(sb, "rt", RT, deps=lambda k, v: [Dependency(label="if", key=IF + v)])
    )


def state(sched: KVScheduler, key: str) -> ValueState:
    return sched.get_value_status(key).state


def test_invalid_value_is_never_applied_nor_retried(sched: KVScheduler, sb: MockSB) -> None:
    def validate(key: str, value: dict[str, Any]) -> None:
        if value.get("mtu", 1500) > 9000:
            raise InvalidValueError("mtu too large", fields=("mtu",))

    base_setup(sched, sb, validate=validate)
    with pytest.raises(TransactionError) as info:
        sched.start_txn().set_value(IF + "a", {"mtu": 10000}).commit(
            retry=RetryPolicy(0.001, 3, False)
        )
    assert isinstance(info.value.errors[IF + "a"][1], InvalidValueError)
    status = sched.get_value_status(IF + "a")
    assert status.state is ValueState.INVALID and status.details == ("mtu",)
    assert sb.pop_calls() == []
    sched.transaction_barrier()
    assert sched.stats()["scheduled_retries"] == 0
    # Fixed by a valid value.
    sched.start_txn().set_value(IF + "a", {"mtu": 9000}).commit()
    assert state(sched, IF + "a") is ValueState.CONFIGURED
    # An invalid update keeps the old value in SB.
    with pytest.raises(TransactionError):
        sched.start_txn().set_value(IF + "a", {"mtu": 20000}).commit()
    assert state(sched, IF + "a") is ValueState.INVALID
    assert sb.values[IF + "a"] == {"mtu": 9000}


def test_non_retriable_failure_is_failed(sched: KVScheduler, sb: MockSB) -> None:
    base_setup(sched, sb, is_retriable=lambda exc: not isinstance(exc, PermissionError))
    sb.fail_next(IF + "a", PermissionError("denied"))
    with pytest.raises(TransactionError):
        sched.start_txn().set_value(IF + "a", {}).commit(retry=RetryPolicy(0.001, 3, False))
    assert state(sched, IF + "a") is ValueState.FAILED


def test_unimplemented_value_applied_when_descriptor_registers(
    sched: KVScheduler, sb: MockSB
) -> None:
    sched.start_txn().set_value("later/x", {"a": 1}).commit()
    assert state(sched, "later/x") is ValueState.UNIMPLEMENTED
    sched.register_descriptor(prefix_descriptor(sb, "later", "later/"))
    wait_until(lambda: state(sched, "later/x") is ValueState.CONFIGURED, message="applied")
    assert sb.values == {"later/x": {"a": 1}}


def test_descriptor_registration_errors(sched: KVScheduler, sb: MockSB) -> None:
    sched.register_descriptor(prefix_descriptor(sb, "a", "a/", retrieve_dependencies=("b",)))
    with pytest.raises(DescriptorError):
        sched.register_descriptor(prefix_descriptor(sb, "a", "x/"))
    with pytest.raises(DescriptorError, match="cycle"):
        sched.register_descriptor(prefix_descriptor(sb, "b", "b/", retrieve_dependencies=("a",)))
    with pytest.raises(ValueError):
        Dependency(label="x")
    # Two descriptors claiming the same key: the transaction reports it, nothing crashes.
    sched.register_descriptor(prefix_descriptor(sb, "a2", "a/b"))
    with pytest.raises(TransactionError, match="several descriptors"):
        sched.start_txn().set_value("a/b1", {}).commit()


def test_retrieve_order_is_dependencies_first_then_by_name(sb: MockSB) -> None:
    from itertools import permutations

    from scheduler.registry import Registry

    needs = {"a": (), "b": ("d", "missing"), "c": ("e",), "d": (), "e": ()}
    for registration in permutations(needs):
        registry = Registry()
        for name in registration:
            registry.register(prefix_descriptor(sb, name, f"{name}/",
                                                retrieve_dependencies=needs[name]))
        # Whatever the registration order: of those free to go next, the smallest name.
        order = [d.name for d in registry.retrieve_order()]
        assert order == ["a", "d", "b", "e", "c"], registration


def test_a_retrieve_dependency_cycle_is_refused_and_named(sb: MockSB) -> None:
    from scheduler.registry import Registry

    registry = Registry()
    registry.register(prefix_descriptor(sb, "x", "x/", retrieve_dependencies=("y",)))
    registry.register(prefix_descriptor(sb, "y", "y/", retrieve_dependencies=("z",)))
    with pytest.raises(DescriptorError) as refused:
        registry.register(prefix_descriptor(sb, "z", "z/", retrieve_dependencies=("x",)))
    rotations = ("xyzx", "yzxy", "zxyz")
    assert str(refused.value) in {"cycle in retrieve_dependencies: " + " needs ".join(
        repr(name) for name in rotation) for rotation in rotations}
    assert [d.name for d in registry.retrieve_order()] == ["y", "x"]  # as before the refusal


def test_bad_input_is_rejected_and_counted(sched: KVScheduler, sb: MockSB) -> None:
    base_setup(sched, sb)
    with pytest.raises(TransactionError):
        sched.start_txn().set_value("", {}).commit()
    with pytest.raises(TransactionError):
        sched.start_txn().set_value(42, {}).commit()  # type: ignore[arg-type]
    with pytest.raises(TransactionError):
        sched.resync({}, kind="sideways")
    with pytest.raises(ValueError):
        sched.push_sb_notification("", None)
    with pytest.raises(ValueError):
        sched.dump(view="everything")
    with pytest.raises(KeyError):
        sched.get_metadata_map("nope")
    with pytest.raises(TransactionError):
        sched.start_txn().set_value(IF + "a", {}).commit(retry="often")  # type: ignore[arg-type]
    assert sched.stats()["rejected_requests"] == 5
    sched.start_txn().set_value(IF + "a", {}).commit()  # still fine
    assert state(sched, IF + "a") is ValueState.CONFIGURED


def test_derived_key_cannot_be_set_by_nb(sched: KVScheduler, sb: MockSB) -> None:
    base_setup(sched, sb, derived=lambda k, v: [(k + "/addr", {})])
    # The "if" descriptor also selects its own derived keys: it derives forever. Refused.
    with pytest.raises(TransactionError, match="nested deeper"):
        sched.start_txn().set_value(IF + "a", {}).commit()
    with pytest.raises(TransactionError, match="derived"):
        sched.start_txn().set_value(IF + "a/addr", {"x": 1}).commit()


def test_plan_is_read_only(sched: KVScheduler, sb: MockSB) -> None:
    base_setup(sched, sb)
    sched.start_txn().set_value(RT + "r", "a").commit()
    history_len = len(sched.transaction_history())
    plan = sched.plan({IF + "a": {}})
    assert [(op.op, op.key, op.new_state) for op in plan] == [
        (TxnOperation.CREATE, IF + "a", ValueState.CONFIGURED),
        (TxnOperation.CREATE, RT + "r", ValueState.CONFIGURED),
    ]
    assert plan[1].prev_state is ValueState.PENDING
    assert sb.pop_calls() == []
    assert state(sched, RT + "r") is ValueState.PENDING
    assert state(sched, IF + "a") is ValueState.NONEXISTENT
    assert len(sched.transaction_history()) == history_len
    assert sched.plan({}) == []
    # A full-resync plan: deletes what NB does not list, SB untouched.
    sched.start_txn().set_value(IF + "a", {}).commit()
    sb.pop_calls()
    plan = sched.plan({}, resync="full")
    assert [(op.op.value, op.key) for op in plan] == [("DELETE", RT + "r"), ("DELETE", IF + "a")]
    assert [c[0] for c in sb.pop_calls()] == ["retrieve", "retrieve"]
    assert state(sched, IF + "a") is ValueState.CONFIGURED
    # An unchanged config plans to nothing.
    assert sched.plan({IF + "a": {}, RT + "r": "a"}, resync="full") == []


def test_history_timeline_snapshot_and_log(
    sched: KVScheduler, sb: MockSB, caplog: pytest.LogCaptureFixture
) -> None:
    base_setup(sched, sb)
    with caplog.at_level(logging.INFO, logger="scheduler.txn"):
        s0 = sched.start_txn().set_value(RT + "r", "a").commit(description="route first")
    text = caplog.text
    assert "| Transaction #0" in text and "NB transaction |" in text
    assert "* planned operations:" in text and "1. CREATE [NOOP IS-PENDING]:" in text
    assert "* executed operations (" in text and "x #0" in text
    assert "- Description: route first" in text
    s1 = sched.start_txn().set_value(IF + "a", {}).commit()
    s2 = sched.start_txn().set_value(IF + "a", None).commit()
    records = sched.transaction_history()
    assert [r.seq for r in records] == [s0, s1, s2]
    assert sched.transaction_history(seq=s1)[0].executed[1].key == RT + "r"
    mid = records[1].end
    assert mid is not None
    assert [r.seq for r in sched.transaction_history(since=records[1].start)] == [s1, s2]
    assert [r.seq for r in sched.transaction_history(until=records[0].start)] == [s0]
    timeline = sched.key_timeline(RT + "r")
    assert [rev.state for rev in timeline] == [
        ValueState.PENDING,
        ValueState.CONFIGURED,
        ValueState.PENDING,
    ]
    assert timeline[0].until == timeline[1].since
    snapshot = {rev.key: rev.state for rev in sched.graph_snapshot(mid)}
    assert snapshot == {IF + "a": ValueState.CONFIGURED, RT + "r": ValueState.CONFIGURED}
    now = {rev.key: rev.state for rev in sched.graph_snapshot()}
    assert now == {RT + "r": ValueState.PENDING}
    as_dict = records[1].as_dict()
    assert as_dict["executed"][1]["flags"] == ["WAS-PENDING"]
    assert "Transaction #1" in records[1].text()


def test_graph_dot_and_stats(sched: KVScheduler, sb: MockSB) -> None:
    base_setup(sched, sb)
    sched.start_txn().set_value(RT + "r", "a").set_value(RT + "s", "b").commit()
    sched.start_txn().set_value(IF + "a", {}).commit()
    dot = sched.graph_dot()
    assert dot.startswith("digraph kvscheduler {")
    assert '"rt/s" -> "if/b" [label="if", color=red];' in dot
    assert '"rt/r" -> "if/a" [label="if", color=black];' in dot
    assert "fillcolor=pink" in dot
    stats = sched.stats()
    assert stats["transactions"] == 2
    assert stats["operations"] == {"CREATE": 2}
    assert stats["pending"] == 1
    assert stats["values_by_state"] == {"CONFIGURED": 2, "PENDING": 1}
    assert stats["graph_size"] == 3


def test_concurrent_commits_and_notifications(sb: MockSB) -> None:
    with KVScheduler() as sched:
        sched.register_descriptor(prefix_descriptor(sb, "if", IF))
        sched.register_descriptor(
            prefix_descriptor(sb, "host", "host/", crud=False, with_retrieve=False)
        )
        sched.register_descriptor(
            prefix_descriptor(
                sb, "rt", RT, deps=lambda k, v: [Dependency(label="host", key="host/" + v)]
            )
        )
        errors: list[BaseException] = []

        def committer(n: int) -> None:
            try:
                for i in range(20):
                    sched.start_txn().set_value(f"{IF}{n}-{i}", {"i": i}).set_value(
                        f"{RT}{n}-{i}", f"h{i % 5}"
                    ).commit()
            except BaseException as exc:
                errors.append(exc)

        def notifier() -> None:
            for i in range(5):
                sched.push_sb_notification(f"host/h{i}", {"up": True})

        threads = [threading.Thread(target=committer, args=(n,)) for n in range(6)]
        threads.append(threading.Thread(target=notifier))
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        assert not errors
        sched.transaction_barrier()
        for n in range(6):
            for i in range(20):
                assert state(sched, f"{IF}{n}-{i}") is ValueState.CONFIGURED
                assert state(sched, f"{RT}{n}-{i}") is ValueState.CONFIGURED
        seqs = [r.seq for r in sched.transaction_history()]
        assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
        assert len(sb.values) == 6 * 20 * 2


def test_commit_from_callback_is_refused_not_deadlocked(sb: MockSB) -> None:
    with KVScheduler() as sched:
        caught: list[BaseException] = []

        def create(key: str, value: Any) -> None:
            try:
                sched.start_txn().set_value("b/x", {}).commit()
            except TransactionError as exc:
                caught.append(exc)
            sched.push_sb_notification("n/x", {})  # allowed: queued

        sched.register_descriptor(
            Descriptor(
                name="a",
                key_selector=lambda k: k.startswith("a/"),
                create=create,
                delete=lambda *a: None,
            )
        )
        sched.register_descriptor(Descriptor(name="n", key_selector=lambda k: k.startswith("n/")))
        sched.start_txn().set_value("a/x", {}).commit()
        assert len(caught) == 1 and "descriptor callback" in str(caught[0])
        sched.transaction_barrier()
        assert state(sched, "n/x") is ValueState.OBTAINED


def test_close_rejects_new_work_and_cancels_retries(sb: MockSB) -> None:
    sched = KVScheduler()
    sched.register_descriptor(prefix_descriptor(sb, "if", IF))
    sb.fail_next(IF + "a")
    with pytest.raises(TransactionError):
        sched.start_txn().set_value(IF + "a", {}).commit(retry=RetryPolicy(3600, 1, False))
    assert sched.stats()["scheduled_retries"] == 1
    sched.close()
    sched.close()  # idempotent
    with pytest.raises(SchedulerClosedError):
        sched.start_txn().set_value(IF + "b", {}).commit()
    with pytest.raises(SchedulerClosedError):
        sched.push_sb_notification(IF + "c", {})


def test_watch_value_status_selector_and_cancel(sched: KVScheduler, sb: MockSB) -> None:
    base_setup(sched, sb)
    seen: list[tuple[str, ValueState, str]] = []
    cancel = sched.watch_value_status(
        lambda s: seen.append((s.key, s.state, s.last_op.value)),
        key_selector=lambda key: key.startswith(RT),
    )
    sched.start_txn().set_value(RT + "r", "a").set_value(IF + "a", {}).commit()
    sched.start_txn().set_value(RT + "r", None).commit()
    assert seen == [
        (RT + "r", ValueState.CONFIGURED, "CREATE"),
        (RT + "r", ValueState.REMOVED, "DELETE"),
    ]
    cancel()
    sched.start_txn().set_value(RT + "r", "a").commit()
    assert len(seen) == 2
    assert sched.get_value_status(IF + "a").origin is ValueOrigin.FROM_NB


def test_broken_descriptor_callbacks_are_errors_not_crashes(sched: KVScheduler, sb: MockSB) -> None:
    def bad_deps(key: str, value: Any) -> list[Any]:
        if value.get("boom"):
            raise RuntimeError("deps exploded")
        return ["not a dependency"] if value.get("junk") else []

    def exploding_label(key: str) -> str:
        raise ZeroDivisionError("label")

    def exploding_selector(key: str) -> bool:
        if key.startswith("sel/"):
            raise ZeroDivisionError("selector")
        return False

    def bad_comparator(key: str, a: Any, b: Any) -> bool:
        raise RuntimeError("cannot compare")

    sched.register_descriptor(
        Descriptor(
            name="bad",
            key_selector=lambda k: k.startswith("bad/"),
            key_label=exploding_label,
            create=sb.create,
            delete=sb.delete,
            update=sb.update,
            dependencies=bad_deps,
            value_comparator=bad_comparator,
            with_metadata=True,
        )
    )
    sched.register_descriptor(Descriptor(name="selector", key_selector=exploding_selector))
    with pytest.raises(TransactionError) as info:
        sched.start_txn().set_value("bad/a", {"boom": True}).set_value(
            "bad/b", {"junk": True}
        ).set_value("bad/c", {}).set_value("sel/x", {}).commit()
    assert set(info.value.errors) == {"bad/a", "bad/b", "sel/x"}
    assert state(sched, "bad/a") is ValueState.INVALID
    assert "deps exploded" in sched.get_value_status("bad/a").error_message
    assert state(sched, "bad/b") is ValueState.INVALID
    assert state(sched, "bad/c") is ValueState.CONFIGURED
    assert dict(sched.get_metadata_map("bad")) == {"bad/c": sb.metadata["bad/c"]}  # label = key
    # The broken comparator makes every value look changed: an update, not a crash.
    sched.start_txn().set_value("bad/c", {}).commit()
    assert sb.pop_calls()[-1] == ("update", "bad/c")
    # The scheduler keeps working.
    sched.register_descriptor(prefix_descriptor(sb, "if", IF))
    sched.start_txn().set_value(IF + "ok", {}).commit()
    assert state(sched, IF + "ok") is ValueState.CONFIGURED


def test_transaction_error_message_stays_short_with_many_failures(sched: KVScheduler) -> None:
    def refuse(key: str, value: Any) -> None:
        raise InvalidValueError(f"refused {key}" + ("!" * 1000 if key == IF + "0000" else ""))

    sched.register_descriptor(
        Descriptor(name="if", key_selector=lambda k: k.startswith(IF), create=refuse)
    )
    txn = sched.start_txn()
    for n in range(1000):
        txn.set_value(f"{IF}{n:04}", {})
    with pytest.raises(TransactionError) as info:
        txn.commit()
    errors = info.value.errors
    assert len(errors) == 1000  # complete
    assert all(op == "CREATE" for op, _ in errors.values())
    message = str(info.value)
    assert message.startswith(f"transaction #{info.value.seq} failed: 1000 errors: ")
    assert message.endswith(", ... and 995 more")
    for n in range(5):
        assert f"{IF}{n:04} (CREATE): refused {IF}{n:04}" in message
    assert f"{IF}0005" not in message
    long_error = f"refused {IF}0000"
    long_error += "!" * (TransactionError.SHOWN_ERROR_CHARS - len(long_error))
    assert long_error + "..., " in message  # the long error is cut
    assert len(message) < 1000


def test_transaction_error_message_with_few_failures_names_them_all(
    sched: KVScheduler, sb: MockSB
) -> None:
    base_setup(sched, sb)
    sb.fail_next(IF + "a")
    with pytest.raises(TransactionError) as info:
        sched.start_txn().set_value(IF + "a", {}).commit()
    assert str(info.value) == (
        f"transaction #{info.value.seq} failed: {IF}a (CREATE): planned failure of {IF}a"
    )
    for key in ("b", "c"):
        sb.fail_next(IF + key)
    with pytest.raises(TransactionError) as info:
        sched.start_txn().set_value(IF + "b", {}).set_value(IF + "c", {}).commit()
    assert str(info.value) == (
        f"transaction #{info.value.seq} failed: 2 errors: "
        f"{IF}b (CREATE): planned failure of {IF}b, {IF}c (CREATE): planned failure of {IF}c"
    )


def test_upstream_resync_never_calls_retrieve(sched: KVScheduler, sb: MockSB) -> None:
    base_setup(sched, sb)
    sched.start_txn().set_value(IF + "a", {}).set_value(IF + "b", {}).commit()
    sb.seed(IF + "drift", {"made": "by someone else"}, ValueOrigin.FROM_SB)
    sb.pop_calls()
    sched.resync({IF + "a": {"mtu": 9000}}, kind="upstream")
    calls = sb.pop_calls()
    assert not [call for call in calls if call[0] == "retrieve"], calls
    # The desired state was applied from what the graph knows, not from the SB.
    assert calls == [("delete", IF + "b"), ("update", IF + "a")]
    assert state(sched, IF + "drift") is ValueState.NONEXISTENT
    # A full resync does retrieve (and so learns of the drift): the check above can fail.
    sched.resync({IF + "a": {"mtu": 9000}}, kind="full")
    assert ("retrieve", IF + "a") in sb.pop_calls()
    assert state(sched, IF + "drift") is ValueState.OBTAINED


@pytest.mark.parametrize(
    ("kind", "shown"),
    [("full", "Full resync"), ("upstream", "Upstream resync"), ("downstream", "Downstream resync")],
)
def test_resync_is_recorded_with_its_resync_type(
    sched: KVScheduler, sb: MockSB, kind: str, shown: str
) -> None:
    """As Ligato records them: a resync is an NB transaction with its own resync type (Ligato's
    ResyncType beside TxnType), shown in the log and counted apart from plain transactions."""
    base_setup(sched, sb)
    seq = sched.resync({IF + "a": {}} if kind != "downstream" else None, kind=kind)
    (record,) = sched.transaction_history(seq=seq)
    assert record.txn_type is TxnType.NB_TRANSACTION
    assert record.resync is ResyncKind(kind)
    assert record.as_dict()["type"] == "NB transaction"
    assert record.as_dict()["resync"] == kind
    text = record.text()
    assert f"NB transaction ({shown}) |" in text
    assert f"      - type: NB transaction, {kind} resync\n" in text
    by_type = sched.stats()["transactions_by_type"]
    assert isinstance(by_type, dict) and by_type[f"NB transaction, {kind} resync"] == 1


def test_a_plan_tells_a_dependency_nothing_provides_from_one_that_waits(
    sched: KVScheduler, sb: MockSB
) -> None:
    """`kvmesh plan` reports values that would stay PENDING with why: `absent` names the
    missing dependencies nothing in the graph provides (desired or found in the southbound), or
    will provide (a value a waiting value derives once created); a dependency on a desired value
    that itself waits, or on what it will derive, is missing but not absent."""
    sched.register_descriptor(prefix_descriptor(
        sb, "if", IF, deps=lambda k, v: [Dependency(label="uplink " + v["up"], key="up/" + v["up"])]
        if "up" in v else [], derived=lambda k, v: [("addr/" + k[len(IF):], {"of": k})]))
    sched.register_descriptor(prefix_descriptor(sb, "addr", "addr/"))
    sched.register_descriptor(prefix_descriptor(sb, "rt", RT, deps=lambda k, v: [
        Dependency(label="if", key=IF + v), Dependency(label="addr", key="addr/" + v)]))
    plan = sched.plan({IF + "a": {"up": "x"}, RT + "r": "a", RT + "s": "b"})
    assert [(op.key, op.new_state, op.details, op.absent) for op in plan] == [
        (IF + "a", ValueState.PENDING, ("uplink x",), ("uplink x",)),
        (RT + "r", ValueState.PENDING, ("if", "addr"), ()),
        (RT + "s", ValueState.PENDING, ("if", "addr"), ("if", "addr")),
    ]
    assert sched.plan({IF + "a": {}, RT + "r": "a"})[-1].new_state is ValueState.CONFIGURED


def test_a_pending_value_says_what_it_waits_for_by_key(sched: KVScheduler, sb: MockSB) -> None:
    """A PENDING value's status and plan operation name each missing dependency by the keys any
    one of which satisfies it (`kvmesh apply --wait` and `plan` match them against what other
    values make): a key, the named keys of an any-of dependency, the desired values it accepts,
    the waiting value that will derive what it accepts, nothing for a predicate over a key space
    nothing in the graph matches. A satisfied dependency is not listed; a value no longer
    PENDING lists nothing."""
    named = ("up/x", "host/x")
    sched.register_descriptor(prefix_descriptor(sb, "up", "up/"))
    sched.register_descriptor(prefix_descriptor(sb, "addr", "addr/"))
    sched.register_descriptor(prefix_descriptor(
        sb, "if", IF, deps=lambda k, v: [Dependency(label="uplink z", key="up/z")],
        derived=lambda k, v: [("addr/" + k[len(IF):], {"of": k})]))
    sched.register_descriptor(prefix_descriptor(sb, "rt", RT, deps=lambda k, v: [
        Dependency(label="if", key=IF + "a"),
        Dependency(label="link x", any_of=lambda key: key in named, key_prefixes=named),
        Dependency(label="an address", any_of=lambda key: key == "addr/" + v,
                   key_prefixes=("addr/",)),
        Dependency(label="an uplink", any_of=lambda key: len(key) > len("up/"),
                   key_prefixes=("up/",))]))
    (op,) = sched.plan({RT + "r": "a"})
    assert op.new_state is ValueState.PENDING
    assert op.waits_for == ((IF + "a",), named, (), ())
    sched.start_txn().set_value(RT + "r", "a").set_value(IF + "a", {}).commit()
    status = sched.get_value_status(RT + "r")
    assert status.state is ValueState.PENDING
    assert status.waits_for == ((IF + "a",), named, (IF + "a",), ())
    sched.start_txn().set_value("up/z", {}).set_value("up/x", {}).commit()
    assert sched.get_value_status(RT + "r").state is ValueState.CONFIGURED
    assert sched.get_value_status(RT + "r").waits_for == ()

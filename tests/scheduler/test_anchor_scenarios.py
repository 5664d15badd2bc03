"""The anchor's scenarios (reference §7): data changes, revert, cycles, failed derived values,
resyncs, retrieve ordering, notifications (with retry)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from scheduler import (
    Dependency,
    Descriptor,
    KVScheduler,
    RetryPolicy,
    TransactionError,
    TxnType,
    ValueOrigin,
    ValueState,
)
from tests.scheduler.mocksb import MockSB, prefix_descriptor
from tests.util import wait_until

A = "/prefixA/"
B = "/prefixB/"
C = "/prefixC/"


def items(*names: str) -> dict[str, Any]:
    return {"items": list(names)}


def derive_items(key: str, value: dict[str, Any]) -> list[tuple[str, Any]]:
    return [(f"{key}/{item}", {"item": item}) for item in value.get("items", ())]


def state(sched: KVScheduler, key: str) -> ValueState:
    return sched.get_value_status(key).state


def executed(sched: KVScheduler, seq: int | None) -> list[tuple[str, str, ValueState]]:
    (record,) = sched.transaction_history(seq=seq)
    return [(op.op.value, op.key, op.new_state) for op in record.executed]


def is_base(prefix: str) -> Callable[[str], bool]:
    return lambda key: key.startswith(prefix) and key.count("/") == 2


def label_after(prefix: str) -> Callable[[str], str]:
    return lambda key: key[len(prefix) :]


def is_item(prefix: str) -> Callable[[str], bool]:
    return lambda key: key.startswith(prefix) and key.count("/") == 3


def three_descriptors(sb: MockSB, sched: KVScheduler) -> None:
    """A: base values deriving items. B: its items depend on the same-named item of A/base1.
    C: every change is a re-create."""
    for prefix, name in ((A, "A"), (B, "B"), (C, "C")):
        base = Descriptor(
            name=name,
            key_selector=is_base(prefix),
            key_label=label_after(prefix),
            create=sb.create,
            delete=sb.delete,
            update=sb.update,
            update_with_recreate=(lambda *a: True) if name == "C" else None,
            retrieve=sb.retrieve_for(is_base(prefix)),
            derived_values=derive_items,
            with_metadata=True,
        )
        sched.register_descriptor(base)
    sched.register_descriptor(
        Descriptor(name="A-items", key_selector=is_item(A), create=sb.create, delete=sb.delete)
    )
    sched.register_descriptor(
        Descriptor(
            name="B-items",
            key_selector=is_item(B),
            create=sb.create,
            delete=sb.delete,
            dependencies=lambda key, value: [
                Dependency(label=value["item"], key=f"{A}base1/{value['item']}")
            ],
        )
    )
    # C items are properties (no descriptor).


def first_txn(sched: KVScheduler) -> int:
    return (
        sched.start_txn()
        .set_value(A + "base1", items("item2"))
        .set_value(B + "base2", items("item1", "item2"))
        .set_value(C + "base3", items("item1"))
        .commit(description="first")
    )


def test_data_change_transactions(sched: KVScheduler, sb: MockSB) -> None:
    three_descriptors(sb, sched)
    seq = first_txn(sched)
    assert executed(sched, seq) == [
        ("CREATE", A + "base1", ValueState.CONFIGURED),
        ("CREATE", A + "base1/item2", ValueState.CONFIGURED),
        ("CREATE", B + "base2", ValueState.CONFIGURED),
        ("CREATE", B + "base2/item1", ValueState.PENDING),
        ("CREATE", B + "base2/item2", ValueState.CONFIGURED),
        ("CREATE", C + "base3", ValueState.CONFIGURED),
        ("CREATE", C + "base3/item1", ValueState.CONFIGURED),
    ]
    (record,) = sched.transaction_history(seq=seq)
    assert record.planned == record.executed
    assert record.description == "first"
    status = sched.get_value_status(B + "base2/item1")
    assert status.state is ValueState.PENDING and status.details == ("item1",)
    assert status.derived_from == B + "base2"
    # Dumps in the three views.
    assert [v.key for v in sched.dump(descriptor="A", view="NB")] == [A + "base1"]
    assert [v.key for v in sched.dump(descriptor="A", view="SB")] == [A + "base1"]
    cached = sched.dump(key_prefix=B)
    assert [(v.key, v.metadata, v.origin) for v in cached] == [
        (B + "base2", sb.metadata[B + "base2"], ValueOrigin.FROM_NB)
    ]
    assert dict(sched.get_metadata_map("C")) == {"base3": sb.metadata[C + "base3"]}

    sb.pop_calls()
    seq = (
        sched.start_txn()
        .set_value(A + "base1", items("item1"))
        .set_value(C + "base3", items("item1", "x"))
        .commit()
    )
    assert executed(sched, seq) == [
        ("DELETE", B + "base2/item2", ValueState.PENDING),
        ("DELETE", A + "base1/item2", ValueState.REMOVED),
        ("UPDATE", A + "base1", ValueState.CONFIGURED),
        ("CREATE", A + "base1/item1", ValueState.CONFIGURED),
        ("CREATE", B + "base2/item1", ValueState.CONFIGURED),
        ("DELETE", C + "base3/item1", ValueState.REMOVED),
        ("DELETE", C + "base3", ValueState.REMOVED),
        ("CREATE", C + "base3", ValueState.CONFIGURED),
        ("CREATE", C + "base3/item1", ValueState.CONFIGURED),
        ("CREATE", C + "base3/x", ValueState.CONFIGURED),
    ]
    (record,) = sched.transaction_history(seq=seq)
    assert [op.recreate for op in record.executed[6:8]] == [True, True]
    assert state(sched, B + "base2/item2") is ValueState.PENDING
    assert state(sched, A + "base1/item2") is ValueState.NONEXISTENT
    assert sb.pop_calls() == [
        ("delete", B + "base2/item2"),
        ("delete", A + "base1/item2"),
        ("update", A + "base1"),
        ("create", A + "base1/item1"),
        ("create", B + "base2/item1"),
        ("delete", C + "base3"),
        ("create", C + "base3"),
    ]


def test_data_change_with_revert(sched: KVScheduler, sb: MockSB) -> None:
    three_descriptors(sb, sched)
    first_txn(sched)
    sb_before = dict(sb.values)
    status_before = {
        key: sched.get_value_status(key)[:5]
        for key in (A + "base1", A + "base1/item2", B + "base2/item1", B + "base2/item2")
    }
    reverted: list[tuple[str, ValueState]] = []
    sched.watch_value_status(lambda s: reverted.append((s.key, s.state)))
    sb.fail_next(C + "base3")  # the recreate of C fails (its Delete)
    with pytest.raises(TransactionError) as info:
        sched.start_txn().set_value(A + "base1", items("item1")).set_value(
            C + "base3", items("y")
        ).commit(revert=True)
    assert list(info.value.errors) == [C + "base3"]
    assert info.value.errors[C + "base3"][0] == "DELETE"
    (record,) = sched.transaction_history(seq=info.value.seq)
    ops = [(op.op.value, op.key, op.revert) for op in record.executed]
    assert ops[:7] == [
        ("DELETE", B + "base2/item2", False),
        ("DELETE", A + "base1/item2", False),
        ("UPDATE", A + "base1", False),
        ("CREATE", A + "base1/item1", False),
        ("CREATE", B + "base2/item1", False),
        ("DELETE", C + "base3/item1", False),
        ("DELETE", C + "base3", False),
    ]
    assert all(revert for _, _, revert in ops[7:])
    assert ("UPDATE", A + "base1", True) in ops[7:]
    # Everything is back as before the transaction.
    assert sb.values == sb_before
    for key, before in status_before.items():
        assert sched.get_value_status(key)[:2] == before[:2], key
    assert state(sched, C + "base3") is ValueState.CONFIGURED
    assert state(sched, C + "base3/item1") is ValueState.CONFIGURED
    # Watchers see only net changes: the value that was re-pended and restored is not reported.
    assert B + "base2/item2" not in [key for key, _ in reverted]


def test_dependency_cycles(sched: KVScheduler, sb: MockSB) -> None:
    deps = {"A1": ["A2"], "A2": ["A3"], "A3": ["A1", "A4"], "A4": []}
    sched.register_descriptor(
        prefix_descriptor(
            sb,
            "A",
            A,
            deps=lambda key, value: [Dependency(label=d, key=A + d) for d in deps[key[len(A) :]]],
        )
    )
    txn = sched.start_txn()
    for name in ("A1", "A2", "A3"):
        txn.set_value(A + name, {"n": name})
    txn.commit()
    for name in ("A1", "A2", "A3"):
        assert state(sched, A + name) is ValueState.PENDING
    assert sched.get_value_status(A + "A3").details == ("A1", "A4")
    assert sched.get_value_status(A + "A1").details == ("A2",)
    assert sb.pop_calls() == []

    seq = sched.start_txn().set_value(A + "A4", {}).commit()
    assert [(op, key) for op, key, _ in executed(sched, seq)] == [
        ("CREATE", A + "A4"),
        ("CREATE", A + "A3"),
        ("CREATE", A + "A2"),
        ("CREATE", A + "A1"),
    ]
    assert all(state(sched, A + n) is ValueState.CONFIGURED for n in deps)

    sb.fail_next(A + "A2")
    with pytest.raises(TransactionError):
        sched.start_txn().set_value(A + "A2", None).commit()
    assert state(sched, A + "A3") is ValueState.PENDING
    assert state(sched, A + "A1") is ValueState.PENDING
    status = sched.get_value_status(A + "A2")
    assert status.state is ValueState.FAILED and status.last_op == "DELETE"

    sched.start_txn().set_value(A + "A2", {"n": "A2"}).commit()
    assert all(state(sched, A + n) is ValueState.CONFIGURED for n in deps)
    assert set(sb.values) == {A + n for n in deps}


def test_self_dependency_is_a_cycle_not_a_hang(sched: KVScheduler, sb: MockSB) -> None:
    sched.register_descriptor(
        prefix_descriptor(sb, "A", A, deps=lambda k, v: [Dependency(label="me", key=k)])
    )
    sched.start_txn().set_value(A + "x", {}).commit()
    assert state(sched, A + "x") is ValueState.CONFIGURED


def test_failed_delete_of_derived_value(sched: KVScheduler, sb: MockSB) -> None:
    three_descriptors(sb, sched)
    sched.start_txn().set_value(A + "base1", items("item1")).commit()
    sb.fail_next(A + "base1/item1")
    with pytest.raises(TransactionError) as info:
        sched.start_txn().set_value(A + "base1", None).commit()
    assert list(info.value.errors) == [A + "base1/item1"]
    assert executed(sched, info.value.seq) == [("DELETE", A + "base1/item1", ValueState.FAILED)]
    base = sched.get_value_status(A + "base1")
    assert base.state is ValueState.CONFIGURED and base.last_op == "DELETE"
    assert A + "base1" in sb.values
    # Deleting again finishes the job.
    sched.start_txn().set_value(A + "base1", None).commit()
    assert sb.values == {}
    assert state(sched, A + "base1/item1") is ValueState.NONEXISTENT


def test_failed_recreate_of_derived_value(sched: KVScheduler, sb: MockSB) -> None:
    sched.register_descriptor(prefix_descriptor(sb, "base", A, derived=derive_items))
    sched.register_descriptor(
        Descriptor(
            name="items",
            key_selector=is_item(B),
            create=sb.create,
            delete=sb.delete,
            update=sb.update,
            update_with_recreate=lambda *a: True,
        )
    )

    def derive_one(key: str, value: dict[str, Any]) -> list[tuple[str, Any]]:
        return [(B + "base/item", {"v": value["v"]})]

    sched.register_descriptor(prefix_descriptor(sb, "other", C, derived=derive_one))
    sched.start_txn().set_value(C + "x", {"v": 1}).commit()
    sb.pop_calls()
    # Delete of the derived value succeeds, its re-create fails.
    original_create = sb.create

    def failing_create(key: str, value: Any) -> int:
        if key == B + "base/item":
            raise RuntimeError("no room")
        return original_create(key, value)

    sched._engine.registry.get("items").create = failing_create  # type: ignore[union-attr]
    with pytest.raises(TransactionError) as info:
        sched.start_txn().set_value(C + "x", {"v": 2}).commit()
    assert info.value.errors[B + "base/item"][0] == "CREATE"
    assert executed(sched, info.value.seq) == [
        ("UPDATE", C + "x", ValueState.CONFIGURED),
        ("DELETE", B + "base/item", ValueState.REMOVED),
        ("CREATE", B + "base/item", ValueState.FAILED),
    ]


def test_empty_resync(sched: KVScheduler, sb: MockSB) -> None:
    three_descriptors(sb, sched)
    seq = sched.resync({}, kind="full")
    (record,) = sched.transaction_history(seq=seq)
    assert record.resync == "full" and record.executed == [] and record.planned == []
    assert sb.pop_calls() == [("retrieve", ""), ("retrieve", ""), ("retrieve", "")]


def test_resync_with_empty_sb(sched: KVScheduler, sb: MockSB) -> None:
    # base1 depends on a value derived from base2; base2's items derive sub-items (derived of
    # derived).
    sched.register_descriptor(
        prefix_descriptor(
            sb,
            "A",
            A,
            derived=derive_items,
            deps=lambda k, v: [Dependency(label="d", key=v["needs"])] if "needs" in v else [],
        )
    )
    values = {
        A + "base1": {"needs": A + "base2/x"},
        A + "base2": items("x"),
    }
    seq = sched.resync(values)
    assert [(op, key) for op, key, _ in executed(sched, seq)] == [
        ("CREATE", A + "base2"),
        ("CREATE", A + "base2/x"),
        ("CREATE", A + "base1"),
    ]
    (record,) = sched.transaction_history(seq=seq)
    assert record.planned == record.executed  # the intermediate PENDING was compressed away
    seq = sched.resync({})
    assert [(op, key) for op, key, _ in executed(sched, seq)] == [
        ("DELETE", A + "base1"),
        ("DELETE", A + "base2/x"),
        ("DELETE", A + "base2"),
    ]
    assert sb.values == {}


def test_resync_with_non_empty_sb(sched: KVScheduler, sb: MockSB) -> None:
    three_descriptors(sb, sched)
    sb.seed(A + "base1", items("item1"))
    sb.seed(A + "base1/item1", {"item": "item1"})
    sb.seed(C + "base3", items("old"))
    sb.seed(B + "base2", items())
    sb.seed(A + "stale", items())
    seq = sched.resync(
        {
            A + "base1": items("item1"),  # equal: silently DISCOVERED -> CONFIGURED
            B + "base2": items("item1"),  # update
            C + "base3": items("new"),  # recreate
        }
    )
    ops = executed(sched, seq)
    assert ("DELETE", A + "stale", ValueState.REMOVED) in ops
    assert ("UPDATE", B + "base2", ValueState.CONFIGURED) in ops
    assert ("CREATE", B + "base2/item1", ValueState.CONFIGURED) in ops
    assert ("DELETE", C + "base3/old", ValueState.REMOVED) in ops
    assert ("CREATE", C + "base3", ValueState.CONFIGURED) in ops
    assert not [op for op in ops if op[1].startswith(A + "base1")]
    (record,) = sched.transaction_history(seq=seq)
    prev = {(op.op.value, op.key): op.prev_state for op in record.executed}
    assert prev[("UPDATE", B + "base2")] is ValueState.DISCOVERED
    assert prev[("DELETE", C + "base3")] is ValueState.DISCOVERED
    assert state(sched, A + "base1") is ValueState.CONFIGURED
    assert state(sched, A + "stale") is ValueState.NONEXISTENT
    assert A + "stale" not in sb.values
    # The Retrieve of A was correlated with the NB values (first resync: nothing in the graph).
    assert next(c for c in sb.pop_calls() if c[0] == "retrieve") == ("retrieve", A + "base1")


def test_resync_not_removing_sb_values(sched: KVScheduler, sb: MockSB) -> None:
    sched.register_descriptor(prefix_descriptor(sb, "A", A))
    sched.register_descriptor(
        prefix_descriptor(sb, "B", B, deps=lambda k, v: [Dependency(label="a", key=A + "default")])
    )
    sb.seed(A + "default", {"loop": 0}, origin=ValueOrigin.FROM_SB)
    seq = sched.resync({B + "x": {}})
    status = sched.get_value_status(A + "default")
    assert status.state is ValueState.OBTAINED and status.last_op == "UNDEFINED"
    assert state(sched, B + "x") is ValueState.CONFIGURED
    (record,) = sched.transaction_history(seq=seq)
    assert [op.key for op in record.executed] == [B + "x"]
    sched.resync({})
    assert state(sched, A + "default") is ValueState.OBTAINED
    assert A + "default" in sb.values
    assert [v.key for v in sched.dump(view="cached")] == [A + "default"]


def test_resync_with_multiple_descriptors_retrieve_order(sched: KVScheduler, sb: MockSB) -> None:
    order: list[str] = []

    def recording(name: str, prefix: str, needs: tuple[str, ...]) -> Descriptor:
        descriptor = prefix_descriptor(sb, name, prefix, retrieve_dependencies=needs)
        inner = descriptor.retrieve
        assert inner is not None

        def retrieve(correlate: list[tuple[str, Any, Any]]) -> Any:
            order.append(name)
            return inner(correlate)

        descriptor.retrieve = retrieve
        return descriptor

    sched.register_descriptor(recording("d3", C, ("d2",)))
    sched.register_descriptor(recording("d2", B, ("d1",)))
    sched.register_descriptor(recording("d1", A, ()))
    sb.seed(A + "x", {})
    sched.resync({A + "x": {}, B + "y": {}, C + "z": {}})
    assert order == ["d1", "d2", "d3"]
    assert state(sched, A + "x") is ValueState.CONFIGURED
    assert sb.pop_calls()[3:] == [("create", B + "y"), ("create", C + "z")]


def test_downstream_resync_recreates_missing(sched: KVScheduler, sb: MockSB) -> None:
    sched.register_descriptor(prefix_descriptor(sb, "A", A))
    sched.register_descriptor(
        prefix_descriptor(sb, "B", B, deps=lambda k, v: [Dependency(label="a", key=A + "x")])
    )
    sched.start_txn().set_value(A + "x", {}).set_value(B + "y", {}).commit()
    del sb.values[A + "x"]  # removed behind the agent's back
    sb.pop_calls()
    seq = sched.resync(kind="downstream")
    assert [(op, key) for op, key, _ in executed(sched, seq)] == [("CREATE", A + "x")]
    assert state(sched, A + "x") is ValueState.CONFIGURED
    assert state(sched, B + "y") is ValueState.CONFIGURED


def test_notifications(sched: KVScheduler, sb: MockSB) -> None:
    sched.register_descriptor(
        prefix_descriptor(sb, "sb-only", A, derived=derive_items, with_retrieve=False, crud=False)
    )
    sched.register_descriptor(
        prefix_descriptor(sb, "B", B, deps=lambda k, v: [Dependency(label="a", key=A + "base1")])
    )
    sched.register_descriptor(
        prefix_descriptor(
            sb,
            "C",
            C,
            deps=lambda k, v: [Dependency(label="item", key=A + "base1/item2")],
        )
    )
    sched.start_txn().set_value(B + "x", {}).set_value(C + "y", {}).commit()
    assert state(sched, B + "x") is ValueState.PENDING

    sched.push_sb_notification(A + "base1", items("item1"), metadata={"idx": 1})
    sched.transaction_barrier()
    assert state(sched, A + "base1") is ValueState.OBTAINED
    assert state(sched, A + "base1/item1") is ValueState.OBTAINED
    assert state(sched, B + "x") is ValueState.CONFIGURED
    assert state(sched, C + "y") is ValueState.PENDING
    assert dict(sched.get_metadata_map("sb-only")) == {"base1": {"idx": 1}}

    sched.push_sb_notification(A + "base1", items("item2"), metadata={"idx": 1})
    sched.transaction_barrier()
    record = sched.transaction_history()[-1]
    assert record.txn_type is TxnType.SB_NOTIFICATION
    assert [(op.op.value, op.key) for op in record.executed] == [
        ("DELETE", A + "base1/item1"),
        ("UPDATE", A + "base1"),
        ("CREATE", A + "base1/item2"),
        ("CREATE", C + "y"),
    ]
    assert state(sched, C + "y") is ValueState.CONFIGURED

    sched.push_sb_notification(A + "base1", None)
    sched.transaction_barrier()
    assert state(sched, B + "x") is ValueState.PENDING
    assert state(sched, C + "y") is ValueState.PENDING
    assert state(sched, A + "base1") is ValueState.NONEXISTENT
    assert sb.pop_calls() == [
        ("create", B + "x"),
        ("create", C + "y"),
        ("delete", C + "y"),
        ("delete", B + "x"),
    ]
    with pytest.raises(ValueError, match="does not support Retrieve"):
        sched.dump(descriptor="sb-only", view="SB")
    # Notifications about NB-managed keys or keys without descriptor are ignored.
    sched.push_sb_notification(B + "x", {"x": 1})
    sched.push_sb_notification("/unknown/key", {})
    sched.transaction_barrier()
    assert state(sched, B + "x") is ValueState.PENDING
    assert state(sched, "/unknown/key") is ValueState.NONEXISTENT
    assert sched.stats()["notifications_ignored"] == 2


def test_notifications_with_retry(sched: KVScheduler, sb: MockSB) -> None:
    sched.register_descriptor(
        prefix_descriptor(sb, "sb-only", A, derived=derive_items, with_retrieve=False, crud=False)
    )
    sched.register_descriptor(
        prefix_descriptor(
            sb,
            "B",
            B,
            deps=lambda k, v: [
                Dependency(
                    label="any-item",
                    any_of=lambda key: key.startswith(A) and key.count("/") == 3,
                    key_prefixes=(A,),
                )
            ],
        )
    )
    sched.start_txn().set_value(B + "x", {}).set_value(B + "y", {}).commit(
        retry=RetryPolicy(period=0.001, max_count=3, exp_backoff=True)
    )
    sb.fail_next(B + "x")
    sb.fail_next(B + "y")
    sb.fail_next(B + "y")
    sched.push_sb_notification(A + "base1", items("i"))
    sched.transaction_barrier()
    # (a retry may already have run: pick the notification's record by type)
    record = next(r for r in sched.transaction_history() if r.txn_type is TxnType.SB_NOTIFICATION)
    assert [(op.key, op.new_state) for op in record.planned][-2:] == [
        (B + "x", ValueState.CONFIGURED),
        (B + "y", ValueState.CONFIGURED),
    ]
    assert [(op.key, op.new_state) for op in record.executed][-2:] == [
        (B + "x", ValueState.RETRYING),
        (B + "y", ValueState.RETRYING),
    ]
    wait_until(
        lambda: (
            state(sched, B + "x") is ValueState.CONFIGURED
            and state(sched, B + "y") is ValueState.CONFIGURED
        ),
        message="retries fixed both",
    )
    retries = [r for r in sched.transaction_history() if r.txn_type is TxnType.RETRY_FAILED_OPS]
    assert [r.retry_attempt for r in retries] == [1, 2]
    assert retries[0].retry_for == record.seq


def test_resync_scoped_to_descriptors(sched: KVScheduler, sb: MockSB) -> None:
    sched.register_descriptor(prefix_descriptor(sb, "A", A))
    sched.register_descriptor(prefix_descriptor(sb, "B", B))
    sched.start_txn().set_value(A + "x", {}).set_value(B + "y", {}).commit()
    sb.pop_calls()
    # A full resync of A alone: B's values are neither retrieved nor deleted.
    seq = sched.resync({A + "z": {}}, kind="full", descriptors=["A"])
    assert [(op, key) for op, key, _ in executed(sched, seq)] == [
        ("DELETE", A + "x"),
        ("CREATE", A + "z"),
    ]
    assert [c[0] for c in sb.pop_calls()] == ["retrieve", "delete", "create"]
    assert state(sched, B + "y") is ValueState.CONFIGURED
    # A downstream resync of B re-creates only B's missing values.
    del sb.values[A + "z"]
    del sb.values[B + "y"]
    seq = sched.resync(kind="downstream", descriptors=["B"])
    assert [(op, key) for op, key, _ in executed(sched, seq)] == [("CREATE", B + "y")]
    assert state(sched, A + "z") is ValueState.CONFIGURED  # not refreshed: not noticed
    assert sched.plan({}, resync="upstream", descriptors=["B"])[0].key == B + "y"
    with pytest.raises(TransactionError, match="unknown descriptors"):
        sched.resync({}, descriptors=["nope"])
    assert [d.name for d in sched.descriptors()] == ["A", "B"]
    assert [s.key for s in sched.get_value_statuses()] == [A + "z", B + "y"]
    assert [s.key for s in sched.get_value_statuses(lambda k: k.startswith(B))] == [B + "y"]


def test_failed_create_retried_when_dependency_returns(sched: KVScheduler, sb: MockSB) -> None:
    sched.register_descriptor(prefix_descriptor(sb, "A", A, derived=derive_items))
    sched.register_descriptor(
        prefix_descriptor(sb, "B", B, deps=lambda k, v: [Dependency(label="i", key=A + "a/i")])
    )
    sched.start_txn().set_value(A + "a", items("i")).commit()
    sb.fail_next(B + "b")
    with pytest.raises(TransactionError):
        sched.start_txn().set_value(B + "b", {}).commit()
    assert state(sched, B + "b") is ValueState.FAILED
    # The dependency goes away: the failed value now waits for it ...
    seq = sched.start_txn().set_value(A + "a", items()).commit()
    assert state(sched, B + "b") is ValueState.PENDING
    assert sched.get_value_status(B + "b").details == ("i",)
    assert executed(sched, seq)[-1] == ("UPDATE", A + "a", ValueState.CONFIGURED)
    # ... and gets another chance when it is back.
    sched.start_txn().set_value(A + "a", items("i")).commit()
    assert state(sched, B + "b") is ValueState.CONFIGURED
    assert B + "b" in sb.values


def test_value_failed_earlier_in_txn_does_not_block_a_later_delete(
    sched: KVScheduler, sb: MockSB
) -> None:
    sched.register_descriptor(prefix_descriptor(sb, "A", A, derived=derive_items))
    sched.register_descriptor(
        prefix_descriptor(sb, "B", B, deps=lambda k, v: [Dependency(label="i", key=A + "a/i")])
    )
    sched.start_txn().set_value(A + "a", items("i")).commit()
    sb.fail_next(B + "b")
    # Creates run before updates: B fails first, then A drops the item B depends on.
    with pytest.raises(TransactionError) as info:
        sched.start_txn().set_value(B + "b", {}).set_value(A + "a", items()).commit()
    assert list(info.value.errors) == [B + "b"]
    assert A + "a/i" not in sb.values
    assert state(sched, A + "a/i") is ValueState.NONEXISTENT
    assert state(sched, A + "a") is ValueState.CONFIGURED

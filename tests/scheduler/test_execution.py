"""Execution of a plan: southbound calls made once, in plan order, metadata visible to later
calls of the same transaction, and the replay after a failure."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler import (
    Dependency,
    Descriptor,
    InvalidValueError,
    KVScheduler,
    TransactionError,
    ValueState,
)
from tests.scheduler.mocksb import MockSB, prefix_descriptor


def state(sched: KVScheduler, key: str) -> ValueState:
    return sched.get_value_status(key).state


def test_metadata_of_earlier_creates_is_visible_to_later_ones(
    sched: KVScheduler, sb: MockSB
) -> None:
    sched.register_descriptor(prefix_descriptor(sb, "if", "if/"))
    seen: dict[str, Any] = {}

    def create_route(key: str, value: str) -> None:
        # A route needs its interface's index, read from the interface metadata map.
        seen[key] = sched.get_metadata_map("if").get(value)

    sched.register_descriptor(
        Descriptor(
            name="rt",
            key_selector=lambda k: k.startswith("rt/"),
            create=create_route,
            delete=lambda *a: None,
            dependencies=lambda k, v: [Dependency(label="if", key="if/" + v)],
        )
    )
    sched.start_txn().set_value("rt/1", "b").set_value("if/a", {}).set_value("if/b", {}).commit()
    assert seen == {"rt/1": sb.metadata["if/b"]}
    assert seen["rt/1"] is not None


def test_failure_mid_plan_makes_each_call_once(sched: KVScheduler, sb: MockSB) -> None:
    sched.register_descriptor(prefix_descriptor(sb, "if", "if/"))
    sched.register_descriptor(
        prefix_descriptor(sb, "rt", "rt/", deps=lambda k, v: [Dependency(label="if", key=v)])
    )
    sb.fail_next("if/b")
    with pytest.raises(TransactionError) as info:
        sched.start_txn().set_value("if/a", {}).set_value("if/b", {}).set_value(
            "if/c", {}
        ).set_value("rt/a", "if/a").set_value("rt/b", "if/b").commit()
    assert list(info.value.errors) == ["if/b"]
    calls = sb.pop_calls()
    assert calls == [
        ("create", "if/a"),
        ("create", "if/b"),
        ("create", "if/c"),
        ("create", "rt/a"),
        ("retrieve", "if/b"),  # refresh of the failed value, after the walk
    ]
    assert state(sched, "if/a") is ValueState.CONFIGURED
    assert state(sched, "if/b") is ValueState.FAILED
    assert state(sched, "rt/b") is ValueState.PENDING
    assert dict(sched.get_metadata_map("if")) == {
        "a": sb.metadata["if/a"],
        "c": sb.metadata["if/c"],
    }
    (record,) = sched.transaction_history(seq=info.value.seq)
    assert [op.new_state for op in record.planned if op.key == "rt/b"] == [ValueState.CONFIGURED]
    assert [op.new_state for op in record.executed if op.key == "rt/b"] == [ValueState.PENDING]


def test_revert_when_the_plan_already_fails_validation(sched: KVScheduler, sb: MockSB) -> None:
    def validate(key: str, value: Any) -> None:
        if value.get("bad"):
            raise InvalidValueError("bad value", fields=("bad",))

    sched.register_descriptor(prefix_descriptor(sb, "if", "if/", validate=validate))
    with pytest.raises(TransactionError) as info:
        sched.start_txn().set_value("if/a", {}).set_value("if/b", {"bad": True}).commit(revert=True)
    assert list(info.value.errors) == ["if/b"]
    assert sb.values == {}
    assert [c[0] for c in sb.pop_calls()] == ["create", "delete"]
    assert state(sched, "if/a") is ValueState.NONEXISTENT


def test_sb_metadata_and_recreate_metadata_in_one_plan(sched: KVScheduler, sb: MockSB) -> None:
    sched.register_descriptor(
        prefix_descriptor(sb, "if", "if/", recreate=lambda key, old, new, meta: True)
    )
    sched.register_descriptor(
        prefix_descriptor(sb, "host", "host/", crud=False, with_retrieve=False)
    )
    sched.start_txn().set_value("if/a", {"v": 1}).commit()
    first = sb.metadata["if/a"]
    sched.start_txn().set_value("if/a", {"v": 2}).commit()
    assert dict(sched.get_metadata_map("if")) == {"a": sb.metadata["if/a"]}
    assert sb.metadata["if/a"] != first
    assert sched.dump(view="cached")[0].metadata == sb.metadata["if/a"]
    sched.push_sb_notification("host/h", {"up": True}, metadata={"index": 3})
    sched.transaction_barrier()
    assert dict(sched.get_metadata_map("host")) == {"h": {"index": 3}}
    sched.push_sb_notification("host/h", None)
    sched.transaction_barrier()
    assert dict(sched.get_metadata_map("host")) == {}

"""`Descriptor.conflicts`: NB values the southbound refuses together are INVALID by the
descriptor's rule over the values (here: one slot per value, the first in key order keeps it),
whatever order they arrive in; the one that gives way is removed before the winner is created,
and applied again once it no longer has to give way."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Mapping
from typing import Any

import pytest

from scheduler import ConflictError, KVScheduler, TransactionError, ValueState
from tests.scheduler.mocksb import MockSB, prefix_descriptor

CONFIGURED, INVALID = ValueState.CONFIGURED, ValueState.INVALID


def one_per_slot(values: Mapping[str, Any]) -> dict[str, str]:
    holder: dict[int, str] = {}
    refused = {}
    for key in sorted(values):
        slot = values[key]["slot"]
        if slot in holder:
            refused[key] = f"slot {slot} is {holder[slot]}'s"
        else:
            holder[slot] = key
    return refused


class SlotSB(MockSB):
    """A southbound that refuses a second value on a slot, as VPP refuses a second VLAN."""

    def create(self, key: str, value: Any) -> int:
        taken = [k for k, v in self.values.items() if v["slot"] == value["slot"]]
        if taken:
            raise FileExistsError(f"slot {value['slot']} taken by {taken[0]}")
        return super().create(key, value)


@pytest.fixture
def sb() -> SlotSB:
    return SlotSB()


@pytest.fixture
def slots(sched: KVScheduler, sb: SlotSB) -> KVScheduler:
    sched.register_descriptor(dataclasses.replace(
        prefix_descriptor(sb, "slot", "s/", with_update=False), conflicts=one_per_slot))
    return sched


def commit(sched: KVScheduler, values: Mapping[str, Any]) -> None:
    txn = sched.start_txn()
    for key, value in values.items():
        txn.set_value(key, value)
    with contextlib.suppress(TransactionError):  # INVALID values are errors of it
        txn.commit()


def state(sched: KVScheduler, key: str) -> ValueState:
    return sched.get_value_status(key).state


def test_together_the_first_in_key_order_wins(slots: KVScheduler, sb: SlotSB) -> None:
    commit(slots, {"s/b": {"slot": 1}, "s/a": {"slot": 1}, "s/c": {"slot": 2}})
    assert (state(slots, "s/a"), state(slots, "s/b"), state(slots, "s/c")) == \
        (CONFIGURED, INVALID, CONFIGURED)
    status = slots.get_value_status("s/b")
    assert isinstance(status.error, ConflictError) and "s/a" in status.error_message
    assert sorted(sb.values) == ["s/a", "s/c"]


def test_arriving_later_but_first_in_key_order_takes_the_place(slots: KVScheduler,
                                                               sb: SlotSB) -> None:
    commit(slots, {"s/b": {"slot": 1}})
    sb.pop_calls()
    commit(slots, {"s/a": {"slot": 1}})
    assert (state(slots, "s/a"), state(slots, "s/b")) == (CONFIGURED, INVALID)
    assert sb.pop_calls() == [("delete", "s/b"), ("create", "s/a")]  # its place freed first
    assert "s/a" in slots.get_value_status("s/b").error_message
    # the winner goes: the other is applied again, in the same transaction
    commit(slots, {"s/a": None})
    assert state(slots, "s/b") is CONFIGURED and sorted(sb.values) == ["s/b"]


def test_a_value_that_gave_way_is_applied_once_it_moves(slots: KVScheduler,
                                                        sb: SlotSB) -> None:
    commit(slots, {"s/a": {"slot": 1}, "s/b": {"slot": 1}})
    assert state(slots, "s/b") is INVALID
    commit(slots, {"s/b": {"slot": 2}})
    assert (state(slots, "s/a"), state(slots, "s/b")) == (CONFIGURED, CONFIGURED)
    # the winner moving away frees its slot for nobody in particular: nothing re-applied
    sb.pop_calls()
    commit(slots, {"s/a": {"slot": 3}})
    assert sb.pop_calls() == [("delete", "s/a"), ("create", "s/a")]


def test_plan_shows_the_refusal_and_changes_nothing(slots: KVScheduler, sb: SlotSB) -> None:
    commit(slots, {"s/b": {"slot": 1}})
    ops = {(op.key, op.new_state) for op in slots.plan({"s/a": {"slot": 1}})}
    assert ("s/b", INVALID) in ops and ("s/a", CONFIGURED) in ops
    assert state(slots, "s/b") is CONFIGURED and sorted(sb.values) == ["s/b"]


def test_a_full_resync_applies_the_same_rule(slots: KVScheduler, sb: SlotSB) -> None:
    with pytest.raises(TransactionError, match="slot 1 is s/a's"):
        slots.resync({"s/b": {"slot": 1}, "s/a": {"slot": 1}}, kind="full")
    assert (state(slots, "s/a"), state(slots, "s/b")) == (CONFIGURED, INVALID)
    assert sorted(sb.values) == ["s/a"]


def test_a_broken_rule_refuses_nothing(sched: KVScheduler, sb: SlotSB) -> None:
    def broken(values: Mapping[str, Any]) -> dict[str, str]:
        raise RuntimeError("bug")

    sched.register_descriptor(dataclasses.replace(
        prefix_descriptor(sb, "slot", "s/", with_update=False), conflicts=broken))
    commit(sched, {"s/a": {"slot": 1}, "s/b": {"slot": 2}})
    assert (state(sched, "s/a"), state(sched, "s/b")) == (CONFIGURED, CONFIGURED)

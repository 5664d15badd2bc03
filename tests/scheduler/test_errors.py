"""Errors never vanish: what the scheduler tolerates it logs and counts, what it cannot handle
reaches the caller as it is."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from scheduler import Descriptor, KVScheduler, TransactionError, ValueOrigin, ValueState
from scheduler.scheduler import _Job
from tests.scheduler.mocksb import MockSB, prefix_descriptor


class Uncomparable:
    """A value whose == raises (e.g. a numpy array, a broken __eq__)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __eq__(self, other: object) -> bool:
        raise TypeError("cannot compare")

    __hash__ = object.__hash__


def test_a_comparator_that_raises_is_logged_counted_and_taken_as_changed(
    sched: KVScheduler, sb: MockSB, caplog: pytest.LogCaptureFixture
) -> None:
    def comparator(key: str, a: Any, b: Any) -> bool:
        raise RuntimeError("comparator exploded")

    descriptor = prefix_descriptor(sb, "if", "if/")
    descriptor.value_comparator = comparator
    sched.register_descriptor(descriptor)
    sched.start_txn().set_value("if/a", {"mtu": 1500}).commit()
    assert sched.stats()["comparison_errors"] == 0
    sb.pop_calls()
    with caplog.at_level(logging.WARNING, logger="scheduler"):
        sched.start_txn().set_value("if/a", {"mtu": 1500}).commit()
    assert sb.pop_calls() == [("update", "if/a")]  # changed, as far as anyone can tell
    assert sched.stats()["comparison_errors"] == 1
    assert any(
        "if/a" in r.getMessage() and "comparator exploded" in r.getMessage()
        for r in caplog.records
    ), caplog.text


def test_a_value_whose_equality_raises_in_a_refresh_is_logged_and_counted(
    sched: KVScheduler, caplog: pytest.LogCaptureFixture
) -> None:
    created: dict[str, Any] = {}

    def retrieve(correlate: list[tuple[str, Any, Any]]) -> list[tuple[str, Any, Any, Any]]:
        # A fresh object each time, as a real southbound returns: compared with ==.
        return [(k, Uncomparable(v.n), None, ValueOrigin.FROM_NB) for k, v in created.items()]

    sched.register_descriptor(
        Descriptor(
            name="u",
            key_selector=lambda k: k.startswith("u/"),
            create=lambda k, v: created.__setitem__(k, v),
            delete=lambda k, v, m: created.pop(k),
            update=lambda k, old, new, m: created.__setitem__(k, new),
            retrieve=retrieve,
        )
    )
    sched.start_txn().set_value("u/a", Uncomparable(1)).commit()
    with caplog.at_level(logging.WARNING, logger="scheduler"):
        sched.resync({"u/a": Uncomparable(1)}, kind="full")
    assert sched.get_value_status("u/a").state is ValueState.CONFIGURED
    assert sched.stats()["comparison_errors"] >= 1  # the refresh's compare, and the walk's
    assert "u/a" in caplog.text and "cannot compare" in caplog.text


def test_retrieved_items_refused_are_counted_with_the_reason(
    sched: KVScheduler, caplog: pytest.LogCaptureFixture
) -> None:
    def selector(key: str) -> bool:
        if key == "s/bad":
            raise ZeroDivisionError("selector exploded")
        return key.startswith("s/")

    sched.register_descriptor(
        Descriptor(
            name="s",
            key_selector=selector,
            retrieve=lambda correlate: [
                ("s/ok", 1, None, ValueOrigin.FROM_SB),
                ("s/bad", 2, None, ValueOrigin.FROM_SB),
                ("other/x", 3, None, ValueOrigin.FROM_SB),
                "not a tuple",  # type: ignore[list-item]
            ],
        )
    )
    with caplog.at_level(logging.WARNING, logger="scheduler"):
        sched.resync({}, kind="full")
    assert sched.get_value_status("s/ok").state is ValueState.OBTAINED
    assert sched.stats()["retrieve_rejected"] == 3
    assert "selector exploded" in caplog.text  # the real reason, not "not selected"
    assert "'other/x' not selected" in caplog.text


def test_a_callback_raising_keyboard_interrupt_reaches_the_caller_as_it_is(
    sched: KVScheduler, sb: MockSB
) -> None:
    interrupt = [True]

    def create(key: str, value: Any) -> Any:
        if interrupt[0]:
            raise KeyboardInterrupt
        return sb.create(key, value)

    sched.register_descriptor(
        Descriptor(
            name="if", key_selector=lambda k: k.startswith("if/"), create=create, delete=sb.delete
        )
    )
    with pytest.raises(KeyboardInterrupt):
        sched.start_txn().set_value("if/a", {}).commit()
    assert sched.stats()["internal_errors"] == 1
    assert sched.get_value_status("if/a").state is ValueState.NONEXISTENT  # rolled back
    interrupt[0] = False
    sched.start_txn().set_value("if/a", {}).commit()  # the worker is still there
    assert sched.get_value_status("if/a").state is ValueState.CONFIGURED


def test_an_internal_error_is_logged_counted_and_a_transaction_error(
    sched: KVScheduler, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(engine: Any) -> None:
        raise AttributeError("a bug in the engine")

    with caplog.at_level(logging.ERROR, logger="scheduler"), pytest.raises(
        TransactionError, match="internal error"
    ) as info:
        sched._run_and_wait(_Job(broken, wait=True))
    assert isinstance(info.value.__cause__, AttributeError)
    assert "a bug in the engine" in caplog.text
    assert sched.stats()["internal_errors"] == 1

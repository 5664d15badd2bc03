"""Failed operations of derived values keep their state and error across the refresh that
follows a failure, and are retried / re-attempted like failed base values.

The base descriptor here retrieves truthfully, like the VPP interface descriptor: the base value
it reports lists only the items (derived values) that really exist in the southbound, so the
refresh after a failure sees the failed item as absent.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler import (
    Dependency,
    Descriptor,
    KVScheduler,
    NonRetriableError,
    RetryPolicy,
    TransactionError,
    TxnType,
    ValueState,
    ValueStatus,
)
from tests.scheduler.mocksb import Call, MockSB
from tests.util import wait_until

A = "/prefixA/"
B = "/prefixB/"
BASE = A + "base1"
FAST_RETRY = RetryPolicy(period=0.001, max_count=3, exp_backoff=False)


class AddressInUse(NonRetriableError):
    """Like VPP's ADDRESS_IN_USE (-105): a retry cannot fix it."""


def is_base(key: str) -> bool:
    return key.startswith(A) and key.count("/") == 2


def is_item(key: str) -> bool:
    return key.startswith(A) and key.count("/") == 3


def base_value(**items: int) -> dict[str, Any]:
    return {"items": dict(items)}


def derive_items(key: str, value: dict[str, Any]) -> list[tuple[str, Any]]:
    return [(f"{key}/{name}", {"v": v}) for name, v in sorted(value["items"].items())]


def truthful_retrieve(sb: MockSB) -> Any:
    """Base values as the SB has them: only the items that exist there."""

    def retrieve(correlate: list[tuple[str, Any, Any]]) -> list[tuple[str, Any, Any, Any]]:
        with sb.lock:
            sb.calls.append(Call("retrieve", ",".join(sorted(k for k, _, _ in correlate))))
        out = []
        for key in sorted(k for k in sb.values if is_base(k)):
            items = {
                k[len(key) + 1 :]: v["v"] for k, v in sb.values.items() if k.startswith(key + "/")
            }
            out.append((key, base_value(**items), sb.metadata.get(key), None))
        return out

    return retrieve


def register(
    sched: KVScheduler, sb: MockSB, *, recreate: bool = False, item_deps: bool = False
) -> None:
    sched.register_descriptor(
        Descriptor(
            name="base",
            key_selector=is_base,
            create=sb.create,
            delete=sb.delete,
            update=sb.update,
            retrieve=truthful_retrieve(sb),
            derived_values=derive_items,
            with_metadata=True,
        )
    )

    def item_dependencies(key: str, value: Any) -> list[Dependency]:
        # Items with a negative value wait for B/gate (to have a PENDING derived value).
        if item_deps and value["v"] < 0:
            return [Dependency(label="gate", key=B + "gate")]
        return []

    sched.register_descriptor(
        Descriptor(
            name="items",
            key_selector=is_item,
            create=sb.create,
            delete=sb.delete,
            update=sb.update,
            update_with_recreate=(lambda *a: True) if recreate else None,
            dependencies=item_dependencies,
        )
    )
    # B values depend on item a of base1 (to see whether the item counts as existing).
    sched.register_descriptor(
        Descriptor(
            name="B",
            key_selector=lambda k: k.startswith(B),
            create=sb.create,
            delete=sb.delete,
            dependencies=lambda k, v: (
                [Dependency(label="a", key=BASE + "/a")] if k != B + "gate" else []
            ),
        )
    )


@pytest.fixture
def statuses(sched: KVScheduler) -> Iterator[list[ValueStatus]]:
    seen: list[ValueStatus] = []
    cancel = sched.watch_value_status(seen.append, lambda key: key == BASE + "/a")
    yield seen
    cancel()


def status(sched: KVScheduler, key: str) -> ValueStatus:
    return sched.get_value_status(key)


def executed(sched: KVScheduler, seq: int | None) -> list[tuple[str, str, ValueState]]:
    (record,) = sched.transaction_history(seq=seq)
    return [(op.op.value, op.key, op.new_state) for op in record.executed]


def test_failed_create_of_derived_value_stays_failed(sched: KVScheduler, sb: MockSB) -> None:
    register(sched, sb)
    refused = AddressInUse("ADDRESS_IN_USE (-105)")
    sb.fail_next(BASE + "/a", refused)
    with pytest.raises(TransactionError) as info:
        sched.start_txn().set_value(BASE, base_value(a=1)).set_value(B + "x", {}).commit()
    assert info.value.errors == {BASE + "/a": ("CREATE", refused)}
    assert ("retrieve", BASE) in sb.pop_calls()  # the failure was followed by a refresh
    item = status(sched, BASE + "/a")
    assert item.state is ValueState.FAILED
    assert item.error is refused and item.last_op == "CREATE"
    assert item.derived_from == BASE
    assert status(sched, BASE).state is ValueState.CONFIGURED
    # The failed item does not exist: what depends on it waits.
    assert status(sched, B + "x").state is ValueState.PENDING
    assert sched.stats()["scheduled_retries"] == 0  # not retriable
    # Re-attempted like any failed value: here by the next resync.
    sched.resync(kind="downstream")
    assert status(sched, BASE + "/a").state is ValueState.CONFIGURED
    assert status(sched, BASE + "/a").error is None
    assert status(sched, B + "x").state is ValueState.CONFIGURED
    assert sb.values[BASE + "/a"] == {"v": 1}


def test_failed_create_of_derived_value_is_retried(
    sched: KVScheduler, sb: MockSB, statuses: list[ValueStatus]
) -> None:
    register(sched, sb)
    sb.fail_next(BASE + "/a")  # retriable (the default)
    with pytest.raises(TransactionError) as info:
        sched.start_txn().set_value(BASE, base_value(a=1)).commit(retry=FAST_RETRY)
    assert executed(sched, info.value.seq)[-1] == ("CREATE", BASE + "/a", ValueState.RETRYING)
    wait_until(
        lambda: status(sched, BASE + "/a").state is ValueState.CONFIGURED,
        message="retry created the derived value",
    )
    assert [s.state for s in statuses] == [ValueState.RETRYING, ValueState.CONFIGURED]
    assert statuses[0].error is not None and statuses[0].last_op == "CREATE"
    assert sb.values[BASE + "/a"] == {"v": 1}
    (retry,) = [r for r in sched.transaction_history() if r.txn_type is TxnType.RETRY_FAILED_OPS]
    assert retry.retry_for == info.value.seq and retry.retry_attempt == 1
    # As in the anchor: the base is updated back to its NB value, then the item created.
    assert [(op.op.value, op.key, op.retry) for op in retry.executed] == [
        ("UPDATE", BASE, True),
        ("CREATE", BASE + "/a", True),
    ]


def test_retries_of_derived_value_exhausted_leave_it_failed(
    sched: KVScheduler, sb: MockSB, statuses: list[ValueStatus]
) -> None:
    register(sched, sb)
    for _ in range(3):
        sb.fail_next(BASE + "/a")
    with pytest.raises(TransactionError):
        sched.start_txn().set_value(BASE, base_value(a=1)).commit(
            retry=RetryPolicy(period=0.001, max_count=2, exp_backoff=False)
        )
    wait_until(
        lambda: status(sched, BASE + "/a").state is ValueState.FAILED,
        message="retries exhausted",
    )
    assert [s.state for s in statuses] == [
        ValueState.RETRYING,  # attempt 1 scheduled
        ValueState.RETRYING,  # attempt 1 failed (a new error), attempt 2 scheduled
        ValueState.FAILED,
    ]
    assert status(sched, BASE + "/a").error is not None
    retries = [r for r in sched.transaction_history() if r.txn_type is TxnType.RETRY_FAILED_OPS]
    assert [r.retry_attempt for r in retries] == [1, 2]
    assert BASE + "/a" not in sb.values


def test_failed_update_of_derived_value_stays_failed(sched: KVScheduler, sb: MockSB) -> None:
    register(sched, sb)
    sched.start_txn().set_value(BASE, base_value(a=1)).set_value(B + "x", {}).commit()
    refused = AddressInUse("refused")
    sb.fail_next(BASE + "/a", refused)
    with pytest.raises(TransactionError) as info:
        sched.start_txn().set_value(BASE, base_value(a=2)).commit()
    assert info.value.errors == {BASE + "/a": ("UPDATE", refused)}
    item = status(sched, BASE + "/a")
    assert item.state is ValueState.FAILED
    assert item.error is refused and item.last_op == "UPDATE"
    # The old value still exists: its dependents keep running.
    assert sb.values[BASE + "/a"] == {"v": 1}
    assert status(sched, B + "x").state is ValueState.CONFIGURED
    sched.resync(kind="downstream")
    assert status(sched, BASE + "/a").state is ValueState.CONFIGURED
    assert sb.values[BASE + "/a"] == {"v": 2}


def test_failed_update_of_derived_value_is_retried(sched: KVScheduler, sb: MockSB) -> None:
    register(sched, sb)
    sched.start_txn().set_value(BASE, base_value(a=1)).commit()
    sb.fail_next(BASE + "/a")
    with pytest.raises(TransactionError) as info:
        sched.start_txn().set_value(BASE, base_value(a=2)).commit(retry=FAST_RETRY)
    assert executed(sched, info.value.seq)[-1] == ("UPDATE", BASE + "/a", ValueState.RETRYING)
    wait_until(
        lambda: status(sched, BASE + "/a").state is ValueState.CONFIGURED,
        message="retry updated the derived value",
    )
    assert sb.values[BASE + "/a"] == {"v": 2}


@pytest.mark.parametrize("retry", [None, FAST_RETRY], ids=["no-retry", "retry"])
def test_failed_recreate_of_derived_value_stays_failed(
    sched: KVScheduler, sb: MockSB, retry: RetryPolicy | None
) -> None:
    register(sched, sb, recreate=True)
    sched.start_txn().set_value(BASE, base_value(a=1)).set_value(B + "x", {}).commit()
    refused = AddressInUse("refused") if retry is None else RuntimeError("busy")
    original_create = sb.create
    failures = [refused]

    def create(key: str, value: Any) -> int:  # the delete succeeds, the create fails once
        if key == BASE + "/a" and failures:
            raise failures.pop()
        return original_create(key, value)

    descriptor = next(d for d in sched.descriptors() if d.name == "items")
    descriptor.create = create
    with pytest.raises(TransactionError) as info:
        sched.start_txn().set_value(BASE, base_value(a=2)).commit(retry=retry)
    assert info.value.errors == {BASE + "/a": ("CREATE", refused)}
    wanted = ValueState.FAILED if retry is None else ValueState.RETRYING
    assert executed(sched, info.value.seq) == [
        ("UPDATE", BASE, ValueState.CONFIGURED),
        ("DELETE", B + "x", ValueState.PENDING),
        ("DELETE", BASE + "/a", ValueState.REMOVED),
        ("CREATE", BASE + "/a", wanted),
    ]
    if retry is None:
        item = status(sched, BASE + "/a")
        assert item.state is ValueState.FAILED
        assert item.error is refused and item.last_op == "CREATE"
        assert status(sched, B + "x").state is ValueState.PENDING
        sched.resync(kind="downstream")
    wait_until(
        lambda: status(sched, BASE + "/a").state is ValueState.CONFIGURED,
        message="re-created",
    )
    assert sb.values[BASE + "/a"] == {"v": 2}
    assert status(sched, B + "x").state is ValueState.CONFIGURED


def test_refresh_keeps_pending_derived_value(sched: KVScheduler, sb: MockSB) -> None:
    register(sched, sb, item_deps=True)
    sb.fail_next(BASE + "/a", AddressInUse("refused"))
    with pytest.raises(TransactionError):
        sched.start_txn().set_value(BASE, base_value(a=1, w=-1)).commit()
    # The refresh after a's failure did not find w (it waits): it is still waiting.
    waiting = status(sched, BASE + "/w")
    assert waiting.state is ValueState.PENDING and waiting.details == ("gate",)
    sched.start_txn().set_value(B + "gate", {}).commit()
    assert status(sched, BASE + "/w").state is ValueState.CONFIGURED
    assert sb.values[BASE + "/w"] == {"v": -1}


def test_refresh_marks_vanished_derived_value_missing(sched: KVScheduler, sb: MockSB) -> None:
    register(sched, sb)
    sched.start_txn().set_value(BASE, base_value(a=1)).set_value(B + "x", {}).commit()

    def lose_a() -> None:  # a disappears behind the agent's back while b fails
        del sb.values[BASE + "/a"]

    sb.fail_next(BASE + "/b", AddressInUse("refused"), side_effect=lose_a)
    with pytest.raises(TransactionError):
        sched.start_txn().set_value(BASE, base_value(a=1, b=2)).commit()
    assert status(sched, BASE + "/a").state is ValueState.MISSING
    assert status(sched, BASE + "/b").state is ValueState.FAILED
    assert status(sched, B + "x").state is ValueState.PENDING  # a no longer exists
    sched.resync(kind="downstream")
    assert status(sched, BASE + "/a").state is ValueState.CONFIGURED
    assert status(sched, BASE + "/b").state is ValueState.CONFIGURED
    assert status(sched, B + "x").state is ValueState.CONFIGURED


def test_kept_derived_value_goes_when_nb_drops_it(sched: KVScheduler, sb: MockSB) -> None:
    register(sched, sb)
    sb.fail_next(BASE + "/a", AddressInUse("refused"))
    with pytest.raises(TransactionError):
        sched.start_txn().set_value(BASE, base_value(a=1, b=2)).commit()
    assert status(sched, BASE + "/a").state is ValueState.FAILED
    # NB no longer wants a (the value now equals what the SB reports for the base).
    sched.start_txn().set_value(BASE, base_value(b=2)).commit()
    assert status(sched, BASE + "/a").state is ValueState.NONEXISTENT
    assert status(sched, BASE + "/b").state is ValueState.CONFIGURED
    sched.start_txn().set_value(BASE, None).commit()
    assert sb.values == {}


def test_derived_value_whose_failed_delete_happened_anyway_is_dropped(
    sched: KVScheduler, sb: MockSB
) -> None:
    register(sched, sb)
    sched.start_txn().set_value(BASE, base_value(a=1)).commit()

    def gone() -> None:
        del sb.values[BASE + "/a"]

    sb.fail_next(BASE + "/a", AddressInUse("refused"), side_effect=gone)
    with pytest.raises(TransactionError):
        sched.start_txn().set_value(BASE, None).commit()
    # The refresh shows the item gone: nothing is left to delete but the base.
    assert status(sched, BASE + "/a").state is ValueState.NONEXISTENT
    assert status(sched, BASE).state is ValueState.CONFIGURED
    sched.start_txn().set_value(BASE, None).commit()
    assert sb.values == {}
    assert status(sched, BASE).state is ValueState.NONEXISTENT


BASES = [A + "b1", A + "b2"]
ITEMS = [f"{base}/{name}" for base in BASES for name in ("x", "y")]
items_value = st.dictionaries(st.sampled_from(["x", "y"]), st.integers(0, 1), max_size=2)
base_values = st.one_of(st.none(), items_value.map(lambda items: {"items": items}))
derived_step = st.one_of(
    st.tuples(st.just("txn"), st.dictionaries(st.sampled_from(BASES), base_values, min_size=1)),
    st.tuples(
        st.just("resync"),
        st.dictionaries(st.sampled_from(BASES), items_value.map(lambda i: {"items": i})),
    ),
    st.tuples(st.just("fail"), st.sampled_from(BASES + ITEMS)),
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(derived_step, min_size=1, max_size=10))
def test_derived_values_never_lose_track_of_the_sb(steps: list[tuple[str, Any]]) -> None:
    """With failing calls on base and derived values and a Retrieve that reports what exists:
    a derived key is in SB iff its status says so, no call is made twice (the mock refuses double
    creates and deletes of missing objects), and no derived value NB wants is forgotten while
    its base is CONFIGURED."""
    sb = MockSB()
    with KVScheduler(record_history=False) as sched:
        register(sched, sb)
        desired: dict[str, Any] = {}
        for kind, arg in steps:
            if kind == "fail":
                sb.fail_next(arg)
                continue
            try:
                if kind == "txn":
                    txn = sched.start_txn()
                    for key, value in arg.items():
                        txn.set_value(key, value)
                    txn.commit()
                else:
                    sched.resync(arg, kind="full")
            except TransactionError as exc:
                assert all(
                    not isinstance(e, (FileExistsError, LookupError))
                    for _, e in exc.errors.values()
                ), exc.errors
            if kind == "txn":
                desired.update(arg)
            else:
                desired = dict(arg)
            statuses = {key: sched.get_value_status(key) for key in BASES + ITEMS}
            in_sb = {
                key
                for key, s in statuses.items()
                if s.state is ValueState.CONFIGURED
                or (s.state is ValueState.FAILED and s.last_op in ("UPDATE", "DELETE"))
            }
            assert set(sb.values) == in_sb, statuses
            for base, value in desired.items():
                if value is None or statuses[base].state is not ValueState.CONFIGURED:
                    continue
                for name in value["items"]:
                    assert statuses[f"{base}/{name}"].state is not ValueState.NONEXISTENT, (
                        base,
                        statuses,
                    )

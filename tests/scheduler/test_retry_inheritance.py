"""Retry of values that fail in a transaction other than the NB transaction that set them: an SB
notification (a route created when its link appears), a retry of another value, the registration
of a missing descriptor. The retry policy is the one of the NB transaction that last set the
value; its attempts are counted from its own first failure."""

from __future__ import annotations

import errno
from typing import Any

import pytest

from scheduler import (
    Dependency,
    Descriptor,
    KVScheduler,
    RetryPolicy,
    TransactionError,
    TxnType,
    ValueState,
)
from tests.scheduler.mocksb import MockSB, prefix_descriptor
from tests.util import wait_until

LINK = "link/"
ROUTE = "route/"
FAST = RetryPolicy(period=0.001, max_count=3, exp_backoff=False)


def unreachable() -> OSError:
    return OSError(errno.ENETUNREACH, "Network is unreachable")


def setup_routes(sched: KVScheduler, sb: MockSB, **route: Any) -> None:
    """Links are watched (SB notifications only); a route needs its link."""
    sched.register_descriptor(
        prefix_descriptor(
            sb, "link", LINK, with_retrieve=False, crud=False, **route.pop("link", {})
        )
    )
    sched.register_descriptor(
        prefix_descriptor(
            sb,
            "route",
            ROUTE,
            deps=lambda k, v: [Dependency(label="link", key=LINK + v["dev"])],
            **route,
        )
    )


def state(sched: KVScheduler, key: str) -> ValueState:
    return sched.get_value_status(key).state


def records(sched: KVScheduler, txn_type: TxnType) -> list[Any]:
    return [r for r in sched.transaction_history() if r.txn_type is txn_type]


def notify(sched: KVScheduler, key: str, value: Any) -> None:
    sched.push_sb_notification(key, value)
    sched.transaction_barrier()


def test_value_created_by_a_notification_is_retried_with_its_nb_policy(
    sched: KVScheduler, sb: MockSB
) -> None:
    setup_routes(sched, sb)
    sched.start_txn().set_value(ROUTE + "r1", {"dev": "eth1"}).commit(retry=FAST)
    assert state(sched, ROUTE + "r1") is ValueState.PENDING
    sb.fail_next(ROUTE + "r1", unreachable())  # the link is there, not up yet
    notify(sched, LINK + "eth1", {"up": False})
    (notification,) = records(sched, TxnType.SB_NOTIFICATION)
    assert [(op.key, op.new_state) for op in notification.executed] == [
        (LINK + "eth1", ValueState.OBTAINED),
        (ROUTE + "r1", ValueState.RETRYING),
    ]
    wait_until(lambda: state(sched, ROUTE + "r1") is ValueState.CONFIGURED, message="retried")
    (retry,) = records(sched, TxnType.RETRY_FAILED_OPS)
    assert retry.retry_for == notification.seq and retry.retry_attempt == 1
    assert sb.values[ROUTE + "r1"] == {"dev": "eth1"}


def test_value_recreated_by_a_notification_is_retried(sched: KVScheduler, sb: MockSB) -> None:
    setup_routes(sched, sb)
    notify(sched, LINK + "eth1", {"up": True})
    sched.start_txn().set_value(ROUTE + "r1", {"dev": "eth1"}).commit(retry=FAST)
    assert state(sched, ROUTE + "r1") is ValueState.CONFIGURED
    notify(sched, LINK + "eth1", None)  # the link flaps
    assert state(sched, ROUTE + "r1") is ValueState.PENDING
    for _ in range(2):
        sb.fail_next(ROUTE + "r1", unreachable())
    notify(sched, LINK + "eth1", {"up": False})
    wait_until(lambda: state(sched, ROUTE + "r1") is ValueState.CONFIGURED, message="retried")
    assert [r.retry_attempt for r in records(sched, TxnType.RETRY_FAILED_OPS)] == [1, 2]


def test_value_set_without_policy_stays_failed_after_a_notification(
    sched: KVScheduler, sb: MockSB
) -> None:
    setup_routes(sched, sb)
    sched.start_txn().set_value(ROUTE + "r1", {"dev": "eth1"}).commit(retry=FAST)
    # The last NB transaction to set it had no retry policy: that one counts.
    sched.start_txn().set_value(ROUTE + "r1", {"dev": "eth1", "metric": 5}).commit()
    sb.fail_next(ROUTE + "r1", unreachable())
    notify(sched, LINK + "eth1", {"up": False})
    status = sched.get_value_status(ROUTE + "r1")
    assert status.state is ValueState.FAILED and isinstance(status.error, OSError)
    assert sched.stats()["scheduled_retries"] == 0
    sched.resync(kind="upstream", values={ROUTE + "r1": {"dev": "eth1", "metric": 5}})
    assert state(sched, ROUTE + "r1") is ValueState.CONFIGURED


def test_derived_value_created_by_a_notification_is_retried(sched: KVScheduler, sb: MockSB) -> None:
    def derive(key: str, value: Any) -> list[tuple[str, Any]]:
        return [("nh/" + key[len(ROUTE) :], {"via": value["dev"]})]

    # (No Retrieve: the mock's routes would claim their next hops exist.)
    setup_routes(sched, sb, derived=derive, with_retrieve=False)
    sched.register_descriptor(
        Descriptor(
            name="next-hop",
            key_selector=lambda k: k.startswith("nh/"),
            create=sb.create,
            delete=sb.delete,
        )
    )
    sched.start_txn().set_value(ROUTE + "r1", {"dev": "eth1"}).commit(retry=FAST)
    sb.fail_next("nh/r1", unreachable())
    notify(sched, LINK + "eth1", {"up": False})
    (notification,) = records(sched, TxnType.SB_NOTIFICATION)
    assert ("nh/r1", ValueState.RETRYING) in [
        (op.key, op.new_state) for op in notification.executed
    ]
    wait_until(lambda: state(sched, "nh/r1") is ValueState.CONFIGURED, message="retried")
    assert sb.values["nh/r1"] == {"via": "eth1"}


@pytest.mark.parametrize("max_count", [1, 3])
def test_dependent_failing_in_a_retry_counts_its_own_attempts(
    sched: KVScheduler, sb: MockSB, max_count: int
) -> None:
    policy = RetryPolicy(period=0.001, max_count=max_count, exp_backoff=False)
    sched.register_descriptor(prefix_descriptor(sb, "if", "if/"))
    sched.register_descriptor(
        prefix_descriptor(sb, "rt", "rt/", deps=lambda k, v: [Dependency(label="if", key=v)])
    )
    # Nothing runs the retry of if/a before rt/b is set: the retry waits for a gate.
    gate = {"open": False}
    original = sb.create

    def create(key: str, value: Any) -> int:
        if key == "if/a" and not gate["open"]:
            raise RuntimeError("not yet")
        return original(key, value)

    sched.descriptors()[0].create = create
    with pytest.raises(TransactionError):
        sched.start_txn().set_value("if/a", {}).commit(
            retry=RetryPolicy(period=0.001, max_count=0, exp_backoff=False)
        )
    sched.start_txn().set_value("rt/b", "if/a").commit(retry=policy)
    assert state(sched, "rt/b") is ValueState.PENDING
    sb.fail_next("rt/b")
    gate["open"] = True
    # A retry of if/a creates it, then rt/b, whose create fails: rt/b's first failure.
    wait_until(lambda: state(sched, "rt/b") is ValueState.CONFIGURED, message="rt/b retried")
    retries = [
        r
        for r in records(sched, TxnType.RETRY_FAILED_OPS)
        if any(v.key == "rt/b" for v in r.values)
    ]
    assert [r.retry_attempt for r in retries] == [1]
    assert state(sched, "if/a") is ValueState.CONFIGURED


def test_values_of_a_newly_registered_descriptor_keep_their_policy(
    sched: KVScheduler, sb: MockSB
) -> None:
    sched.start_txn().set_value("if/a", {}).commit(retry=FAST)
    assert state(sched, "if/a") is ValueState.UNIMPLEMENTED
    sb.fail_next("if/a")
    sched.register_descriptor(prefix_descriptor(sb, "if", "if/"))
    wait_until(lambda: state(sched, "if/a") is ValueState.CONFIGURED, message="retried")
    (retry,) = records(sched, TxnType.RETRY_FAILED_OPS)
    assert retry.retry_attempt == 1
    assert sb.values["if/a"] == {}

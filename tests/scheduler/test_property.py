"""Property: after any sequence of transactions, the CONFIGURED values are exactly those whose
dependencies are (transitively) satisfied, the others are PENDING, and the SB holds exactly the
CONFIGURED ones. Dependencies are random (static keys and AnyOf prefixes), cycles included."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler import (
    Dependency,
    Descriptor,
    KVScheduler,
    TransactionError,
    TxnOperation,
    ValueState,
)
from tests.scheduler.mocksb import MockSB

KEYS = [f"g{group}/x{n}" for group in range(2) for n in range(3)]
PREFIXES = ["g0/", "g1/"]

dep_spec = st.one_of(
    st.tuples(st.just("key"), st.sampled_from(KEYS)),
    st.tuples(st.just("any"), st.sampled_from(PREFIXES)),
)
value = st.one_of(st.none(), st.lists(dep_spec, max_size=3).map(tuple))
txn = st.dictionaries(st.sampled_from(KEYS), value, min_size=1, max_size=4)
step = st.one_of(
    st.tuples(st.just("txn"), txn),
    st.tuples(st.just("resync"), st.dictionaries(st.sampled_from(KEYS), value, max_size=6)),
)


def starts_with(prefix: str) -> Callable[[str], bool]:
    return lambda key: key.startswith(prefix)


def dependencies(key: str, spec: tuple[tuple[str, str], ...]) -> list[Dependency]:
    out = []
    for n, (kind, target) in enumerate(spec):
        if kind == "key":
            out.append(Dependency(label=f"d{n}", key=target))
        else:
            out.append(
                Dependency(
                    label=f"d{n}",
                    any_of=starts_with(target),
                    key_prefixes=(target,),
                )
            )
    return out


def satisfied_fixpoint(desired: dict[str, Any]) -> set[str]:
    """Greatest set of desired keys whose every dependency is met inside the set."""
    alive = set(desired)
    changed = True
    while changed:
        changed = False
        for key in sorted(alive):
            for kind, target in desired[key]:
                met = target in alive if kind == "key" else any(k.startswith(target) for k in alive)
                if not met:
                    alive.discard(key)
                    changed = True
                    break
    return alive


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(step, min_size=1, max_size=8))
def test_configured_iff_dependencies_satisfied(steps: list[tuple[str, dict[str, Any]]]) -> None:
    sb = MockSB()
    with KVScheduler(record_history=False) as sched:
        sched.register_descriptor(
            Descriptor(
                name="node",
                key_selector=lambda key: key.startswith("g"),
                create=sb.create,
                delete=sb.delete,
                update=sb.update,
                retrieve=sb.retrieve_for(lambda key: key.startswith("g")),
                dependencies=dependencies,
            )
        )
        desired: dict[str, Any] = {}
        for kind, values in steps:
            if kind == "txn":
                transaction = sched.start_txn()
                for key, spec in values.items():
                    transaction.set_value(key, spec)
                transaction.commit()
                for key, spec in values.items():
                    if spec is None:
                        desired.pop(key, None)
                    else:
                        desired[key] = spec
            else:
                sched.resync(values)
                desired = {k: v for k, v in values.items() if v is not None}
            expected = satisfied_fixpoint(desired)
            states = {key: sched.get_value_status(key).state for key in KEYS}
            configured = {k for k, s in states.items() if s is ValueState.CONFIGURED}
            pending = {k for k, s in states.items() if s is ValueState.PENDING}
            assert configured == expected, (desired, states)
            assert pending == set(desired) - expected
            assert set(sb.values) == expected
            assert {k: sb.values[k] for k in expected} == {k: desired[k] for k in expected}


fail_step = st.tuples(st.just("fail"), st.sampled_from(KEYS))
step_with_failures = st.one_of(step, fail_step)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(step_with_failures, min_size=1, max_size=10))
def test_sb_matches_statuses_despite_failures(steps: list[tuple[str, Any]]) -> None:
    """With failing southbound calls, the scheduler never loses track of the SB: a key exists in
    SB iff it is CONFIGURED, or FAILED in an update/delete (the object is still there); no call
    is made twice (the mock refuses double creates and deletes of missing objects)."""
    sb = MockSB()
    with KVScheduler(record_history=False) as sched:
        sched.register_descriptor(
            Descriptor(
                name="node",
                key_selector=lambda key: key.startswith("g"),
                create=sb.create,
                delete=sb.delete,
                update=sb.update,
                retrieve=sb.retrieve_for(lambda key: key.startswith("g")),
                dependencies=dependencies,
            )
        )
        for kind, arg in steps:
            if kind == "fail":
                sb.fail_next(arg)
                continue
            try:
                if kind == "txn":
                    transaction = sched.start_txn()
                    for key, spec in arg.items():
                        transaction.set_value(key, spec)
                    transaction.commit()
                else:
                    sched.resync(arg)
            except TransactionError as exc:
                assert all(
                    not isinstance(e, (FileExistsError, LookupError))
                    for _, e in exc.errors.values()
                ), exc.errors
            statuses = {key: sched.get_value_status(key) for key in KEYS}
            expected_in_sb = {
                key
                for key, status in statuses.items()
                if status.state is ValueState.CONFIGURED
                or (
                    status.state is ValueState.FAILED
                    and status.last_op in (TxnOperation.UPDATE, TxnOperation.DELETE)
                )
            }
            assert set(sb.values) == expected_in_sb, statuses
            for key, status in statuses.items():
                if status.state is ValueState.CONFIGURED:
                    spec = sb.values[key]
                    for dep_kind, target in spec:
                        if dep_kind == "key":
                            assert target in sb.values, (key, target)
                        else:
                            assert any(k.startswith(target) for k in sb.values), (key, target)

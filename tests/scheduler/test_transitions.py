"""The rules table of scheduler/transitions.py, on its own: every (state, event) pair, and
random event sequences keeping the error consistent with the state."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scheduler import ValueState
from scheduler.transitions import RULES, Error, Event, IllegalTransition, settle

S = ValueState
BOOM = RuntimeError("boom")
OLD = RuntimeError("old")
WITH_ERROR = {S.FAILED, S.RETRYING, S.INVALID}

# What each event leads to (None: back to the state before the delete started).
EXPECTED_TARGET = {
    Event.NO_DESCRIPTOR: S.UNIMPLEMENTED,
    Event.DEPENDENCY_MISSING: S.PENDING,
    Event.CREATED: S.CONFIGURED,
    Event.UPDATED: S.CONFIGURED,
    Event.OBTAINED: S.OBTAINED,
    Event.DISCOVERED: S.DISCOVERED,
    Event.FOUND: S.CONFIGURED,
    Event.VANISHED: S.MISSING,
    Event.DELETING: S.REMOVED,
    Event.DELETED: S.REMOVED,
    Event.DELETE_ABORTED: None,
    Event.INVALID: S.INVALID,
    Event.FAILED: S.FAILED,
    Event.FAILED_RETRYING: S.RETRYING,
}
# Events that cannot happen to a value in these states.
EXPECTED_ILLEGAL = {
    Event.NO_DESCRIPTOR: {S.CONFIGURED, S.REMOVED},
    Event.UPDATED: {S.NONEXISTENT, S.MISSING, S.UNIMPLEMENTED, S.REMOVED},
    Event.DELETING: {S.REMOVED},
    Event.DELETE_ABORTED: set(ValueState) - {S.REMOVED},
    # A refresh keeps erroneous values as they are (their retry, resync or next change decides).
    Event.DISCOVERED: WITH_ERROR,
    Event.FOUND: WITH_ERROR,
    Event.VANISHED: set(ValueState) - {S.CONFIGURED},
}


def _kwargs(event: Event) -> dict[str, object]:
    if RULES[event].error is Error.SET:
        return {"cause": BOOM}
    if event is Event.DELETE_ABORTED:
        return {"restore": S.FAILED}
    return {}


def test_every_event_has_a_rule() -> None:
    assert set(RULES) == set(Event) == set(EXPECTED_TARGET)


@pytest.mark.parametrize("event", list(Event), ids=lambda e: e.name)
@pytest.mark.parametrize("state", list(ValueState), ids=lambda s: s.name)
def test_each_state_and_event(state: ValueState, event: Event) -> None:
    if state in EXPECTED_ILLEGAL.get(event, ()):
        with pytest.raises(IllegalTransition, match=event.name):
            settle(state, OLD, event, **_kwargs(event))  # type: ignore[arg-type]
        return
    new_state, error = settle(state, OLD, event, **_kwargs(event))  # type: ignore[arg-type]
    target = EXPECTED_TARGET[event]
    assert new_state is (S.FAILED if target is None else target)
    if new_state in WITH_ERROR and target is not None:
        assert error is BOOM  # the cause of the failure
    elif event in (Event.DELETING, Event.DELETE_ABORTED):
        assert error is OLD  # kept while the delete runs, and when it is abandoned
    else:
        assert error is None  # every success clears the error


def test_failures_need_a_cause_and_successes_refuse_one() -> None:
    with pytest.raises(IllegalTransition):
        settle(S.CONFIGURED, None, Event.FAILED)
    with pytest.raises(IllegalTransition):
        settle(S.PENDING, None, Event.CREATED, cause=BOOM)
    with pytest.raises(IllegalTransition):
        settle(S.REMOVED, None, Event.DELETE_ABORTED)
    with pytest.raises(IllegalTransition):
        settle(S.CONFIGURED, None, Event.DELETED, restore=S.CONFIGURED)


@given(st.lists(st.sampled_from(list(Event)), max_size=40))
def test_random_sequences_keep_error_and_state_consistent(events: list[Event]) -> None:
    """From NONEXISTENT, any sequence of events that can happen: a value is FAILED, RETRYING
    or INVALID exactly when it has an error (or is REMOVED while an erroneous value's delete
    runs); an aborted delete gives back the state and error from before the delete."""
    state, error = S.NONEXISTENT, None
    before_delete: tuple[ValueState, BaseException | None] | None = None
    for event in events:
        rule = RULES[event]
        if state not in rule.sources:
            continue
        if event is Event.DELETE_ABORTED:
            if before_delete is None:
                continue  # only a delete that started can be abandoned
            state, error = settle(state, error, event, restore=before_delete[0])
            assert (state, error) == before_delete
            before_delete = None
        else:
            cause = RuntimeError(event.name) if rule.error is Error.SET else None
            if event is Event.DELETING:
                before_delete = (state, error)
            elif before_delete is not None:
                before_delete = None  # the delete ended (or failed): nothing to abandon
            state, error = settle(state, error, event, cause=cause)
            if cause is not None:
                assert error is cause
        assert (error is not None) == (state in WITH_ERROR) or (
            state is S.REMOVED and before_delete is not None and before_delete[0] in WITH_ERROR
        )


def test_only_settle_writes_states() -> None:
    """The walk and the refresh report events; neither writes a state or an error itself."""
    import scheduler.refresh
    import scheduler.walk

    for module in (scheduler.walk, scheduler.refresh):
        assert module.__file__ is not None
        with open(module.__file__, encoding="utf-8") as source:
            text = source.read()
        assert ".state = " not in text and "node.error = " not in text, module.__name__

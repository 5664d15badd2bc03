"""The one place that decides a value's next state: ``settle(state, error, event)``.

The walk reports what happened to a value (an :class:`Event`); the rules table below says
which state follows, from which states the event may happen at all, and whether the value's
error is set, cleared or kept. Pure: no graph, no descriptors, no I/O.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from scheduler.api import TxnOperation, ValueState
from scheduler.graph import Node

S = ValueState


class Event(enum.Enum):
    """What happened to a value."""

    NO_DESCRIPTOR = "no descriptor selects the key"
    DEPENDENCY_MISSING = "a dependency is not available"
    CREATED = "created in the southbound"
    UPDATED = "updated in the southbound, or an equivalent value adopted"
    OBTAINED = "reported by the southbound (notification or refresh of an SB value)"
    DISCOVERED = "found by a refresh, of NB origin, not yet confirmed by NB"
    FOUND = "found by a refresh while waiting or missing: it exists after all"
    VANISHED = "a refresh no longer finds a configured value"
    DELETING = "its delete started (derived values and dependents go first)"
    DELETED = "deleted"
    DELETE_ABORTED = "a derived value or dependent could not go: the delete is abandoned"
    INVALID = "rejected by validation or by its descriptor's relations"
    FAILED = "an operation failed and will not be retried"
    FAILED_RETRYING = "an operation failed, a retry is scheduled"


class Error(enum.Enum):
    """What an event does to the value's error."""

    CLEAR = "clear"
    KEEP = "keep"
    SET = "set"  # the event's cause becomes the error


class IllegalTransition(ValueError):
    """An event that cannot happen to a value in its state: a bug of the walk."""


@dataclass(frozen=True, slots=True)
class Rule:
    target: ValueState | None  # None: the state before the delete started (DELETE_ABORTED)
    sources: frozenset[ValueState]
    error: Error


ALL = frozenset(ValueState)
#: States of a value that exists in the southbound (or may: a failed update or delete).
_EXISTING = frozenset(
    {S.CONFIGURED, S.OBTAINED, S.DISCOVERED, S.FAILED, S.RETRYING, S.INVALID, S.PENDING}
)
#: States with an error: a refresh keeps them (the retry, resync or next change settles them).
_ERRONEOUS = frozenset({S.FAILED, S.RETRYING, S.INVALID})
#: Transient: a value is REMOVED only while its delete runs or once it is gone.
_NOT_REMOVED = ALL - {S.REMOVED}

RULES: dict[Event, Rule] = {
    Event.NO_DESCRIPTOR: Rule(S.UNIMPLEMENTED, _NOT_REMOVED - {S.CONFIGURED}, Error.CLEAR),
    Event.DEPENDENCY_MISSING: Rule(S.PENDING, ALL, Error.CLEAR),
    Event.CREATED: Rule(S.CONFIGURED, ALL, Error.CLEAR),
    Event.UPDATED: Rule(S.CONFIGURED, _EXISTING, Error.CLEAR),
    Event.OBTAINED: Rule(S.OBTAINED, ALL, Error.CLEAR),
    Event.DISCOVERED: Rule(S.DISCOVERED, ALL - _ERRONEOUS, Error.CLEAR),
    Event.FOUND: Rule(S.CONFIGURED, ALL - _ERRONEOUS, Error.CLEAR),
    Event.VANISHED: Rule(S.MISSING, frozenset({S.CONFIGURED}), Error.CLEAR),
    Event.DELETING: Rule(S.REMOVED, _NOT_REMOVED, Error.KEEP),
    Event.DELETED: Rule(S.REMOVED, ALL, Error.CLEAR),
    Event.DELETE_ABORTED: Rule(None, frozenset({S.REMOVED}), Error.KEEP),
    Event.INVALID: Rule(S.INVALID, ALL, Error.SET),
    Event.FAILED: Rule(S.FAILED, ALL, Error.SET),
    Event.FAILED_RETRYING: Rule(S.RETRYING, ALL, Error.SET),
}

# The rule of each event by the state it may happen to (absent: illegal).
_RULE_FROM: dict[Event, dict[ValueState, Rule]] = {
    event: dict.fromkeys(rule.sources, rule) for event, rule in RULES.items()
}
_CLEAR, _SET = Error.CLEAR, Error.SET


def settle(
    state: ValueState,
    error: BaseException | None,
    event: Event,
    *,
    cause: BaseException | None = None,
    restore: ValueState | None = None,
) -> tuple[ValueState, BaseException | None]:
    """The state and error of a value in ``state`` (with ``error``) after ``event``.

    ``cause``: the error of INVALID and FAILED events (required there, refused elsewhere).
    ``restore``: the state the value had before its delete started (DELETE_ABORTED only).
    """
    rule = _RULE_FROM[event].get(state)  # one lookup: the walk settles every value it touches
    if rule is None:
        raise IllegalTransition(f"{event.name} cannot happen to a {state.name} value")
    target, mode = rule.target, rule.error
    if restore is None:
        if target is not None:
            if mode is _CLEAR:
                if cause is None:
                    return target, None
            elif mode is _SET:
                if cause is not None:
                    return target, cause
            elif cause is None:
                return target, error
    elif target is None and cause is None:
        return restore, error
    raise IllegalTransition(
        f"{event.name}: a cause goes with failures only, a restore state with aborts only"
    )


def settle_node(
    node: Node,
    event: Event,
    *,
    op: TxnOperation | None = None,
    details: tuple[str, ...] | None = (),
    cause: BaseException | None = None,
    restore: ValueState | None = None,
) -> None:
    """Apply ``event`` to ``node``: its state and error as :func:`settle` decides; ``op``
    becomes its last operation and ``details`` its details (None keeps either as it is)."""
    node.state, node.error = settle(node.state, node.error, event, cause=cause, restore=restore)
    if op is not None:
        node.last_op = op
    if details is not None:
        node.details = details

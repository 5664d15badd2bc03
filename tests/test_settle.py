"""kvmesh.settle: when a written value counts as reported on (the states are the scheduler's)."""

from __future__ import annotations

import pytest

from kvmesh.settle import GONE_STATES, SETTLED_STATES, settled


@pytest.mark.parametrize("state", sorted(s.name for s in SETTLED_STATES))
def test_a_new_status_in_a_final_state_settles_a_write(state: str) -> None:
    assert settled({"type": "bridge"}, {"state": "CONFIGURED", "seq": 1},
                   {"state": state, "seq": 2})


def test_a_status_of_an_earlier_transaction_or_in_flight_does_not() -> None:
    assert not settled({"type": "bridge"}, {"state": "CONFIGURED", "seq": 1},
                       {"state": "CONFIGURED", "seq": 1})
    assert not settled({"type": "bridge"}, None, {"state": "MISSING", "seq": 2})
    assert not settled({"type": "bridge"}, None, {"state": "NOT-A-STATE", "seq": 2})
    assert not settled({"type": "bridge"}, None, None)


def test_a_removal_settles_once_the_status_is_gone() -> None:
    assert settled(None, {"state": "CONFIGURED"}, None)
    for state in GONE_STATES:
        assert settled(None, None, {"state": state.name})
    assert not settled(None, None, {"state": "CONFIGURED"})

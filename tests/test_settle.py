"""kvmesh.settle: when a written value counts as reported on (the states are the scheduler's)."""

from __future__ import annotations

import pytest

from kvmesh.settle import GONE_STATES, PENDING_GRACE_S, SETTLED_STATES, hold_pending, settled


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


CONFIGURED, PENDING = {"state": "CONFIGURED", "seq": 2}, {"state": "PENDING", "seq": 2}


def test_a_pending_value_is_held_until_a_grace_after_the_rest_of_its_node_settled() -> None:
    """The Linux end of a Linux-CP pair appears a moment after the pair is CONFIGURED: a Linux
    value waiting for it is PENDING in the meantime, and must not end `apply --wait` yet."""
    rows = {"vpp/lcp/bond0": (True, CONFIGURED), "linux/interface/be0": (True, PENDING),
            "vpp/interface/gre1": (False, None)}
    held, quiet = hold_pending(rows, None, now=10.0)
    assert quiet is None and held["linux/interface/be0"] == (False, PENDING)
    assert held["vpp/lcp/bond0"] == (True, CONFIGURED)
    rows["vpp/interface/gre1"] = (True, CONFIGURED)
    held, quiet = hold_pending(rows, quiet, now=11.0)
    assert quiet == 11.0 and held["linux/interface/be0"] == (False, PENDING)
    held, quiet = hold_pending(rows, quiet, now=11.0 + PENDING_GRACE_S / 2)
    assert quiet == 11.0 and not held["linux/interface/be0"][0]
    held, quiet = hold_pending(rows, quiet, now=11.0 + PENDING_GRACE_S)
    assert held == rows  # still PENDING after the grace: final
    # Another value of the node unsettled again (a new status in flight): the grace restarts.
    rows["vpp/interface/gre1"] = (False, CONFIGURED)
    held, quiet = hold_pending(rows, quiet, now=20.0)
    assert quiet is None and not held["linux/interface/be0"][0]


def test_without_pending_values_nothing_is_held() -> None:
    rows = {"a": (True, CONFIGURED), "b": (False, None), "c": (True, {"state": "FAILED"})}
    assert hold_pending(rows, None, now=1.0)[0] == rows

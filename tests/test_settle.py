"""kvmesh.settle: when a written value counts as reported on (the states are the scheduler's)."""

from __future__ import annotations

import pytest

from kvmesh.settle import GONE_STATES, SETTLED_STATES, hold_pending, settled


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


CONFIGURED, FAILED = {"state": "CONFIGURED", "seq": 2}, {"state": "FAILED", "seq": 2}
LCP, BE0, BE0_ROUTE = "vpp/lcp/bond0", "linux/interface/be0", "linux/route/main/10.0.0.2/32/be0"
HOST_BE0 = "linux/interface/host/be0"
# What the router example writes to n1 (docs/examples/vpp-router.yaml), in part.
WRITTEN = {"vpp/interface/bond0": {"type": "bond"}, LCP: {"host_if_name": "be0"},
           BE0: {"type": "existing", "addresses": ["192.0.2.1/24"]},
           BE0_ROUTE: {"dst": "10.0.0.2/32", "dev": "be0", "gateway": "192.0.2.2"}}
# The Linux values PENDING until the node's Linux watcher reports the link VPP made, saying
# what they wait for by key (as an agent of this release publishes it).
BE0_PENDING = {"state": "PENDING", "seq": 2, "details": ["existing link be0"],
               "waits_for_keys": [[HOST_BE0]]}
ROUTE_PENDING = {"state": "PENDING", "seq": 2, "details": ["interface be0", "address of be0"],
                 "waits_for_keys": [[BE0, HOST_BE0], [BE0]]}


def rows_with(pair: tuple[bool, dict | None]) -> dict:
    return {"vpp/interface/bond0": (True, CONFIGURED), LCP: pair,
            BE0: (True, BE0_PENDING), BE0_ROUTE: (True, ROUTE_PENDING)}


def unsettled(rows: dict) -> set[str]:
    return {key for key, (done, _record) in hold_pending(rows, WRITTEN).items() if not done}


def test_a_pending_value_waiting_for_what_a_value_written_with_it_makes_is_followed() -> None:
    """The Linux end of a Linux-CP pair appears a moment after the pair is CONFIGURED: the
    Linux values waiting for it (the route through the link that waits for it, too) are
    followed while the pair is CONFIGURED or not reported on yet."""
    assert unsettled(rows_with((True, CONFIGURED))) == {BE0, BE0_ROUTE}
    assert unsettled(rows_with((False, None))) == {LCP, BE0, BE0_ROUTE}
    # The link found: each value reports again, and is settled as it says.
    rows = {**rows_with((True, CONFIGURED)), BE0: (True, CONFIGURED),
            BE0_ROUTE: (True, {**ROUTE_PENDING, "waits_for_keys": [["linux/interface/r9"]]})}
    assert unsettled(rows) == set()


def test_a_pending_value_whose_provider_failed_or_was_not_written_is_final() -> None:
    assert unsettled(rows_with((True, FAILED))) == set()
    assert unsettled(rows_with((True, {"state": "PENDING", "seq": 2}))) == set()
    rows = rows_with((True, CONFIGURED))
    del rows[LCP]  # the pair was there before: not written in this apply
    assert hold_pending(rows, {k: v for k, v in WRITTEN.items() if k != LCP}) == rows
    # Removed in this apply: it makes nothing.
    assert hold_pending(rows_with((True, None)), {**WRITTEN, LCP: None})[BE0][0]


def test_a_status_without_the_keys_is_final() -> None:
    """An older agent's status says what a value waits for by label only: final, as always;
    a malformed list is no better."""
    for record in ({k: v for k, v in BE0_PENDING.items() if k != "waits_for_keys"},
                   {**BE0_PENDING, "waits_for_keys": HOST_BE0},
                   {**BE0_PENDING, "waits_for_keys": [[1]]},
                   {**BE0_PENDING, "waits_for_keys": []}):
        rows = {**rows_with((True, CONFIGURED)), BE0: (True, record)}
        assert unsettled(rows) == set(), record

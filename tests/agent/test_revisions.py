"""The revisions core: records, restore, expiry, and the confirm timer's decisions."""

from __future__ import annotations

import pytest

from kvmesh.agent import revisions as r


def record(rev: int, before: dict, after: dict, timeout: float | None = None) -> dict:
    return r.new_revision(rev, "me@host", 100.0 + rev, before, after, timeout)


def test_keys_and_records_round_trip() -> None:
    key = r.revision_key("n2", 7)
    assert key == "revision/n2/00000007" and r.revision_of(key, "n2") == 7
    assert r.revision_of("node/n2/agent", "n2") is None
    rec = record(7, {"a": None}, {"a": {"x": 1}}, timeout=5)
    assert r.decode(r.encode(rec)) == rec and r.is_pending(rec)
    assert r.decode(b"\x01") is None and r.decode(b"") is None
    assert not r.is_pending(r.with_confirm_state(rec, r.CONFIRMED))


def test_restore_undoes_later_revisions_newest_first() -> None:
    records = [record(1, {"a": None}, {"a": {"v": 1}}),
               record(2, {"a": {"v": 1}}, {"a": {"v": 2}, "b": {"v": 1}}) | {
                   "changes": {"a": {"before": {"v": 1}, "after": {"v": 2}},
                               "b": {"before": None, "after": {"v": 1}}}},
               record(3, {"a": {"v": 2}}, {"a": {"v": 3}})]
    assert r.restore_values(records, 1) == {"a": {"v": 1}, "b": None}
    assert r.restore_values(records, 3) == {}
    with pytest.raises(ValueError, match="no revision 9"):
        r.restore_values(records, 9)
    with pytest.raises(ValueError, match="gone"):
        r.restore_values([records[0], records[2]], 1)


def test_expiry_keeps_the_newest() -> None:
    assert r.expired_revisions(range(1, r.MAX_REVISIONS + 1), r.MAX_REVISIONS + 1) == [1]
    assert r.expired_revisions([5, 6], 7) == []


def test_confirm_timer_counts_from_first_sight_and_ignores_confirmed() -> None:
    timer = r.ConfirmTimer()
    pending = record(4, {}, {"a": {}}, timeout=10)
    assert timer.due({4: pending}, now=1000.0) == []
    assert timer.due({4: pending}, now=1009.9) == []
    assert timer.due({4: pending}, now=1010.0) == [4]
    confirmed = r.with_confirm_state(pending, r.CONFIRMED)
    assert timer.due({4: confirmed}, now=2000.0) == []
    assert timer.due({4: record(4, {}, {"a": {}})}, now=2000.0) == []  # no confirm asked

"""Peer state machine, backoff, parallel-sync cap and the anti-entropy timer."""

from __future__ import annotations

import random

import pytest

from kvstore.peers import AntiEntropyTimer, Backoff, PeerState, PeerTable

IDLE, SYNCING, INITIALIZED = PeerState.IDLE, PeerState.SYNCING, PeerState.INITIALIZED


def table(**kwargs: object) -> PeerTable:
    defaults: dict[str, object] = {"initial_backoff_ms": 100, "max_backoff_ms": 800}
    defaults.update(kwargs)
    return PeerTable(**defaults)  # type: ignore[arg-type]


# ---------------------------------------------------------------- Backoff


def test_backoff_doubles_up_to_max_and_resets() -> None:
    b = Backoff(100, 500)
    assert b.can_try(0)
    waits = []
    for now in (0, 1000, 2000, 3000, 4000):
        b.report_error(now)
        waits.append(b.retry_at_ms - now)  # type: ignore[operator]
    assert waits == [100, 200, 400, 500, 500]
    assert not b.can_try(4499) and b.can_try(4500)
    b.report_success()
    assert b.can_try(0) and b.current_ms == 0
    b.report_error(0)
    assert b.retry_at_ms == 100


def test_backoff_jitter_is_seeded_and_bounded() -> None:
    def waits(seed: int) -> list[int]:
        b = Backoff(1000, 1000, rng=random.Random(seed), jitter=0.1)
        out = []
        for _ in range(20):
            b.report_error(0)
            out.append(b.retry_at_ms or 0)
        return out

    assert waits(7) == waits(7)
    assert all(900 <= w <= 1100 for w in waits(7))
    assert len(set(waits(7))) > 1


@pytest.mark.parametrize("args", [(0, 10), (10, 5), (-1, 10)])
def test_backoff_rejects_bad_bounds(args: tuple[int, int]) -> None:
    with pytest.raises(ValueError):
        Backoff(*args)


def test_backoff_jitter_needs_rng() -> None:
    with pytest.raises(ValueError, match="rng"):
        Backoff(1, 2, jitter=0.5)


# ---------------------------------------------------------------- PeerTable FSM


def test_new_peer_starts_idle_then_syncs_then_initialized() -> None:
    t = table()
    p = t.add("b", 10, spec="tcp://b")
    assert (p.state, p.state_since_ms, p.flaps) == (IDLE, 10, 0)
    assert not t.initial_sync_done()
    started = t.start_syncs(20)
    assert [x.name for x in started] == ["b"]
    assert (p.state, p.state_since_ms) == (SYNCING, 20)
    assert t.start_syncs(21) == []  # already syncing
    assert t.sync_succeeded("b", p.sync_id, 30) == set()
    assert (p.state, p.state_since_ms) == (INITIALIZED, 30)
    assert t.initial_sync_done()


def test_stale_sync_reply_is_ignored() -> None:
    t = table()
    p = t.add("b", 0)
    t.start_syncs(0)
    old_id = p.sync_id
    assert t.sync_failed("b", 5)
    t.start_syncs(1000)
    assert p.sync_id != old_id
    assert t.sync_succeeded("b", old_id, 1001) is None
    assert p.state == SYNCING
    assert t.sync_succeeded("unknown", 1, 0) is None
    assert not t.sync_failed("b", 1002, sync_id=old_id)  # late error of the old sync
    assert p.state == SYNCING


def test_failure_backs_off_and_counts_flaps_only_from_initialized() -> None:
    t = table()
    p = t.add("b", 0)
    t.start_syncs(0)
    t.sync_failed("b", 0)
    assert (p.state, p.flaps, p.errors) == (IDLE, 0, 1)
    assert t.start_syncs(99) == []
    assert t.initial_sync_done()  # failed once: does not hold readiness
    assert [x.name for x in t.start_syncs(100)] == ["b"]
    t.sync_failed("b", 100)
    assert t.start_syncs(299) == [] and len(t.start_syncs(300)) == 1  # 200 ms now
    t.sync_succeeded("b", p.sync_id, 300)
    assert p.backoff.current_ms == 0
    t.sync_failed("b", 400)  # flood/finalize failure while initialized
    assert (p.state, p.flaps) == (IDLE, 1)
    assert p.backoff.retry_at_ms == 500  # backoff restarted from the initial value


def test_inconsistency_resyncs_without_backoff() -> None:
    t = table()
    p = t.add("b", 0)
    t.start_syncs(0)
    t.sync_succeeded("b", p.sync_id, 0)
    assert t.inconsistency("b", 5)
    assert (p.state, p.flaps) == (IDLE, 1)
    assert len(t.start_syncs(5)) == 1
    assert not t.inconsistency("nobody", 5)


def test_parallel_sync_cap_starts_at_2_and_doubles_to_max() -> None:
    t = table(parallel_syncs_max=8)
    for i in range(20):
        t.add(f"p{i:02d}", 0)
    first = t.start_syncs(0)
    assert [p.name for p in first] == ["p00", "p01"]
    assert t.start_syncs(0) == []
    for p in first:
        t.sync_succeeded(p.name, p.sync_id, 1)
    assert t.parallel_syncs == 8  # 2 -> 4 -> 8 (capped)
    assert len(t.start_syncs(1)) == 8
    assert t.in_flight() == 8


def test_updating_a_peer_spec_restarts_it() -> None:
    t = table()
    p = t.add("b", 0, spec="url1")
    t.start_syncs(0)
    t.sync_succeeded("b", p.sync_id, 0)
    assert t.add("b", 5, spec="url1") is p and p.state == INITIALIZED
    t.add("b", 6, spec="url2")
    assert (p.state, p.state_since_ms, p.spec) == (IDLE, 6, "url2")
    assert t.remove("b") is p and "b" not in t and t.remove("b") is None


def test_flood_targets_initialized_only_and_pending_keys_for_syncing() -> None:
    t = table()
    for name in ("a", "b", "c"):
        t.add(name, 0)
    t.start_syncs(0)  # a, b syncing; c idle
    pa = t["a"]
    t.sync_succeeded("a", pa.sync_id, 0)
    assert t.flood_targets(iter(["k1", "k2"])) == ["a"]
    assert t.flood_targets(["k3"], exclude=["a"]) == []
    pb = t["b"]
    assert pb.pending_keys == {"k1", "k2", "k3"}
    assert t["c"].pending_keys == set()  # idle: its coming full sync covers everything
    assert t.sync_succeeded("b", pb.sync_id, 1) == {"k1", "k2", "k3"}
    assert pb.pending_keys == set()
    assert sorted(t.flood_targets(["k4"])) == ["a", "b"]


def test_pending_keys_reset_when_a_new_sync_starts() -> None:
    t = table()
    p = t.add("b", 0)
    t.start_syncs(0)
    t.flood_targets(["k1"])
    t.sync_failed("b", 0)
    t.start_syncs(100)
    assert p.pending_keys == set()


def test_peer_table_rejects_bad_config() -> None:
    with pytest.raises(ValueError):
        PeerTable(parallel_syncs_start=0)
    with pytest.raises(ValueError):
        PeerTable(parallel_syncs_start=4, parallel_syncs_max=2)
    with pytest.raises(ValueError):
        PeerTable(initial_backoff_ms=0)


def test_no_peers_means_initial_sync_done() -> None:
    t = table()
    assert t.initial_sync_done()


# ---------------------------------------------------------------- anti-entropy


def test_anti_entropy_first_round_immediate_then_jittered_interval() -> None:
    timer = AntiEntropyTimer(10_000, random.Random(1))
    peers = ["a", "b", "c"]
    picks = []
    now = 0
    gaps = []
    for _ in range(200):
        pick = timer.poll(now, peers)
        assert pick in peers
        picks.append(pick)
        gaps.append(timer.next_due_ms - now)
        assert timer.poll(timer.next_due_ms - 1, peers) is None
        now = timer.next_due_ms
    assert all(8000 <= g <= 12_000 for g in gaps)
    assert len(set(gaps)) > 10
    assert set(picks) == set(peers)


def test_anti_entropy_is_reproducible_with_the_same_seed() -> None:
    def run(seed: int) -> list[str | None]:
        timer = AntiEntropyTimer(1000, random.Random(seed))
        out = []
        for now in range(0, 50_000, 500):
            out.append(timer.poll(now, ["x", "y", "z"]))
        return out

    assert run(3) == run(3)


def test_anti_entropy_without_candidates_still_reschedules() -> None:
    timer = AntiEntropyTimer(1000, random.Random(0), jitter=0.0, start_ms=50)
    assert timer.poll(49, ["a"]) is None
    assert timer.poll(50, []) is None
    assert timer.next_due_ms == 1050


def test_anti_entropy_rejects_bad_config() -> None:
    with pytest.raises(ValueError):
        AntiEntropyTimer(0, random.Random())
    with pytest.raises(ValueError):
        AntiEntropyTimer(10, random.Random(), jitter=1.5)


# ---------------------------------------------------------------- liveness (dead or silent peers)


def test_a_silent_peer_is_probed_then_marked_down_and_is_not_synced_until_it_answers() -> None:
    t = table(dead_after_ms=900)  # probes after 300 ms without news
    t.add("a", 0)
    t.start_syncs(0)
    t.sync_succeeded("a", t["a"].sync_id, 10)
    t.heard_from("a", 10)
    assert [p.name for p in t.keepalives_due(309)] == []
    assert [p.name for p in t.keepalives_due(310)] == ["a"]
    assert t.keepalives_due(311) == []  # one probe per interval, answered or not
    t.heard_from("a", 400)  # the probe's answer
    assert t.mark_silent(1299) == [] and t["a"].state == INITIALIZED
    assert [p.name for p in t.keepalives_due(700)] == ["a"]
    assert [p.name for p in t.mark_silent(1300)] == ["a"]  # 900 ms without news
    peer = t["a"]
    assert (peer.state, peer.down, peer.flaps, peer.state_since_ms) == (IDLE, True, 1, 1300)
    assert t.mark_silent(5000) == []  # marked once
    assert t.flood_targets(["k"]) == []
    assert t.start_syncs(100_000) == []  # a down peer is probed, not synced
    assert [p.name for p in t.keepalives_due(100_000)] == ["a"]
    assert t.down_count() == 1
    assert t.heard_from("a", 100_001) is True  # it is back: synced at once, whatever the backoff
    assert not peer.down and t.down_count() == 0
    assert [p.name for p in t.start_syncs(100_001)] == ["a"]
    assert t.heard_from("a", 100_002) is False


def test_a_peer_that_never_answers_is_marked_down_mid_sync_and_liveness_can_be_off() -> None:
    t = table(dead_after_ms=900)
    t.add("a", 0)
    assert [p.name for p in t.start_syncs(0)] == ["a"]
    t.flood_targets(["k"])  # remembered for the sync in flight
    assert [p.name for p in t.mark_silent(900)] == ["a"]
    assert t["a"].state == IDLE and t["a"].pending_keys == set()
    assert t.initial_sync_done()  # readiness is not held hostage by a dead peer
    off = table()
    off.add("a", 0)
    assert off.keepalives_due(10**9) == [] and off.mark_silent(10**9) == []
    with pytest.raises(ValueError):
        table(dead_after_ms=-1)


def test_a_peer_readded_with_a_new_address_gets_the_full_time_again() -> None:
    t = table(dead_after_ms=900)
    t.add("a", 0, spec="tcp://x:1")
    t.mark_silent(900)
    assert t["a"].down
    t.add("a", 1000, spec="tcp://x:2")
    assert not t["a"].down and t.mark_silent(1899) == []
    assert [p.name for p in t.start_syncs(1000)] == ["a"]


def test_the_liveness_limit_changes_live_and_off_brings_the_down_back() -> None:
    t = table(dead_after_ms=900)
    t.add("a", 0)
    t.mark_silent(900)
    assert t["a"].down and t.start_syncs(10**6) == []
    t.set_dead_after(3000)
    assert t.keepalive_ms == 1000
    t.set_dead_after(0)
    assert not t["a"].down and t.keepalives_due(10**7) == []
    assert [p.name for p in t.start_syncs(10**6)] == ["a"]

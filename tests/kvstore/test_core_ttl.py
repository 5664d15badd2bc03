"""TTL countdown, remaining-TTL reporting and the flood TTL rules of KvStoreDb."""

from __future__ import annotations

import pytest

from kvstore.db import KvStoreDb
from kvstore.ttl import ExpiryQueue
from kvstore.value import TTL_INFINITY, Value


def v(
    version: int = 1,
    orig: str = "a",
    value: bytes | None = b"x",
    ttl: int = TTL_INFINITY,
    ttl_version: int = 0,
) -> Value:
    return Value(version, orig, value, ttl, ttl_version)


@pytest.fixture
def db() -> KvStoreDb:
    return KvStoreDb("me")


def test_key_expires_exactly_when_its_ttl_runs_out(db: KvStoreDb) -> None:
    db.merge({"k": v(ttl=1000)}, 5000)
    assert db.next_expiry_ms() == 6000
    assert db.expire(5999) == []
    assert "k" in db
    assert db.expire(6000) == ["k"]
    assert "k" not in db and len(db) == 0
    assert db.next_expiry_ms() is None
    assert db.counters["kvstore.expired_keys"] == 1


def test_infinite_keys_never_enter_the_queue(db: KvStoreDb) -> None:
    db.merge({"k": v()}, 0)
    assert db.next_expiry_ms() is None
    assert db.gauges()["kvstore.ttl_queue_size"] == 0
    assert db.expire(2**40) == []


def test_infinite_after_finite_is_not_deleted_by_the_stale_entry(db: KvStoreDb) -> None:
    db.merge({"k": v(1, ttl=1000)}, 0)
    db.merge({"k": v(2, ttl=TTL_INFINITY)}, 10)
    assert db.next_expiry_ms() is None  # the stale entry is recognised as such
    assert db.expire(5000) == []
    assert db.get(["k"], 5000)["k"].ttl_ms == TTL_INFINITY


def test_short_after_long_really_expires(db: KvStoreDb) -> None:
    db.merge({"k": v(1, ttl=100_000)}, 0)
    db.merge({"k": v(2, ttl=1000)}, 0)
    assert db.next_expiry_ms() == 1000
    assert db.expire(1000) == ["k"]
    assert db.expire(100_000) == []  # the long entry is stale and finds nothing


def test_long_after_short_survives_the_short_entry(db: KvStoreDb) -> None:
    db.merge({"k": v(1, ttl=1000)}, 0)
    db.merge({"k": v(2, ttl=100_000)}, 0)
    assert db.expire(1000) == []
    assert db.next_expiry_ms() == 100_000
    assert db.expire(100_000) == ["k"]


def test_ttl_only_refresh_extends_life(db: KvStoreDb) -> None:
    db.merge({"k": v(1, ttl=1000)}, 0)
    db.merge({"k": v(1, value=None, ttl=1000, ttl_version=1)}, 900)
    assert db.expire(1000) == []
    assert db.get(["k"], 1000)["k"].ttl_ms == 900
    assert db.expire(1900) == ["k"]


def test_refresh_to_the_same_expiry_instant_expires_once(db: KvStoreDb) -> None:
    db.merge({"k": v(1, ttl=1000)}, 0)
    db.merge({"k": v(1, value=None, ttl=500, ttl_version=1)}, 500)  # same absolute expiry
    assert db.expire(1000) == ["k"]


def test_re_added_key_after_expiry_lives_its_new_ttl(db: KvStoreDb) -> None:
    db.merge({"k": v(1, ttl=1000)}, 0)
    assert db.expire(1000) == ["k"]
    db.merge({"k": v(1, ttl=1000)}, 1500)
    assert db.expire(2000) == []
    assert db.expire(2500) == ["k"]


def test_remaining_ttl_is_reported_by_every_read(db: KvStoreDb) -> None:
    db.merge({"k": v(ttl=10_000), "inf": v()}, 1000)
    now = 4000
    assert db.get(["k"], now)["k"].ttl_ms == 7000
    assert db.dump(now)["k"].ttl_ms == 7000
    assert db.hash_dump(now)["k"].ttl_ms == 7000
    assert db.dump(now)["inf"].ttl_ms == TTL_INFINITY
    # full-sync answers also lose the per-hop decrement (1 ms by default)
    send, _ = db.dump_difference({}, now)
    assert send["k"].ttl_ms == 6999
    assert send["inf"].ttl_ms == TTL_INFINITY


def test_reads_hide_keys_whose_ttl_ran_out_before_expire_ran(db: KvStoreDb) -> None:
    db.merge({"k": v(ttl=1000)}, 0)
    assert db.get(["k"], 1000) == {}
    assert db.dump(1000) == {}
    assert db.hash_dump(1000) == {}
    assert db.dump_difference({}, 1000) == ({}, [])


def test_merge_over_an_expired_but_uncollected_key_and_its_expiry_is_reported(
    db: KvStoreDb,
) -> None:
    db.merge({"k": v(5, ttl=1000)}, 0)
    # At t=2000 the old v5 no longer exists: a lower version is accepted as a new key.
    result = db.merge({"k": v(3, ttl=1000)}, 2000)
    assert result.delta.keys() == {"k"}
    assert db.next_expiry_ms() is not None
    assert db.expire(2000) == ["k"]  # the old incarnation's expiry is still announced
    assert db.get(["k"], 2000)["k"].version == 3
    assert db.expire(3000) == ["k"]


def test_ttl_update_for_expired_key_is_unknown_and_expiry_reported(db: KvStoreDb) -> None:
    db.merge({"k": v(5, ttl=1000)}, 0)
    result = db.merge({"k": v(5, value=None, ttl=1000, ttl_version=1)}, 1000)
    assert result.no_merge == {"k": "UNKNOWN_KEY_TTL_UPDATE"}
    assert "k" not in db
    assert db.expire(1000) == ["k"]
    assert db.expire(1000) == []


def test_expire_returns_many_keys_in_expiry_order(db: KvStoreDb) -> None:
    db.merge({"b": v(ttl=2000), "a": v(ttl=3000), "c": v(ttl=1000)}, 0)
    db.merge({"d": v(ttl=500)}, 500)
    assert db.expire(10_000) == ["c", "d", "b", "a"]


def test_stale_entries_are_compacted_under_heavy_refresh() -> None:
    db = KvStoreDb("me")
    db.merge({f"k{i}": v(ttl=10**9) for i in range(100)}, 0)
    for ttl_version in range(1, 120):
        db.merge(
            {f"k{i}": v(value=None, ttl=10**9, ttl_version=ttl_version) for i in range(100)},
            ttl_version,
        )
    # 12000 queue entries for 100 live keys would exceed the 8x bound: a rebuild happened.
    assert db.gauges()["kvstore.ttl_queue_size"] <= 4096 + 100
    assert db.counters["kvstore.ttl_queue_compactions"] >= 1
    assert db.next_expiry_ms() == 119 + 10**9
    assert sorted(db.expire(2 * 10**9)) == sorted(f"k{i}" for i in range(100))


# ---------------------------------------------------------------- prepare_flood


def test_prepare_flood_rewrites_ttl_to_remaining_minus_decrement() -> None:
    db = KvStoreDb("me", ttl_decrement_ms=10)
    delta = db.merge({"k": v(ttl=5000)}, 0).delta
    out = db.prepare_flood(delta, 1000)
    assert out["k"].ttl_ms == 3990
    assert out["k"] is not delta["k"] and delta["k"].ttl_ms == 5000  # input untouched
    assert (out["k"].version, out["k"].value, out["k"].hash) == (1, b"x", delta["k"].hash)


def test_prepare_flood_in_place_rewrites_the_delta_objects_never_the_store() -> None:
    db = KvStoreDb("me", ttl_decrement_ms=10)
    delta = db.merge({"k": v(ttl=5000), "t": v(ttl=8000), "inf": v()}, 0).delta
    delta.update(db.merge({"t": v(value=None, ttl=9000, ttl_version=1)}, 0).delta)
    objects = dict(delta)
    out = db.prepare_flood(delta, 1000, in_place=True)
    assert {k: x.ttl_ms for k, x in out.items()} == {"k": 3990, "t": 7990, "inf": TTL_INFINITY}
    assert all(out[k] is objects[k] for k in out)  # no copies
    # The store keeps its own records: remaining TTLs are untouched.
    assert {k: x.ttl_ms for k, x in db.get(out, 1000).items()} == {
        "k": 4000,
        "t": 8000,
        "inf": TTL_INFINITY,
    }
    assert db.prepare_flood(delta, 2000)["k"].ttl_ms == 2990  # from the store's expiry again


def test_prepare_flood_leaves_infinite_untouched(db: KvStoreDb) -> None:
    delta = db.merge({"k": v()}, 0).delta
    assert db.prepare_flood(delta, 10**9)["k"].ttl_ms == TTL_INFINITY


def test_prepare_flood_drops_keys_about_to_expire() -> None:
    db = KvStoreDb("me", ttl_decrement_ms=100, ttl_threshold_ms=500)
    delta = db.merge(
        {"keep": v(ttl=600), "below_threshold": v(ttl=499), "le_decrement": v(ttl=100)}, 0
    ).delta
    out = db.prepare_flood(delta, 0)
    assert set(out) == {"keep"}
    assert out["keep"].ttl_ms == 500
    assert db.prepare_flood(delta, 101) == {}  # keep now has 499 ms left
    assert db.counters["kvstore.flood.dropped_keys"] == 2 + 3


def test_prepare_flood_decrement_rule_applies_with_zero_threshold() -> None:
    db = KvStoreDb("me", ttl_decrement_ms=5, ttl_threshold_ms=0)
    delta = db.merge({"a": v(ttl=5), "b": v(ttl=6)}, 0).delta
    assert {k: x.ttl_ms for k, x in db.prepare_flood(delta, 0).items()} == {"b": 1}


def test_prepare_flood_drops_superseded_and_expired_values(db: KvStoreDb) -> None:
    old = db.merge({"k": v(1, ttl=10_000), "gone": v(ttl=1000)}, 0).delta
    db.merge({"k": v(2, ttl=10_000)}, 0)
    db.expire(1000)
    assert db.prepare_flood(old, 1000) == {}


def test_prepare_flood_keeps_ttl_only_updates_without_value(db: KvStoreDb) -> None:
    db.merge({"k": v(ttl=1000)}, 0)
    delta = db.merge({"k": v(value=None, ttl=9000, ttl_version=1)}, 0).delta
    out = db.prepare_flood(delta, 1000)
    assert out["k"].value is None and out["k"].ttl_ms == 7999 and out["k"].ttl_version == 1


def test_prepare_flood_of_get_result_works_for_finalize(db: KvStoreDb) -> None:
    db.merge({"k": v(ttl=10_000), "inf": v()}, 0)
    out = db.prepare_flood(db.get(["k", "inf", "missing"], 2000), 2000)
    assert {k: x.ttl_ms for k, x in out.items()} == {"k": 7999, "inf": TTL_INFINITY}


# ---------------------------------------------------------------- ExpiryQueue itself


def test_expiry_queue_groups_keys_and_pops_in_order() -> None:
    q = ExpiryQueue()
    q.push("a", 10)
    q.push("b", 5)
    q.push("c", 10)
    q.push("d", 10)
    assert len(q) == 4 and q.peek() == 5
    assert list(q.keys_at(10)) == ["a", "c", "d"]
    assert list(q.pop_due(9)) == [(5, "b")]
    assert list(q.pop_due(10)) == [(10, "a"), (10, "c"), (10, "d")]
    assert len(q) == 0 and q.peek() is None and q.keys_at(10) == ()


def test_expiry_queue_rebuild_replaces_everything() -> None:
    q = ExpiryQueue()
    for i in range(10):
        q.push(f"k{i}", i)
    q.rebuild([("x", 7), ("y", 3)])
    assert len(q) == 2
    assert list(q.pop_due(100)) == [(3, "y"), (7, "x")]


def test_one_per_hop_ttl_rule_for_floods_sync_replies_and_finalize() -> None:
    """Flood (prepare_flood), full-sync reply (dump_difference) and the finalize step (the node's
    wire_values) send a finite-TTL key on by one rule, `hop_ttl`: decrement, and not at all below
    the threshold or the decrement."""
    from kvstore.value import hop_ttl

    assert hop_ttl(10_000, 1, 500) == 9_999
    assert hop_ttl(499, 1, 500) is None  # would expire in flight
    assert hop_ttl(1, 1, 0) is None
    db = KvStoreDb("me", ttl_decrement_ms=100, ttl_threshold_ms=1_000)
    db.merge({"long": Value(1, "o", b"a", 5_000, 0), "short": Value(1, "o", b"b", 900, 0)}, 0)
    flooded = db.prepare_flood(db.get(["long", "short"], 0), 0)
    send, _want = db.dump_difference({}, 0)
    assert {k: v.ttl_ms for k, v in flooded.items()} == {"long": 4_900}
    assert {k: v.ttl_ms for k, v in send.items()} == {"long": 4_900}, "sync follows the same rule"


def test_next_expiry_drops_the_stale_keys_ahead_of_the_first_live_one(db: KvStoreDb) -> None:
    """The node asks for the next expiry after every socket pass; keys refreshed in the order
    they were queued must not be walked again each time (quadratic under a steady flood)."""
    db.merge({f"k{i}": v(ttl=1000) for i in range(10)}, 0)  # one expiry time, 10 keys
    db.merge({f"k{i}": v(version=2, ttl=5000) for i in range(6)}, 0)  # the first 6 refreshed
    assert db.gauges()["kvstore.ttl_queue_size"] == 16
    assert db.next_expiry_ms() == 1000
    assert db.gauges()["kvstore.ttl_queue_size"] == 10  # the 6 stale entries ahead are gone
    assert db.next_expiry_ms() == 1000
    assert db.expire(1000) == [f"k{i}" for i in range(6, 10)]
    assert db.next_expiry_ms() == 5000


def test_expiry_queue_head_drop_leaves_a_key() -> None:
    queue = ExpiryQueue()
    queue.push_many(["a", "b", "c"], 7)
    queue.drop_earliest_head(2)
    assert list(queue.keys_at(7)) == ["c"] and len(queue) == 1
    with pytest.raises(ValueError):
        queue.drop_earliest_head(1)

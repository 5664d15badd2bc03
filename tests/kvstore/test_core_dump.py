"""Dumps (prefix, originator, bucket filters), hash dumps and the 3-way full-sync diff."""

from __future__ import annotations

import pytest

from kvstore.db import KvStoreDb
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
    store = KvStoreDb("me")
    store.merge(
        {
            "adj:n1": v(orig="n1"),
            "adj:n2": v(orig="n2"),
            "adj:n10": v(orig="n1"),
            "prefix:n1": v(orig="n1"),
            "prefix:n2": v(orig="n2"),
            "ad": v(orig="n3"),
            "adj;": v(orig="n3"),  # ';' sorts right after ':'
            "": v(orig="n3"),
        },
        0,
    )
    return store


def test_dump_all_is_sorted_copies(db: KvStoreDb) -> None:
    out = db.dump(0)
    assert list(out) == sorted(out)
    assert len(out) == 8
    out["adj:n1"].value = b"changed"
    assert db.get(["adj:n1"], 0)["adj:n1"].value == b"x"


def test_dump_by_prefix_is_the_exact_range(db: KvStoreDb) -> None:
    assert list(db.dump(0, prefix="adj:")) == ["adj:n1", "adj:n10", "adj:n2"]
    assert list(db.dump(0, prefix="adj")) == ["adj:n1", "adj:n10", "adj:n2", "adj;"]
    assert list(db.dump(0, prefix="zzz")) == []
    assert list(db.dump(0, prefix="adj:n1")) == ["adj:n1", "adj:n10"]


def test_dump_by_originator_and_by_both(db: KvStoreDb) -> None:
    assert set(db.dump(0, originator_ids={"n1"})) == {"adj:n1", "adj:n10", "prefix:n1"}
    assert set(db.dump(0, originator_ids=["n1", "n2"], prefix="prefix:")) == {
        "prefix:n1",
        "prefix:n2",
    }
    assert db.dump(0, originator_ids={"nobody"}) == {}


def test_hash_dump_has_no_values_but_everything_else(db: KvStoreDb) -> None:
    full = db.dump(0, prefix="adj:")
    hashes = db.hash_dump(0, prefix="adj:")
    assert set(hashes) == set(full)
    for key, h in hashes.items():
        assert h.value is None
        f = full[key]
        assert (h.version, h.originator_id, h.hash, h.ttl_ms, h.ttl_version) == (
            f.version,
            f.originator_id,
            f.hash,
            f.ttl_ms,
            f.ttl_version,
        )
        assert h.hash is not None


def test_dump_by_buckets(db: KvStoreDb) -> None:
    bucket = db.bucket_of("adj:n1")
    assert "adj:n1" in db.dump(0, buckets=[bucket])
    assert all(db.bucket_of(k) == bucket for k in db.dump(0, buckets=[bucket]))
    everything = db.dump(0, buckets=range(2**16))
    assert set(everything) == set(db.dump(0))
    assert db.dump(0, buckets=[]) == {}
    assert set(db.dump(0, buckets=range(2**16), prefix="prefix:", originator_ids={"n2"})) == {
        "prefix:n2"
    }


@pytest.mark.parametrize("bad", [-1, 2**16, "3", None])
def test_out_of_range_bucket_is_a_clear_error(db: KvStoreDb, bad: object) -> None:
    with pytest.raises(ValueError, match="bucket"):
        db.dump(0, buckets=[bad])  # type: ignore[list-item]


def test_keys_listing(db: KvStoreDb) -> None:
    assert list(db.keys("prefix:")) == ["prefix:n1", "prefix:n2"]
    assert len(list(db.keys())) == len(db)


def test_bucket_index_follows_expiry() -> None:
    store = KvStoreDb("me")
    store.merge({"k": v(ttl=10)}, 0)
    bucket = store.bucket_of("k")
    assert list(store.dump(0, buckets=[bucket])) == ["k"]
    store.expire(10)
    assert store.dump(0, buckets=[bucket]) == {}
    assert store.root_digest() == 0


# ---------------------------------------------------------------- dump_difference


def test_difference_with_identical_store_is_empty(db: KvStoreDb) -> None:
    assert db.dump_difference(db.hash_dump(0), 0) == ({}, [])


def test_difference_keys_only_they_have_are_requested(db: KvStoreDb) -> None:
    theirs = db.hash_dump(0)
    theirs["new"] = Value(1, "z", None, TTL_INFINITY, 0, 5)
    assert db.dump_difference(theirs, 0) == ({}, ["new"])


def test_difference_keys_only_i_have_are_sent(db: KvStoreDb) -> None:
    theirs = db.hash_dump(0)
    del theirs["adj:n1"]
    send, want = db.dump_difference(theirs, 0)
    assert list(send) == ["adj:n1"] and want == []
    assert send["adj:n1"].value == b"x"


def test_difference_version_and_originator_decide_direction(db: KvStoreDb) -> None:
    theirs = db.hash_dump(0)
    theirs["adj:n1"] = Value(2, "n1", None, TTL_INFINITY, 0, 1)  # theirs newer
    theirs["adj:n2"] = Value(1, "n0", None, TTL_INFINITY, 0, 1)  # mine wins on originator
    send, want = db.dump_difference(theirs, 0)
    assert list(send) == ["adj:n2"]
    assert want == ["adj:n1"]


def test_difference_same_hash_higher_ttl_version_propagates_ttl(db: KvStoreDb) -> None:
    theirs = db.hash_dump(0)
    mine = theirs["adj:n1"]
    theirs["adj:n1"] = Value(mine.version, mine.originator_id, None, 5000, 3, mine.hash)
    theirs["adj:n2"].ttl_version = -1
    send, want = db.dump_difference(theirs, 0)
    assert want == ["adj:n1"]
    assert list(send) == ["adj:n2"]


def test_difference_unknown_order_goes_both_ways(db: KvStoreDb) -> None:
    theirs = db.hash_dump(0)
    theirs["adj:n1"].hash = 12345  # same version and originator, other value
    send, want = db.dump_difference(theirs, 0)
    assert list(send) == ["adj:n1"] and want == ["adj:n1"]


def test_difference_with_full_values_orders_by_value(db: KvStoreDb) -> None:
    theirs = db.dump(0)
    theirs["adj:n1"] = Value(1, "n1", b"y", TTL_INFINITY, 0, 999)
    theirs["adj:n2"] = Value(1, "n2", b"w", TTL_INFINITY, 0, 999)
    send, want = db.dump_difference(theirs, 0)
    assert want == ["adj:n1"] and list(send) == ["adj:n2"]


def test_difference_respects_scope_for_my_keys(db: KvStoreDb) -> None:
    send, want = db.dump_difference({}, 0, prefix="prefix:")
    assert list(send) == ["prefix:n1", "prefix:n2"] and want == []
    send, _ = db.dump_difference({}, 0, originator_ids={"n2"})
    assert set(send) == {"adj:n2", "prefix:n2"}
    bucket = db.bucket_of("ad")
    send, _ = db.dump_difference({}, 0, buckets=[bucket])
    assert "ad" in send and all(db.bucket_of(k) == bucket for k in send)


def test_difference_compares_listed_keys_whatever_the_filter(db: KvStoreDb) -> None:
    theirs = {"adj:n1": Value(1, "n1", None, TTL_INFINITY, 0, db.get(["adj:n1"], 0)["adj:n1"].hash)}
    # prefix excludes adj:n1 from MY side, but their entry equals mine: nothing to do for it.
    send, want = db.dump_difference(theirs, 0, prefix="prefix:")
    assert want == [] and list(send) == ["prefix:n1", "prefix:n2"]


def test_difference_drops_keys_with_no_more_than_the_decrement_left() -> None:
    store = KvStoreDb("me", ttl_decrement_ms=10, ttl_threshold_ms=0)  # the decrement alone
    store.merge({"short": v(ttl=10), "ok": v(ttl=11)}, 0)
    send, _ = store.dump_difference({}, 0)
    assert {k: x.ttl_ms for k, x in send.items()} == {"ok": 1}


@pytest.mark.parametrize(
    "entry",
    [
        "not a value",
        Value(None, "a", None),
        Value(1, None, None),
        Value(1, "a", None, TTL_INFINITY, "0"),
        Value(1, "a", None, TTL_INFINITY, 0, "h"),
        Value(1, "a", "text"),
    ],
)
def test_difference_rejects_malformed_hash_entries(db: KvStoreDb, entry: object) -> None:
    with pytest.raises(ValueError, match="full-sync hash entry"):
        db.dump_difference({"k": entry}, 0)  # type: ignore[dict-item]


def test_difference_rejects_non_string_keys(db: KvStoreDb) -> None:
    with pytest.raises(ValueError, match="must be a str"):
        db.dump_difference({1: v()}, 0)  # type: ignore[dict-item]

"""KvStoreDb.merge: every CRDT rule and every no-merge reason."""

from __future__ import annotations

import pytest

from kvstore import wire
from kvstore.db import KvStoreDb, compare_values
from kvstore.gen.kvstore_thrift.ttypes import Command, KeySetParams, Publication, Request
from kvstore.hashing import value_hash
from kvstore.value import (
    I64_MAX,
    TTL_INFINITY,
    NoMergeReason,
    Value,
    WireKeyVals,
    invalid_reason,
)

R = NoMergeReason


def v(
    version: int = 1,
    orig: str = "a",
    value: bytes | None = b"x",
    ttl: int = TTL_INFINITY,
    ttl_version: int = 0,
) -> Value:
    return Value(version, orig, value, ttl, ttl_version)


def stored(db: KvStoreDb, key: str, now: int = 0) -> Value:
    return db.get([key], now)[key]


@pytest.fixture
def db() -> KvStoreDb:
    return KvStoreDb("me")


def test_new_key_is_stored_and_in_delta_with_hash(db: KvStoreDb) -> None:
    incoming = v(3, "a", b"hello")
    result = db.merge({"k": incoming}, 0)
    assert result.no_merge == {}
    expected = Value(3, "a", b"hello", TTL_INFINITY, 0, value_hash(3, "a", b"hello"))
    assert result.delta == {"k": expected}
    assert stored(db, "k") == expected
    assert "k" in db and len(db) == 1


def test_merge_neither_changes_nor_keeps_the_callers_objects(db: KvStoreDb) -> None:
    """The Python entry point works on copies: the caller's objects stay as they were (no hash
    filled in, no TTL rewritten), and nothing it hands out is the stored record."""
    infinite, finite = v(1, "a", b"x"), v(1, "a", b"y", ttl=5_000)
    before = [Value(1, "a", b"x"), Value(1, "a", b"y", 5_000)]
    result = db.merge({"i": infinite, "f": finite}, 0)
    assert [infinite, finite] == before
    assert result.delta["i"] is not infinite and result.delta["f"] is not finite
    result.delta["i"].value = b"changed by the caller"
    assert stored(db, "i").value == b"x"
    assert db.dump(0)["i"].value == b"x"


def test_merge_decoded_takes_the_decoded_objects_over(db: KvStoreDb) -> None:
    incoming = decoded({"k": v(3, "a", b"hello")})
    result = db.merge_decoded(incoming, 0)
    assert result.delta["k"] is incoming["k"]  # no copy on the hot path: flooded on as it is
    assert incoming["k"].hash == value_hash(3, "a", b"hello")
    assert db.stored_as_merged(incoming)


@pytest.mark.parametrize("entry", ["merge", "merge_decoded"])
def test_a_received_hash_is_never_trusted(db: KvStoreDb, entry: str) -> None:
    forged = {"k": Value(1, "a", b"x", TTL_INFINITY, 0, 42)}
    if entry == "merge":
        db.merge(forged, 0)
    else:
        db.merge_decoded(decoded(forged), 0)
    assert stored(db, "k").hash == value_hash(1, "a", b"x")


@pytest.mark.parametrize("ttl", [0, -1, -5000, TTL_INFINITY + 1, I64_MAX + 1])
def test_invalid_ttl_is_rejected(db: KvStoreDb, ttl: int) -> None:
    result = db.merge({"k": v(ttl=ttl)}, 0)
    assert result.no_merge == {"k": R.INVALID_TTL}
    assert result.delta == {} and "k" not in db


@pytest.mark.parametrize("version", [0, -1, I64_MAX + 1])
def test_invalid_version_is_rejected(db: KvStoreDb, version: int) -> None:
    result = db.merge({"k": v(version=version)}, 0)
    assert result.no_merge == {"k": R.INVALID_VERSION}
    assert "k" not in db


def test_invalid_ttl_is_checked_before_version(db: KvStoreDb) -> None:
    assert db.merge({"k": v(version=0, ttl=0)}, 0).no_merge == {"k": R.INVALID_TTL}


@pytest.mark.parametrize(
    ("record", "reason"),
    [
        (Value(1, None, b"x"), R.INVALID_ORIGINATOR),
        (Value(1, b"a", b"x"), R.INVALID_ORIGINATOR),
        (Value(1, "\ud800", b"x"), R.INVALID_ORIGINATOR),  # not encodable as UTF-8
        (Value(1, "\ud800", b"x", TTL_INFINITY, 0, 5), R.INVALID_ORIGINATOR),  # even with a hash
        (Value(1, "a", "text"), R.INVALID_VALUE),
        (Value(1, "a", bytearray(b"x")), R.INVALID_VALUE),
        (Value(1.0, "a", b"x"), R.INVALID_VERSION),
        (Value(True, "a", b"x"), R.INVALID_VERSION),
        (Value(1, "a", b"x", "100"), R.INVALID_TTL),
        (Value(1, "a", b"x", TTL_INFINITY, None), R.INVALID_TTL_VERSION),
        (Value(1, "a", b"x", TTL_INFINITY, 0, "h"), R.INVALID_HASH),
        (Value(1, "a", b"x", TTL_INFINITY, 0, 1 << 63), R.INVALID_HASH),
        ({"version": 1}, R.MALFORMED),
    ],
)
def test_malformed_records_get_a_reason_and_a_counter(
    db: KvStoreDb, record: object, reason: str
) -> None:
    result = db.merge({"k": record, "ok": v()}, 0)  # type: ignore[dict-item]
    assert result.no_merge == {"k": reason}
    assert list(result.delta) == ["ok"]  # the rest of the batch is applied
    assert db.counters[f"kvstore.no_merge.{reason}"] == 1
    assert "k" not in db


def test_non_string_or_unencodable_key_is_malformed(db: KvStoreDb) -> None:
    result = db.merge({7: v(), "\udc80": v()}, 0)  # type: ignore[dict-item]
    assert result.no_merge == {"7": R.MALFORMED, "\udc80": R.MALFORMED}
    assert len(db) == 0


def decoded(key_vals: dict[str, Value]) -> WireKeyVals:
    """`key_vals` as the node gets them: encoded and decoded by the wire codec."""
    publication = wire.decode_publication(wire.encode(Publication(key_vals=key_vals)))
    return wire.decoded_key_vals(publication)


def test_wire_decoded_input_still_gets_the_semantic_checks(db: KvStoreDb) -> None:
    incoming = decoded(
        {
            "zero-version": Value(0, "o", b"v"),
            "bad-ttl": Value(1, "o", b"v", -5),
            "no-originator": Value(1, None, b"v"),
            "ok": Value(1, "o", b"v", 5_000, 3, 77),
            "ttl-only-unknown": Value(1, "o", None, 5_000, 1),
        }
    )
    result = db.merge_decoded(incoming, 0)
    assert result.no_merge == {
        "zero-version": R.INVALID_VERSION,
        "bad-ttl": R.INVALID_TTL,
        "no-originator": R.INVALID_ORIGINATOR,
        "ttl-only-unknown": R.UNKNOWN_KEY_TTL_UPDATE,
    }
    assert list(result.delta) == ["ok"]
    assert stored(db, "ok") == Value(1, "o", b"v", 5_000, 3, value_hash(1, "o", b"v"))


def test_wire_decoded_merge_equals_checked_merge() -> None:
    batches = [
        {"a": v(1, "x", b"1"), "b": v(2, "y", b"2", ttl=900), "c": v(1, "x", None)},
        {"a": v(1, "y", b"0"), "b": v(2, "y", None, ttl=5_000, ttl_version=1), "d": v(3)},
        {"a": v(1, "y", b"0"), "d": v(2), "e": v(1, "z", b"", ttl=10)},
    ]
    checked, trusted = KvStoreDb("c"), KvStoreDb("t")
    for now, batch in enumerate(batches):
        r1 = checked.merge(decoded(batch), now)
        r2 = trusted.merge_decoded(decoded(batch), now)
        assert r1.no_merge == r2.no_merge
        assert r1.delta == r2.delta
    assert checked.dump(3) == trusted.dump(3)
    assert checked.root_digest() == trusted.root_digest()


def test_invalid_reason_matches_merge_for_valid_records() -> None:
    assert invalid_reason(v()) is None
    assert invalid_reason(v(ttl=0)) == R.INVALID_TTL
    assert invalid_reason("nope") == R.MALFORMED


def test_lower_version_loses(db: KvStoreDb) -> None:
    db.merge({"k": v(5, "a", b"x")}, 0)
    result = db.merge({"k": v(4, "z", b"zzz", ttl_version=9)}, 0)
    assert result.no_merge == {"k": R.OLD_VERSION}
    assert stored(db, "k").version == 5


def test_higher_version_wins_even_with_lower_originator_and_value(db: KvStoreDb) -> None:
    db.merge({"k": v(5, "z", b"zzz", ttl_version=9)}, 0)
    result = db.merge({"k": v(6, "a", b"a")}, 0)
    assert result.delta == {"k": Value(6, "a", b"a", TTL_INFINITY, 0, value_hash(6, "a", b"a"))}
    s = stored(db, "k")
    assert (s.version, s.originator_id, s.value, s.ttl_version) == (6, "a", b"a", 0)


def test_equal_version_higher_originator_wins(db: KvStoreDb) -> None:
    db.merge({"k": v(5, "b", b"x")}, 0)
    assert db.merge({"k": v(5, "a", b"zzz")}, 0).no_merge == {"k": R.LOWER_ORIGINATOR}
    assert db.merge({"k": v(5, "c", b"a")}, 0).delta.keys() == {"k"}
    assert stored(db, "k").originator_id == "c"


def test_originator_compare_is_byte_order(db: KvStoreDb) -> None:
    # "é" (U+00E9, UTF-8 c3 a9) sorts after "z" (7a) both as code points and as bytes.
    db.merge({"k": v(1, "z")}, 0)
    assert db.merge({"k": v(1, "é")}, 0).delta.keys() == {"k"}
    assert db.merge({"k": v(1, "Z")}, 0).no_merge == {"k": R.LOWER_ORIGINATOR}


def test_same_originator_greater_value_wins(db: KvStoreDb) -> None:
    db.merge({"k": v(5, "a", b"m")}, 0)
    assert db.merge({"k": v(5, "a", b"l", ttl_version=3)}, 0).no_merge == {"k": R.LOWER_VALUE}
    result = db.merge({"k": v(5, "a", b"n")}, 0)
    assert result.delta.keys() == {"k"}
    assert stored(db, "k").value == b"n"
    assert stored(db, "k").hash == value_hash(5, "a", b"n")


def test_empty_value_is_a_value_not_a_ttl_update(db: KvStoreDb) -> None:
    result = db.merge({"k": v(1, "a", b"")}, 0)
    assert result.delta.keys() == {"k"}
    assert stored(db, "k").value == b""
    assert db.merge({"k": v(1, "a", b"\x00")}, 0).delta.keys() == {"k"}


def test_equal_value_higher_ttl_version_updates_ttl_only(db: KvStoreDb) -> None:
    db.merge({"k": Value(5, "a", b"x", 1000, 1, 77)}, 0)
    result = db.merge({"k": Value(5, "a", b"x", 9000, 2)}, 100)
    h = value_hash(5, "a", b"x")  # the forged 77 was never kept
    assert result.delta == {"k": Value(5, "a", b"x", 9000, 2, h)}  # hash from the store
    s = stored(db, "k", 100)
    assert (s.ttl_ms, s.ttl_version, s.hash) == (9000, 2, h)


def test_equal_value_same_or_lower_ttl_version_changes_nothing(db: KvStoreDb) -> None:
    db.merge({"k": v(5, "a", b"x", ttl=1000, ttl_version=3)}, 0)
    assert db.merge({"k": v(5, "a", b"x", ttl=9000, ttl_version=3)}, 0).no_merge == {
        "k": R.NO_CHANGE
    }
    assert db.merge({"k": v(5, "a", b"x", ttl=9000, ttl_version=2)}, 0).no_merge == {
        "k": R.OLD_TTL_VERSION
    }
    assert stored(db, "k").ttl_ms == 1000


def test_exact_echo_is_no_change_and_not_in_delta(db: KvStoreDb) -> None:
    db.merge({"k": v(5, "a", b"x")}, 0)
    result = db.merge({"k": v(5, "a", b"x")}, 0)
    assert result.delta == {}
    assert result.no_merge == {"k": R.NO_CHANGE}


def test_ttl_only_update_applies_with_same_version_originator_and_higher_ttl_version(
    db: KvStoreDb,
) -> None:
    db.merge({"k": v(5, "a", b"x", ttl=1000, ttl_version=1)}, 0)
    update = v(5, "a", None, ttl=5000, ttl_version=2)
    result = db.merge({"k": update}, 500)
    assert result.delta == {"k": Value(5, "a", None, 5000, 2, value_hash(5, "a", b"x"))}
    assert result.delta["k"].value is None
    s = stored(db, "k", 500)
    assert (s.value, s.ttl_ms, s.ttl_version) == (b"x", 5000, 2)


def test_ttl_only_update_to_infinite(db: KvStoreDb) -> None:
    db.merge({"k": v(5, "a", b"x", ttl=1000)}, 0)
    db.merge({"k": v(5, "a", None, ttl=TTL_INFINITY, ttl_version=1)}, 0)
    assert stored(db, "k").ttl_ms == TTL_INFINITY
    assert db.expire(10**9) == []
    assert "k" in db


def test_ttl_only_update_for_unknown_key(db: KvStoreDb) -> None:
    result = db.merge({"k": v(5, "a", None, ttl_version=2)}, 0)
    assert result.no_merge == {"k": R.UNKNOWN_KEY_TTL_UPDATE}
    assert "k" not in db


@pytest.mark.parametrize(
    ("update", "reason"),
    [
        (v(6, "a", None, ttl_version=9), R.TTL_UPDATE_MISMATCH),
        (v(5, "b", None, ttl_version=9), R.TTL_UPDATE_MISMATCH),
        (v(4, "a", None, ttl_version=9), R.OLD_VERSION),
        (v(5, "a", None, ttl_version=1), R.NO_CHANGE),
        (v(5, "a", None, ttl_version=0), R.OLD_TTL_VERSION),
    ],
)
def test_ttl_only_update_refusals(db: KvStoreDb, update: Value, reason: str) -> None:
    db.merge({"k": v(5, "a", b"x", ttl=1000, ttl_version=1)}, 0)
    assert db.merge({"k": update}, 0).no_merge == {"k": reason}
    s = stored(db, "k")
    assert (s.version, s.originator_id, s.ttl_ms, s.ttl_version) == (5, "a", 1000, 1)


def test_merge_never_mutates_what_get_returned(db: KvStoreDb) -> None:
    db.merge({"k": v(1, "a", b"x", ttl=1000)}, 0)
    before = stored(db, "k")
    db.merge({"k": v(1, "a", None, ttl=5000, ttl_version=1)}, 0)
    assert before.ttl_ms == 1000 and before.ttl_version == 0


def test_ttl_update_does_not_mutate_an_earlier_delta_value(db: KvStoreDb) -> None:
    first = v(1, "a", b"x")  # infinite TTL: stored as is
    db.merge({"k": first}, 0)
    db.merge({"k": v(1, "a", None, ttl=5000, ttl_version=1)}, 0)
    assert (first.ttl_ms, first.ttl_version) == (TTL_INFINITY, 0)


def test_counters_count_received_updated_and_reasons(db: KvStoreDb) -> None:
    db.merge({"a": v(), "b": v(), "c": v(ttl=0)}, 0)
    db.merge({"a": v()}, 0)
    assert db.counters["kvstore.merge.received"] == 4
    assert db.counters["kvstore.merge.updated"] == 2
    assert db.counters["kvstore.no_merge.INVALID_TTL"] == 1
    assert db.counters["kvstore.no_merge.NO_CHANGE"] == 1


def test_constructor_rejects_bad_settings() -> None:
    with pytest.raises(ValueError, match="ttl_decrement_ms"):
        KvStoreDb("x", ttl_decrement_ms=-1)
    with pytest.raises(ValueError, match="ttl_threshold_ms"):
        KvStoreDb("x", ttl_threshold_ms="500")  # type: ignore[arg-type]


@pytest.mark.parametrize("now", [1.5, "0", None])
def test_non_integer_clock_is_refused_everywhere(db: KvStoreDb, now: object) -> None:
    calls = [
        lambda: db.merge({"k": v()}, now),  # type: ignore[arg-type]
        lambda: db.expire(now),  # type: ignore[arg-type]
        lambda: db.get(["k"], now),  # type: ignore[arg-type]
        lambda: db.dump(now),  # type: ignore[arg-type]
        lambda: db.hash_dump(now),  # type: ignore[arg-type]
        lambda: db.dump_difference({}, now),  # type: ignore[arg-type]
        lambda: db.prepare_flood({}, now),  # type: ignore[arg-type]
    ]
    for call in calls:
        with pytest.raises(TypeError, match="now_ms"):
            call()
    assert len(db) == 0


def test_compare_values_order() -> None:
    base = Value(5, "b", b"m", TTL_INFINITY, 1, 10)
    assert compare_values(base, Value(4, "z", b"z", TTL_INFINITY, 9, 11)) == 1
    assert compare_values(base, Value(6, "a", b"a", TTL_INFINITY, 0, 11)) == -1
    assert compare_values(base, Value(5, "a", None, TTL_INFINITY, 0, 11)) == 1
    assert compare_values(base, Value(5, "c", None, TTL_INFINITY, 0, 11)) == -1
    assert compare_values(base, Value(5, "b", None, 7, 1, 10)) == 0  # same hash and ttl_version
    assert compare_values(base, Value(5, "b", None, 7, 2, 10)) == -1
    assert compare_values(base, Value(5, "b", None, 7, 0, 10)) == 1
    assert compare_values(base, Value(5, "b", None, 7, 1, 99)) == 2  # hashes differ: unknown
    assert compare_values(base, Value(5, "b", b"n", 7, 1, 99)) == -1  # values decide
    assert compare_values(base, Value(5, "b", b"l", 7, 1, 99)) == 1


def _wire_key_set(raw_key: bytes, raw_originator: bytes) -> WireKeyVals:
    """A KEY_SET's key_vals as the C decoder makes them from raw (possibly invalid) UTF-8."""
    request = Request(
        cmd=Command.KEY_SET,
        key_set=KeySetParams(key_vals={"K" * len(raw_key): v(orig="O" * len(raw_originator))}),
    )
    data = wire.encode(request)
    data = data.replace(b"K" * len(raw_key), raw_key)
    data = data.replace(b"O" * len(raw_originator), raw_originator)
    key_set = wire.decode_request(data).key_set
    assert key_set is not None and key_set.key_vals is not None
    return wire.decoded_key_vals(key_set)


@pytest.mark.parametrize(
    ("raw_key", "raw_originator", "reason"),
    [
        (b"k\xff", b"me", R.MALFORMED),
        (b"k\xfe", b"me", R.MALFORMED),
        (b"key", b"\xff\xfeme", R.INVALID_ORIGINATOR),
    ],
)
def test_invalid_utf8_from_the_wire_is_refused(
    db: KvStoreDb, raw_key: bytes, raw_originator: bytes, reason: str
) -> None:
    key_vals = _wire_key_set(raw_key, raw_originator)
    result = db.merge_decoded(key_vals, 0)
    assert list(result.no_merge.values()) == [reason]
    assert result.delta == {} and len(db) == 0


def test_replacement_character_is_refused_from_python_too(db: KvStoreDb) -> None:
    result = db.merge({"k\ufffd": v(), "k": v(orig="o\ufffd"), "ok": v()}, 0)
    assert result.no_merge == {"k\ufffd": R.MALFORMED, "k": R.INVALID_ORIGINATOR}
    assert list(db.keys()) == ["ok"]


def test_refused_originator_stays_refused_after_interning_others(db: KvStoreDb) -> None:
    db.merge({"a": v(orig="o")}, 0)
    result = db.merge_decoded(WireKeyVals({"b": v(orig="o\ufffd")}), 0)
    assert result.no_merge == {"b": R.INVALID_ORIGINATOR}


def test_a_forged_hash_on_a_ttl_refresh_is_replaced() -> None:
    db = KvStoreDb("me")
    db.merge({"k": v(value=b"x")}, 0)
    forged = Value(1, "a", b"x", TTL_INFINITY, 1, 42)
    result = db.merge({"k": forged}, 0)
    assert result.delta["k"].hash == value_hash(1, "a", b"x")

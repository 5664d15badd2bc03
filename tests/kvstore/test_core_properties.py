"""Hypothesis properties of the KvStoreDb CRDT: order-insensitivity, join laws, digests, model."""

from __future__ import annotations

from collections.abc import Iterable

from hypothesis import given, settings
from hypothesis import strategies as st

from kvstore.db import KvStoreDb
from kvstore.hashing import contribution, to_signed64, value_hash
from kvstore.value import TTL_INFINITY, Value

NOW = 1_000
KEYS = st.sampled_from(["a", "b", "c", "d/1", "d/2"])
ORIGINATORS = st.sampled_from(["n1", "n2", "n3"])
PAYLOADS = st.sampled_from([b"", b"x", b"y", b"xy"])

Update = tuple[str, int, str, bytes, int]  # key, version, originator, value, ttl_version


def ttl_of(version: int, orig: str, payload: bytes, ttl_version: int) -> int:
    """One origination (version, originator, value, ttl_version) always carries the same TTL,
    as in a real mesh; TTL alone is not ordered by the CRDT rules."""
    choice = (version + len(orig) + len(payload) + ttl_version) % 3
    return TTL_INFINITY if choice == 0 else 10_000 * choice


def value_of(u: Update) -> Value:
    _, version, orig, payload, ttl_version = u
    return Value(version, orig, payload, ttl_of(version, orig, payload, ttl_version), ttl_version)


UPDATES = st.lists(
    st.tuples(KEYS, st.integers(1, 3), ORIGINATORS, PAYLOADS, st.integers(0, 2)),
    max_size=25,
)


def apply_one_by_one(updates: Iterable[Update], name: str = "s") -> KvStoreDb:
    db = KvStoreDb(name)
    for u in updates:
        db.merge({u[0]: value_of(u)}, NOW)
    return db


def state(db: KvStoreDb) -> dict[str, tuple[object, ...]]:
    return {
        k: (x.version, x.originator_id, x.value, x.ttl_ms, x.ttl_version, x.hash)
        for k, x in db.dump(NOW).items()
    }


def join(into: KvStoreDb, other: KvStoreDb) -> KvStoreDb:
    into.merge(other.dump(NOW), NOW)
    return into


@settings(max_examples=150, deadline=None)
@given(UPDATES, st.randoms(use_true_random=False))
def test_any_delivery_order_gives_the_same_store(updates: list[Update], rnd: object) -> None:
    shuffled = list(updates)
    rnd.shuffle(shuffled)  # type: ignore[attr-defined]
    a = apply_one_by_one(updates)
    b = apply_one_by_one(shuffled)
    assert state(a) == state(b)
    assert a.root_digest() == b.root_digest()


@settings(max_examples=100, deadline=None)
@given(UPDATES)
def test_merge_is_idempotent(updates: list[Update]) -> None:
    a = apply_one_by_one(updates)
    before = state(a)
    for u in updates:
        assert a.merge({u[0]: value_of(u)}, NOW).delta == {}
    assert state(a) == before
    assert join(a, apply_one_by_one(updates)) is a and state(a) == before


@settings(max_examples=100, deadline=None)
@given(UPDATES, UPDATES)
def test_merge_is_commutative(x: list[Update], y: list[Update]) -> None:
    xy = join(apply_one_by_one(x), apply_one_by_one(y))
    yx = join(apply_one_by_one(y), apply_one_by_one(x))
    assert state(xy) == state(yx)


@settings(max_examples=100, deadline=None)
@given(UPDATES, UPDATES, UPDATES)
def test_merge_is_associative(x: list[Update], y: list[Update], z: list[Update]) -> None:
    left = join(join(apply_one_by_one(x), apply_one_by_one(y)), apply_one_by_one(z))
    right = join(apply_one_by_one(x), join(apply_one_by_one(y), apply_one_by_one(z)))
    assert state(left) == state(right)


@settings(max_examples=100, deadline=None)
@given(UPDATES, UPDATES)
def test_batch_merge_equals_one_by_one(x: list[Update], y: list[Update]) -> None:
    one_by_one = apply_one_by_one(x + y)
    batched = KvStoreDb("b")
    for part in (x, y):
        # a batch holds one value per key: merge the batch-local winner, as a peer's dump would
        local = apply_one_by_one(part)
        batched.merge(local.dump(NOW), NOW)
    assert state(batched) == state(one_by_one)


@settings(max_examples=150, deadline=None)
@given(UPDATES, UPDATES)
def test_digests_equal_iff_dumps_equal(x: list[Update], y: list[Update]) -> None:
    a = apply_one_by_one(x)
    b = apply_one_by_one(y if len(y) % 3 else x[::-1])  # often equal, often not
    assert (a.root_digest() == b.root_digest()) == (state(a) == state(b))
    assert (a.signature(0) == b.signature(0)) == (state(a) == state(b))
    assert (a.digest_children([0]) == b.digest_children([0])) == (state(a) == state(b))


@settings(max_examples=100, deadline=None)
@given(UPDATES)
def test_incremental_digest_equals_digest_of_a_fresh_copy(updates: list[Update]) -> None:
    a = apply_one_by_one(updates)
    a.expire(NOW + 10_000)  # removes some keys: digests must follow
    fresh = KvStoreDb("fresh")
    fresh.merge(a.dump(NOW + 10_000), NOW + 10_000)
    assert a.root_digest() == fresh.root_digest()
    assert a.digest_children(range(17)) == fresh.digest_children(range(17))
    for key, value in a.dump(NOW + 10_000).items():
        assert value.hash == value_hash(value.version, value.originator_id, value.value)
        assert key in fresh


def xor_of_contributions(db: KvStoreDb, now: int) -> int:
    """The root digest computed from scratch (signed, as root_digest returns it)."""
    acc = 0
    for key, x in db.dump(now).items():
        assert x.hash is not None
        acc ^= contribution(key.encode(), x.hash, x.ttl_version)
    return to_signed64(acc)


@settings(max_examples=100, deadline=None)
@given(UPDATES, st.lists(st.booleans(), max_size=25))
def test_digest_read_between_updates_equals_digest_from_scratch(
    updates: list[Update], reads: list[bool]
) -> None:
    # Digest upkeep is lazy (stale leaves recomputed on read): reads interleaved with merges and
    # expiries must see exactly the XOR of the current contributions.
    a = KvStoreDb("a")
    for i, u in enumerate(updates):
        a.merge({u[0]: value_of(u)}, NOW)
        if i < len(reads) and reads[i]:
            assert a.root_digest() == xor_of_contributions(a, NOW)
    assert a.root_digest() == xor_of_contributions(a, NOW)
    a.expire(NOW + 10_000)
    fresh = KvStoreDb("fresh")
    fresh.merge(a.dump(NOW + 10_000), NOW + 10_000)
    assert a.digest_children(range(17)) == fresh.digest_children(range(17))
    assert a.root_digest() == xor_of_contributions(a, NOW + 10_000)


# ---------------------------------------------------------------- model-based test

Op = tuple[str, object]


class Model:
    """Straightforward reference implementation of the merge rules (no indexes, no heap)."""

    def __init__(self) -> None:
        # key -> (version, originator, value, absolute expiry or None, ttl_version)
        self.kv: dict[str, tuple[int, str, bytes, int | None, int]] = {}

    def live(self, now: int) -> dict[str, tuple[int, str, bytes, int | None, int]]:
        return {k: r for k, r in self.kv.items() if r[3] is None or r[3] > now}

    def merge(self, key: str, new: Value, now: int) -> None:
        self.kv = self.live(now)
        expiry = None if new.ttl_ms == TTL_INFINITY else now + new.ttl_ms
        cur = self.kv.get(key)
        if new.value is None:
            same_origination = cur is not None and cur[:2] == (new.version, new.originator_id)
            if cur is not None and same_origination and new.ttl_version > cur[4]:
                self.kv[key] = (cur[0], cur[1], cur[2], expiry, new.ttl_version)
            return
        # (version, originator, value) decide; on a tie a higher ttl_version refreshes the TTL.
        rank = (new.version, new.originator_id, new.value, new.ttl_version)
        if cur is None or rank > (cur[0], cur[1], cur[2], cur[4]):
            self.kv[key] = (new.version, new.originator_id, new.value, expiry, new.ttl_version)


OPS = st.lists(
    st.one_of(
        st.tuples(
            st.just("merge"),
            st.tuples(
                KEYS,
                st.integers(1, 3),
                ORIGINATORS,
                st.one_of(st.none(), PAYLOADS),
                st.sampled_from([TTL_INFINITY, 1, 50, 400, 5000]),
                st.integers(0, 3),
            ),
        ),
        st.tuples(st.just("tick"), st.integers(0, 600)),
        st.tuples(st.just("expire"), st.none()),
    ),
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(OPS)
def test_store_matches_reference_model(ops: list[Op]) -> None:
    db = KvStoreDb("s")
    model = Model()
    now = 0
    for kind, arg in ops:
        if kind == "tick":
            now += arg  # type: ignore[operator]
        elif kind == "expire":
            db.expire(now)  # must never remove a live key: checked against the model below
            due = db.next_expiry_ms()
            assert due is None or due > now
            if due is None:
                assert all(r[3] is None for r in model.live(now).values())
        else:
            assert isinstance(arg, tuple)
            key = arg[0]
            value = Value(*arg[1:])
            db.merge({key: value}, now)
            model.merge(key, value, now)
        got = {
            k: (
                x.version,
                x.originator_id,
                x.value,
                None if x.ttl_ms == TTL_INFINITY else now + x.ttl_ms,
                x.ttl_version,
            )
            for k, x in db.dump(now).items()
        }
        assert got == model.live(now)
        everything = db.get(list(db.keys()), -(10**15))  # stored, even if already expired
        finite = sum(1 for x in everything.values() if x.ttl_ms != TTL_INFINITY)
        assert db.gauges()["kvstore.num_finite_ttl_keys"] == finite
        assert len(everything) == len(db)
    later = now + 10**6
    db.expire(later)
    assert set(db.dump(later)) == set(model.live(later))
    assert len(db) == len(model.live(later))  # nothing expired is left behind in the indexes
    assert db.dump(later, buckets=range(2**16)).keys() == db.dump(later).keys()


_RECORDS = st.builds(
    lambda version, orig, value, ttl_version: Value(version, orig, value, TTL_INFINITY,
                                                    ttl_version),
    st.integers(1, 3), st.sampled_from(["a", "b", "é", "z"]),
    st.sampled_from([b"", b"x", b"xy", b"y"]), st.integers(0, 2))


def _reference_key(v: Value) -> tuple[int, bytes, bytes, int]:
    """The merge order written down independently: version, originator as UTF-8 bytes, value
    bytes, ttl_version — lexicographically."""
    assert v.value is not None
    return (v.version, v.originator_id.encode(), v.value, v.ttl_version)


@settings(max_examples=400, deadline=None)
@given(_RECORDS, _RECORDS)
def test_merge_and_compare_values_follow_the_reference_order(cur: Value, new: Value) -> None:
    """One rule: merge applies a record exactly when the reference order says it is better,
    compare_values says the same, and the refusal reason names the field that decided."""
    from kvstore.db import compare_values

    ref_cur, ref_new = _reference_key(cur), _reference_key(new)
    expected = (ref_cur > ref_new) - (ref_cur < ref_new)
    assert compare_values(cur, new) == expected
    assert compare_values(new, cur) == -expected
    db = KvStoreDb("me")
    db.merge({"k": Value(cur.version, cur.originator_id, cur.value, TTL_INFINITY,
                         cur.ttl_version)}, 0)
    result = db.merge({"k": Value(new.version, new.originator_id, new.value, TTL_INFINITY,
                                  new.ttl_version)}, 1)
    assert ("k" in result.delta) == (expected < 0)
    stored = db.get(["k"], 1)["k"]
    assert _reference_key(stored) == max(ref_cur, ref_new)
    if expected >= 0:
        decided = next(i for i, (a, b) in enumerate(zip(ref_cur, ref_new, strict=True))
                       if a != b) if expected else None
        reasons = ["OLD_VERSION", "LOWER_ORIGINATOR", "LOWER_VALUE", "OLD_TTL_VERSION"]
        assert result.no_merge["k"] == ("NO_CHANGE" if decided is None else reasons[decided])

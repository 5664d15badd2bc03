"""Anti-entropy digest tree and the DigestWalk protocol."""

from __future__ import annotations

import pytest

from kvstore.db import KvStoreDb
from kvstore.digest import FIRST_LEAF, NUM_BUCKETS, NUM_NODES, DigestWalk, children_of
from kvstore.hashing import contribution, key_hash
from kvstore.value import TTL_INFINITY, Value


def v(version: int = 1, orig: str = "a", value: bytes | None = b"x", ttl_version: int = 0) -> Value:
    return Value(version, orig, value, TTL_INFINITY, ttl_version)


def build(n: int, name: str = "s") -> KvStoreDb:
    db = KvStoreDb(name)
    db.merge({f"key/{i:05d}": v(1, "a", str(i).encode()) for i in range(n)}, 0)
    return db


def walk(local: KvStoreDb, remote: KvStoreDb) -> tuple[list[int], int]:
    w = DigestWalk(local)
    requests = 0
    while (ids := w.next_request()) is not None:
        requests += 1
        w.on_reply(remote.digest_children(ids))
    assert w.done
    return w.differing_buckets(), requests


def test_geometry_constants() -> None:
    assert NUM_BUCKETS == 16**4
    assert FIRST_LEAF == 1 + 16 + 256 + 4096
    assert NUM_NODES == FIRST_LEAF + NUM_BUCKETS
    assert list(children_of(0)) == list(range(1, 17))
    assert list(children_of(1)) == list(range(17, 33))
    with pytest.raises(ValueError, match="inner node"):
        children_of(FIRST_LEAF)


def test_bucket_of_is_the_top_bits_of_the_key_hash() -> None:
    db = KvStoreDb("s")
    for key in ("a", "config/n1/linux/interface/veth0", "ключ"):
        assert db.bucket_of(key) == key_hash(key) >> 48
        assert 0 <= db.bucket_of(key) < NUM_BUCKETS


def test_empty_store_digest_is_zero_and_children_are_zero() -> None:
    db = KvStoreDb("s")
    assert db.root_digest() == 0
    assert db.digest_children([0]) == {i: 0 for i in range(1, 17)}


def test_root_digest_is_xor_of_contributions() -> None:
    db = build(50)
    acc = 0
    for key, value in db.dump(0).items():
        assert value.hash is not None
        acc ^= contribution(key.encode(), value.hash, value.ttl_version)
    assert db.root_digest() & (2**64 - 1) == acc
    assert db.signature(0, "key/") == db.signature(0)  # same keys under the prefix


def test_digest_children_are_consistent_at_every_level() -> None:
    db = build(300)
    level1 = db.digest_children([0])
    acc = 0
    for digest in level1.values():
        acc ^= digest
    assert acc == db.root_digest()
    for node_id, digest in list(level1.items())[:3]:
        sub = 0
        for child_digest in db.digest_children([node_id]).values():
            sub ^= child_digest
        assert sub == digest


def test_digest_children_rejects_leaves_and_garbage() -> None:
    db = KvStoreDb("s")
    for bad in (FIRST_LEAF, NUM_NODES, -1, "0"):
        with pytest.raises(ValueError):
            db.digest_children([bad])  # type: ignore[list-item]


def test_digest_children_bounds_the_request_size() -> None:
    db = KvStoreDb("s")
    assert len(db.digest_children(list(range(FIRST_LEAF)))) == NUM_NODES - 1
    with pytest.raises(ValueError, match="too many"):
        db.digest_children([0] * (FIRST_LEAF + 1))


def test_digest_changes_with_ttl_version_and_returns_after_expiry() -> None:
    db = KvStoreDb("s")
    db.merge({"k": Value(1, "a", b"x", 1000, 0)}, 0)
    first = db.root_digest()
    db.merge({"k": Value(1, "a", None, 1000, 1)}, 0)  # TTL refresh changes the digest
    assert db.root_digest() not in (0, first)
    db.expire(10_000)
    assert db.root_digest() == 0


def test_swapped_values_between_keys_change_the_digest() -> None:
    a = KvStoreDb("a")
    b = KvStoreDb("b")
    a.merge({"k1": v(value=b"one"), "k2": v(value=b"two")}, 0)
    b.merge({"k1": v(value=b"two"), "k2": v(value=b"one")}, 0)
    assert a.root_digest() != b.root_digest()


def test_walk_of_equal_stores_takes_one_request_and_finds_nothing() -> None:
    a = build(2000, "a")
    b = build(2000, "b")
    assert walk(a, b) == ([], 1)


def test_walk_finds_exactly_the_differing_buckets() -> None:
    a = build(3000, "a")
    b = build(3000, "b")
    changed = ["key/00007", "key/01234", "key/02999"]
    b.merge({k: v(2, "b") for k in changed}, 0)  # newer in b
    a.merge({"only/in/a": v()}, 0)
    b.merge({"only/in/b": v()}, 0)
    a.merge({"key/00100": Value(1, "a", None, TTL_INFINITY, 5)}, 0)  # TTL refresh only in a
    expected = sorted({a.bucket_of(k) for k in [*changed, "only/in/a", "only/in/b", "key/00100"]})
    buckets, requests = walk(a, b)
    assert buckets == expected
    assert requests == 4  # one request per level below the root


def test_walk_then_bucket_sync_converges() -> None:
    a = build(3000, "a")
    b = build(3000, "b")
    b.merge({"key/00042": v(7, "b"), "new/b": v()}, 0)
    a.merge({"new/a": v()}, 0)
    buckets, _ = walk(a, b)
    send, want = b.dump_difference(a.hash_dump(0, buckets=buckets), 0, buckets=buckets)
    assert len(send) + len(want) == 3  # only the difference travels
    a.merge(send, 0)
    b.merge(a.get(want, 0), 0)
    assert a.root_digest() == b.root_digest()
    assert a.dump(0) == b.dump(0)
    assert walk(a, b) == ([], 1)


def test_walk_treats_missing_or_garbage_reply_entries_as_different() -> None:
    a = build(10, "a")
    w = DigestWalk(a)
    ids = w.next_request()
    assert ids == [0]
    reply = a.digest_children([0])
    del reply[1]
    reply[2] = "garbage"  # type: ignore[assignment]
    w.on_reply(reply)
    assert w.next_request() == [1, 2]


def test_walk_reply_without_request_is_an_error() -> None:
    w = DigestWalk(KvStoreDb("s"))
    with pytest.raises(RuntimeError, match="outstanding"):
        w.on_reply({})
    w.next_request()
    w.on_reply(KvStoreDb("t").digest_children([0]))
    assert w.done and w.next_request() is None and w.differing_buckets() == []

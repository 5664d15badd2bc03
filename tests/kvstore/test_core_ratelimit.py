"""Token bucket and the key buffer in front of flooding: never loses a key."""

from __future__ import annotations

import random

from kvstore.db import KvStoreDb
from kvstore.ratelimit import FloodBuffer, FloodLimiter, TokenBucket
from kvstore.value import TTL_INFINITY, Value


def v(version: int = 1, value: bytes = b"x", ttl: int = TTL_INFINITY) -> Value:
    return Value(version, "a", value, ttl, 0)


def test_token_bucket_starts_full_and_refills_at_rate() -> None:
    bucket = TokenBucket(rate_per_s=10, burst=3, now_ms=0)
    assert [bucket.consume(0) for _ in range(4)] == [True, True, True, False]
    assert bucket.ms_until_available(0) == 100
    assert not bucket.consume(99)
    assert bucket.consume(100)
    assert bucket.available(10_000) == 3  # never more than the burst


def test_token_bucket_wait_is_exact_for_awkward_rates() -> None:
    bucket = TokenBucket(rate_per_s=3, burst=1, now_ms=0)
    now = 0
    for _ in range(50):
        assert bucket.consume(now)
        wait = bucket.ms_until_available(now)
        assert wait > 0
        assert not bucket.consume(now + wait - 1) or wait == 1
        now += wait


def test_disabled_token_bucket_always_grants() -> None:
    for rate, burst in ((0, 10), (10, 0), (-1, -1)):
        bucket = TokenBucket(rate, burst, 0)
        assert not bucket.enabled
        assert all(bucket.consume(0) for _ in range(1000))
        assert bucket.ms_until_available(0) == 0


def test_flood_buffer_rereads_current_values_and_skips_gone_keys() -> None:
    db = KvStoreDb("me")
    db.merge({"a": v(1), "b": v(1, ttl=100), "c": v(1)}, 0)
    buf = FloodBuffer()
    buf.add(["a", "b"])
    buf.add(["c", "a"])
    assert len(buf) == 3 and "a" in buf
    db.merge({"a": v(2)}, 0)
    db.expire(100)
    out = buf.flush(db, 100)
    assert list(out) == ["a", "c"]
    assert out["a"].version == 2
    assert len(buf) == 0


def test_limiter_passes_deltas_through_while_tokens_last() -> None:
    db = KvStoreDb("me")
    lim = FloodLimiter(db, rate_per_s=1, burst=2, now_ms=0)
    d1 = db.merge({"a": v()}, 0).delta
    release = lim.submit(d1, 0)
    assert release is not None and release.key_vals is d1 and not release.from_buffer
    assert lim.submit({}, 0) is None


def test_limiter_buffers_then_flushes_every_key_once_with_latest_value() -> None:
    db = KvStoreDb("me")
    lim = FloodLimiter(db, rate_per_s=10, burst=1, now_ms=0)
    assert lim.submit(db.merge({"a": v(1)}, 0).delta, 0) is not None
    assert lim.submit(db.merge({"b": v(1)}, 1).delta, 1) is None
    assert lim.submit(db.merge({"b": v(2), "c": v(1)}, 2).delta, 2) is None
    assert lim.next_poll_ms(2) == 100
    assert lim.poll(99) is None
    release = lim.poll(100)
    assert release is not None and release.from_buffer
    assert {k: x.version for k, x in release.key_vals.items()} == {"b": 2, "c": 1}
    assert lim.next_poll_ms(100) is None and lim.poll(10_000) is None
    assert lim.suppressed == 2 and lim.buffered_keys == 3


def test_limiter_keeps_order_new_deltas_join_a_non_empty_buffer() -> None:
    db = KvStoreDb("me")
    lim = FloodLimiter(db, rate_per_s=1000, burst=1, now_ms=0)
    lim.submit(db.merge({"a": v()}, 0).delta, 0)
    assert lim.submit(db.merge({"b": v()}, 0).delta, 0) is None
    # a token is available again, but "b" is still buffered: "c" must not overtake it
    release = lim.submit(db.merge({"c": v()}, 5).delta, 5)
    assert release is not None and release.from_buffer
    assert list(release.key_vals) == ["b", "c"]


def test_limiter_flush_of_only_vanished_keys_releases_nothing() -> None:
    db = KvStoreDb("me")
    lim = FloodLimiter(db, rate_per_s=10, burst=1, now_ms=0)
    lim.submit(db.merge({"a": v()}, 0).delta, 0)
    lim.submit(db.merge({"gone": v(ttl=10)}, 0).delta, 0)
    db.expire(10)
    assert lim.poll(100) is None
    assert len(lim.buffer) == 0


def test_limiter_never_loses_a_key_under_random_load() -> None:
    rng = random.Random(5)
    db = KvStoreDb("me")
    lim = FloodLimiter(db, rate_per_s=50, burst=3, now_ms=0)
    flooded: dict[str, int] = {}
    latest: dict[str, int] = {}

    def take(release: object) -> None:
        if release is not None:
            for key, value in release.key_vals.items():  # type: ignore[attr-defined]
                flooded[key] = value.version

    now = 0
    for step in range(2000):
        now += rng.randrange(0, 5)
        key = f"k{rng.randrange(40)}"
        version = latest.get(key, 0) + 1
        latest[key] = version
        take(lim.submit(db.merge({key: v(version)}, now).delta, now))
        if step % 7 == 0:
            take(lim.poll(now))
    while (due := lim.next_poll_ms(now)) is not None:
        now = due
        take(lim.poll(now))
    assert flooded == latest
    assert lim.suppressed > 0

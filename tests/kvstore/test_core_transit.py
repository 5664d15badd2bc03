"""kvstore.transit: transit time charged to TTLs, clock-skew handling, and the lifetime bound."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from kvstore.transit import age_in_transit, transit_age_ms
from kvstore.value import TTL_INFINITY, Value


def _value(ttl: int) -> Value:
    return Value(version=1, originator_id="o", value=b"v", ttl_ms=ttl, ttl_version=0)


def test_age_is_taken_off_finite_ttls_and_used_up_keys_are_dropped() -> None:
    key_vals = {"long": _value(5000), "short": _value(300), "edge": _value(1000),
                "forever": _value(TTL_INFINITY)}
    aging = age_in_transit(key_vals, sent_wall_ms=10_000, now_wall_ms=11_000, max_clock_skew_ms=50)
    assert aging.age_ms == 1000
    assert sorted(aging.expired) == ["edge", "short"]
    assert key_vals["long"].ttl_ms == 4000
    assert key_vals["forever"].ttl_ms == TTL_INFINITY
    assert set(key_vals) == {"long", "forever"}
    assert aging.clock_ahead_ms == 0


def test_unstamped_message_is_not_aged() -> None:
    key_vals = {"k": _value(300)}
    aging = age_in_transit(key_vals, None, 99_999, 0)
    assert (aging.age_ms, aging.expired, key_vals["k"].ttl_ms) == (0, [], 300)


def test_future_timestamp_clamps_to_zero_and_is_flagged_beyond_the_tolerance() -> None:
    key_vals = {"k": _value(300)}
    within = age_in_transit(key_vals, 10_400, 10_000, max_clock_skew_ms=500)
    assert (within.age_ms, within.clock_ahead_ms, key_vals["k"].ttl_ms) == (0, 0, 300)
    beyond = age_in_transit(key_vals, 10_600, 10_000, max_clock_skew_ms=500)
    assert (beyond.age_ms, beyond.clock_ahead_ms, key_vals["k"].ttl_ms) == (0, 600, 300)


def test_invalid_ttls_are_left_for_the_merge_to_reject() -> None:
    key_vals = {"zero": _value(0), "neg": _value(-5)}
    aging = age_in_transit(key_vals, 0, 1000, 0)
    assert aging.expired == [] and key_vals["zero"].ttl_ms == 0 and key_vals["neg"].ttl_ms == -5


@settings(max_examples=300, deadline=None)
@given(
    ttl=st.integers(1, 100_000),
    offsets=st.lists(st.integers(-3000, 3000), min_size=2, max_size=8),
    delays=st.lists(st.integers(0, 20_000), min_size=7, max_size=7),
)
def test_a_key_never_outlives_its_ttl_by_more_than_the_clock_offset(
    ttl: int, offsets: list[int], delays: list[int]
) -> None:
    """A key flooded along a path of nodes whose wall clocks are off by `offsets` (true time
    + offset), with arbitrary delays per hop: at every node it holds it, it expires no later than
    write time + TTL + the largest offset difference between two nodes (the documented bound)."""
    true_now = 0
    remaining = ttl  # as the originator stores it at true time 0
    bound = max(offsets) - min(offsets)
    for hop, (sender, receiver) in enumerate(itertools.pairwise(offsets)):
        sent_at = true_now
        true_now += delays[hop]
        key_vals = {"k": _value(remaining)}
        age_in_transit(key_vals, sent_at + sender, true_now + receiver, max_clock_skew_ms=0)
        if "k" not in key_vals:
            return
        remaining = key_vals["k"].ttl_ms
        assert true_now + remaining <= ttl + bound
        assert transit_age_ms(sent_at + sender, true_now + receiver) >= 0


def test_an_absurd_past_stamp_uses_every_ttl_up_and_the_age_stays_an_i64() -> None:
    """A client may stamp a KEY_SET -2^63: the age must still fit the node's i64 counters
    (`kvstore.ttl.transit_age_ms_max`; a bigger one made COUNTERS_GET fail for good)."""
    key_vals = {"finite": _value(5000), "forever": _value(TTL_INFINITY)}
    aging = age_in_transit(key_vals, sent_wall_ms=-(1 << 63), now_wall_ms=1_700_000_000_000,
                           max_clock_skew_ms=50)
    assert aging.age_ms == (1 << 63) - 1
    assert aging.expired == ["finite"] and list(key_vals) == ["forever"]
    assert transit_age_ms(-(1 << 63), 1) == (1 << 63) - 1

"""Time in transit: take the age of a publication off the TTLs it carries (sans-I/O).

A flood, a full-sync reply or a finalize KEY_SET may spend a long time between the sender and the
receiver: queued in ZeroMQ and TCP buffers towards a peer that is paused, cut off or slow. The
TTLs it carries are the remaining times *at send*. Restarting that countdown on arrival would let a
key outlive its TTL by the whole delay, and flood it on to peers that had already expired it.

Every such message carries `timestamp_ms`, the sender's wall clock when it was encoded. The
receiver computes the age `now_wall - timestamp_ms`, subtracts it from every finite TTL, and drops
the key-values whose TTL is used up. The clock decisions:

- No timestamp (a client's set, an older peer): age 0, as before.
- A timestamp in the future (the sender's clock is ahead): age 0 (clamped: a negative age would
  lengthen the TTL). Further ahead than `max_clock_skew_ms` is reported (`clock_ahead`) so the
  node can count and log a clock that is off; the message is still applied with age 0.
- A timestamp in the past: the age is trusted as it is. A sender whose clock is *behind* makes its
  keys expire early here by the offset; one behind by more than a key's TTL makes the key arrive
  expired (`expired` says which; the node counts them in `kvstore.ttl.expired_in_transit`). An
  absurd stamp (down to -2^63) gives an age capped at the i64 maximum: every finite TTL is used
  up, and the age still fits the node's counters (`kvstore.ttl.transit_age_ms_max`, an i64 on
  the wire: a bigger one made COUNTERS_GET fail for good, found by fuzzing).

The bound. Along a flood path, each hop measures `clock(receiver) - clock(sender)` plus the true
delay; the clock terms telescope, so the total age a key has been charged at any node is the true
time since it left the originator plus `clock(that node) - clock(originator)`. Clamping a negative
age only charges more. So a key never lives past `TTL + max wall-clock offset between two nodes`
(the per-hop `ttl_decrement_ms` only shortens it). Wall-clock steps (a jump set by hand) count as
offset.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from dataclasses import dataclass, field

from kvstore.value import I64_MAX, TTL_INFINITY, Value

__all__ = ["TransitAging", "age_in_transit", "transit_age_ms"]


def transit_age_ms(sent_wall_ms: int | None, now_wall_ms: int) -> int:
    """How long a message stamped `sent_wall_ms` has been on its way: 0 if unstamped, else
    between 0 and the i64 maximum."""
    if sent_wall_ms is None:
        return 0
    return min(I64_MAX, max(0, now_wall_ms - sent_wall_ms))


@dataclass(slots=True)
class TransitAging:
    """What `age_in_transit` did to one message."""

    age_ms: int = 0
    expired: list[str] = field(default_factory=list)  # keys dropped: TTL used up in transit
    clock_ahead_ms: int = 0  # > 0: the sender's stamp was further ahead than the tolerance


def age_in_transit(
    key_vals: MutableMapping[str, Value],
    sent_wall_ms: int | None,
    now_wall_ms: int,
    max_clock_skew_ms: int,
) -> TransitAging:
    """Charge the transit time to the finite TTLs of `key_vals`, in place (see the module doc).

    Key-values whose TTL is used up are removed from `key_vals` and listed in `expired`. Values
    with TTL_INFINITY, or with a TTL the merge would reject anyway (<= 0), are left alone.
    `key_vals` must be the receiver's own decoded objects (the node's wire decode makes fresh
    ones): their `ttl_ms` is rewritten.
    """
    result = TransitAging()
    if sent_wall_ms is not None and sent_wall_ms - now_wall_ms > max_clock_skew_ms:
        result.clock_ahead_ms = sent_wall_ms - now_wall_ms
    age = transit_age_ms(sent_wall_ms, now_wall_ms)
    result.age_ms = age
    if age == 0:
        return result
    expired = result.expired
    for key, value in key_vals.items():
        ttl = value.ttl_ms
        if type(ttl) is not int or ttl == TTL_INFINITY or ttl <= 0:
            continue
        if ttl <= age:
            expired.append(key)
        else:
            value.ttl_ms = ttl - age
    for key in expired:
        del key_vals[key]
    return result

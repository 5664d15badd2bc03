"""The stored record (the Thrift `Value`), its limits, and the reasons a merge can refuse one.

The store keeps `kvstore.gen.kvstore_thrift.ttypes.Value` objects directly, so a publication decoded
from the wire can be merged without any conversion. This module holds what the rest of the core
needs to know about that type: the i64 limits, the TTL sentinel, input validation and the
copy-with-TTL helper used by every read path.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, NewType

from kvstore.gen.kvstore_thrift.constants import TTL_INFINITY as _TTL_INFINITY
from kvstore.gen.kvstore_thrift.ttypes import Value

__all__ = [
    "I64_MAX",
    "I64_MIN",
    "REPLACEMENT_CHAR",
    "TTL_INFINITY",
    "NoMergeReason",
    "Value",
    "WireKeyVals",
    "diverged_from_sender",
    "hop_ttl",
    "invalid_reason",
    "is_wire_text",
    "with_ttl",
]

TTL_INFINITY: Final[int] = _TTL_INFINITY

# A key-value map fresh from the wire decoder, held by nobody else: what `KvStoreDb.merge_decoded`
# may take over without copying. Made only by `kvstore.wire.decoded_key_vals`, so that handing
# the store objects someone still uses takes a visible step (and fails the type check otherwise).
WireKeyVals = NewType("WireKeyVals", dict[str, Value])
I64_MAX: Final[int] = (1 << 63) - 1
I64_MIN: Final[int] = -(1 << 63)
# The Thrift C decoder turns invalid UTF-8 into U+FFFD (it has no strict mode), so bytes b"k\xff"
# and b"k\xfe" would both arrive as "k\ufffd". A key or originator holding U+FFFD is therefore
# refused, whether it came off the wire or was built in Python (the same record must be accepted
# or refused on every node). Checking for one character is cheap: for an ASCII or Latin-1 str,
# CPython answers `"\ufffd" in s` without scanning (the character cannot fit its storage kind).
REPLACEMENT_CHAR: Final[str] = "\ufffd"


class NoMergeReason:
    """Why `KvStoreDb.merge` did not apply a key (stable strings: they go on the wire)."""

    # Rejected as invalid input.
    MALFORMED = "MALFORMED"  # the key is not a str / not valid UTF-8, or the record not a Value
    INVALID_TTL = "INVALID_TTL"  # ttl <= 0 and not TTL_INFINITY, or not an i64
    INVALID_VERSION = "INVALID_VERSION"  # version < 1, or not an i64
    INVALID_ORIGINATOR = "INVALID_ORIGINATOR"  # originator_id missing / not a str / not UTF-8
    INVALID_VALUE = "INVALID_VALUE"  # value present but not bytes
    INVALID_TTL_VERSION = "INVALID_TTL_VERSION"  # ttl_version not an i64
    INVALID_HASH = "INVALID_HASH"  # hash present but not an i64
    # Valid, but the store already holds something at least as good.
    OLD_VERSION = "OLD_VERSION"  # lower version than the stored one
    # A member/<name> record making a member this node holds as removed active again: dropped
    # before the merge (removal is final, kvstore.membership.drop_readmissions).
    MEMBER_REMOVED = "MEMBER_REMOVED"
    # Not this leaf's to keep: its filters do not match (docs/kvstore.md, "Leaf nodes").
    NO_MATCHED_KEY = "NO_MATCHED_KEY"
    LOWER_ORIGINATOR = "LOWER_ORIGINATOR"  # same version, lower originator id
    LOWER_VALUE = "LOWER_VALUE"  # same version and originator, smaller value bytes
    OLD_TTL_VERSION = "OLD_TTL_VERSION"  # same value, lower ttl_version
    NO_CHANGE = "NO_CHANGE"  # identical to what is stored (an echo)
    # TTL-only updates (value absent) that cannot apply.
    UNKNOWN_KEY_TTL_UPDATE = "UNKNOWN_KEY_TTL_UPDATE"  # the key is not stored
    TTL_UPDATE_MISMATCH = "TTL_UPDATE_MISMATCH"  # stored version/originator differ
    # Set by the node, not the merge: the TTL ran out while the KEY_SET was in transit
    # (kvstore/transit.py).
    EXPIRED_IN_TRANSIT = "EXPIRED_IN_TRANSIT"

    INVALID: Final[frozenset[str]] = frozenset(
        {
            MALFORMED,
            INVALID_TTL,
            INVALID_VERSION,
            INVALID_ORIGINATOR,
            INVALID_VALUE,
            INVALID_TTL_VERSION,
            INVALID_HASH,
        }
    )


def invalid_reason(value: object) -> str | None:
    """The `NoMergeReason` for a record that is not a well-formed Value, or None if it is.

    The merge hot path inlines the same checks; this is the readable reference used elsewhere.
    """
    if type(value) is not Value:
        return NoMergeReason.MALFORMED
    ttl = value.ttl_ms
    if type(ttl) is not int or not (ttl == TTL_INFINITY or 0 < ttl <= I64_MAX):
        return NoMergeReason.INVALID_TTL
    version = value.version
    if type(version) is not int or not 0 < version <= I64_MAX:
        return NoMergeReason.INVALID_VERSION
    if type(value.originator_id) is not str:
        return NoMergeReason.INVALID_ORIGINATOR
    if value.value is not None and type(value.value) is not bytes:
        return NoMergeReason.INVALID_VALUE
    ttl_version = value.ttl_version
    if type(ttl_version) is not int or not I64_MIN <= ttl_version <= I64_MAX:
        return NoMergeReason.INVALID_TTL_VERSION
    h = value.hash
    if h is not None and (type(h) is not int or not I64_MIN <= h <= I64_MAX):
        return NoMergeReason.INVALID_HASH
    return None


def is_wire_text(text: str) -> bool:
    """True if `text` survives the wire unchanged: encodable as UTF-8 (no lone surrogates) and
    free of U+FFFD (what the decoder makes of invalid bytes, see REPLACEMENT_CHAR)."""
    if REPLACEMENT_CHAR in text:
        return False
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def diverged_from_sender(no_merge: Mapping[str, str]) -> bool:
    """Do these merge refusals of a peer's flood show that its store and ours diverged?

    A TTL update for a version (or originator) we do not hold, when ours is not newer
    (TTL_UPDATE_MISMATCH), means the peer holds a value we missed: a full sync with it repairs
    that now instead of at the next anti-entropy round. A TTL update for a key we do not hold
    at all (UNKNOWN_KEY_TTL_UPDATE) does not count: it is also what a key that just expired here
    looks like, and resyncing on every such race would turn expiry into sync storms."""
    return NoMergeReason.TTL_UPDATE_MISMATCH in no_merge.values()


def hop_ttl(remaining_ms: int, decrement_ms: int, threshold_ms: int) -> int | None:
    """The TTL a finite-TTL key carries to the next node (a flood, a full-sync reply, a
    finalize set), or None: it is not sent. The one rule for every path that sends a key on:
    each hop takes `decrement_ms` off the remaining time, and a key with no more than the
    decrement left, or less than `threshold_ms`, would expire in flight (and bounce)."""
    if remaining_ms <= decrement_ms or remaining_ms < threshold_ms:
        return None
    return remaining_ms - decrement_ms


def with_ttl(value: Value, ttl_ms: int, *, keep_value: bool = True) -> Value:
    """A fresh copy of `value` carrying `ttl_ms` (and no payload unless `keep_value`)."""
    return Value(
        value.version,
        value.originator_id,
        value.value if keep_value else None,
        ttl_ms,
        value.ttl_version,
        value.hash,
    )

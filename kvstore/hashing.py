"""Fixed 64-bit hashes shared by every node of a mesh.

All of these are compared across processes and hosts, so they use xxHash (XXH3, 64-bit, seed 0)
over explicit byte encodings, never Python's per-process salted `hash()`.

- `value_hash`: the `Value.hash` field, over (version, originator_id, value). Excludes the TTL and
  ttl_version, so a TTL refresh keeps the hash.
- `key_hash`: places a key in a digest-tree leaf bucket.
- `contribution`: what one stored key adds (by XOR) to the anti-entropy digests. It mixes the key,
  the value hash and the ttl_version, so a TTL refresh that one store missed also shows up.
"""

from __future__ import annotations

import struct
from typing import Final

from xxhash import xxh3_64_intdigest

__all__ = [
    "MASK64",
    "contribution",
    "key_hash",
    "pack_version",
    "to_signed64",
    "value_hash",
    "value_hash_head",
]

_U64: Final[int] = 1 << 64
_I64_TOP: Final[int] = 1 << 63

# The hashed encoding of a value: version (i64 LE), originator length (u32 LE), has-value flag (u8),
# the originator's UTF-8 bytes, then the value bytes. The length prefix makes the split between
# originator and value unambiguous; the flag distinguishes "absent" from b"".
_VERSION: Final = struct.Struct("<q")
_ORIG_HEAD: Final = struct.Struct("<IB")
# Per-originator tail of the header (length, flag, bytes), for values present / absent. Mesh
# originators are few, so caching their encodings saves an encode + pack per merged value.
_orig_parts: dict[str, tuple[bytes, bytes]] = {}
_MAX_CACHED_ORIGINATORS: Final = 4096
MASK64: Final = _U64 - 1


def to_signed64(h: int) -> int:
    """Reinterpret an unsigned 64-bit integer as a signed one (Thrift i64)."""
    return h - _U64 if h >= _I64_TOP else h


def _originator_parts(originator_id: str) -> tuple[bytes, bytes]:
    parts = _orig_parts.get(originator_id)
    if parts is None:
        raw = originator_id.encode()
        parts = (_ORIG_HEAD.pack(len(raw), 1) + raw, _ORIG_HEAD.pack(len(raw), 0) + raw)
        if len(_orig_parts) >= _MAX_CACHED_ORIGINATORS:
            _orig_parts.clear()
        _orig_parts[originator_id] = parts
    return parts


def value_hash_head(originator_id: str) -> bytes:
    """The part of `value_hash`'s input that follows the version, for a present value: callers
    hashing many values (the merge loop) cache it per originator and hash
    `pack_version(version) + head + value` themselves."""
    return _originator_parts(originator_id)[0]


pack_version: Final = _VERSION.pack


def value_hash(version: int, originator_id: str, value: bytes | None) -> int:
    """The fixed signed 64-bit hash of (version, originator_id, value).

    Raises `struct.error` if version is not an i64 and `UnicodeEncodeError` if originator_id
    cannot be encoded as UTF-8 (lone surrogates).
    """
    with_value, without_value = _originator_parts(originator_id)
    if value is None:
        data = _VERSION.pack(version) + without_value
    else:
        data = _VERSION.pack(version) + with_value + value
    h = xxh3_64_intdigest(data)
    return h - _U64 if h >= _I64_TOP else h


def key_hash(key: str) -> int:
    """Unsigned 64-bit hash of a key's UTF-8 bytes; its top bits choose the digest bucket."""
    return xxh3_64_intdigest(key.encode())


def contribution(key_utf8: bytes, value_hash_i64: int, ttl_version: int) -> int:
    """Unsigned 64-bit XOR-contribution of one stored key to the digest tree.

    XXH3-64 of the key, seeded with (value hash + ttl_version) mod 2**64. The result is a
    non-linear function of all three parts: swapping two keys' values (or ttl_versions) between
    stores changes the XOR of the contributions, which plain XOR-ing of three hashes would not.
    Two originations of one key collide only if their hashes differ by exactly their
    ttl_version difference (probability ~2**-64).
    """
    return xxh3_64_intdigest(key_utf8, (value_hash_i64 + ttl_version) & MASK64)

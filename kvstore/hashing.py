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

__all__ = ["contribution", "key_hash", "to_signed64", "value_hash"]

_U64: Final[int] = 1 << 64
_I64_TOP: Final[int] = 1 << 63

# version (i64), originator length (u32), has-value flag (u8); then originator UTF-8, then the
# value bytes. The length prefix makes the split between originator and value unambiguous, the
# flag distinguishes "absent" from b"".
_VALUE_HEAD: Final = struct.Struct("<qIB")
# key hash (u64), value hash (i64), ttl_version (i64).
_CONTRIB: Final = struct.Struct("<Qqq")


def to_signed64(h: int) -> int:
    """Reinterpret an unsigned 64-bit integer as a signed one (Thrift i64)."""
    return h - _U64 if h >= _I64_TOP else h


def value_hash(version: int, originator_id: str, value: bytes | None) -> int:
    """The fixed signed 64-bit hash of (version, originator_id, value).

    Raises `struct.error` if version is not an i64 and `UnicodeEncodeError` if originator_id
    cannot be encoded as UTF-8 (lone surrogates).
    """
    orig = originator_id.encode()
    if value is None:
        data = _VALUE_HEAD.pack(version, len(orig), 0) + orig
    else:
        data = _VALUE_HEAD.pack(version, len(orig), 1) + orig + value
    h = xxh3_64_intdigest(data)
    return h - _U64 if h >= _I64_TOP else h


def key_hash(key: str) -> int:
    """Unsigned 64-bit hash of a key's UTF-8 bytes; its top bits choose the digest bucket."""
    return xxh3_64_intdigest(key.encode())


def contribution(key_hash_u64: int, value_hash_i64: int, ttl_version: int) -> int:
    """Unsigned 64-bit XOR-contribution of one stored key to the digest tree.

    Hashing the three parts together (rather than XOR-ing them) keeps the digest non-linear:
    swapping two keys' values between stores changes the digest.
    """
    return xxh3_64_intdigest(_CONTRIB.pack(key_hash_u64, value_hash_i64, ttl_version))

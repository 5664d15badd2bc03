"""The store signature: ONE definition of "these two stores hold the same data".

`kvmesh signature`, `kvmesh compare`, `KvStoreDb.signature` and the benchmarks all use this
module, so nothing can call two stores equal by a weaker rule than the others.

What it covers, per key: the key, version, originator id, ttl_version and the VALUE BYTES (or
their absence). It deliberately does not trust `Value.hash`: a hash is derived data that a sender
can forge, and a forged hash must not hide a difference in the bytes. It excludes the remaining
TTL, which counts down differently on every node (a node's clock, the hop decrements) and is not
part of what the nodes agree on; ttl_version is covered, so a TTL refresh one store missed shows.

The digest is SHA-256 over a length-prefixed encoding (no two different stores encode to the
same bytes), with the keys in sorted order; the first field is a format tag so that a future
change of the encoding cannot silently compare equal to the old one.

The anti-entropy digests (`KvStoreDb.root_digest`, `digest_children`) are a different thing: a
fast XOR of per-key contributions over the stored hashes, used to find WHERE two stores differ;
stored hashes are recomputed on merge (the node verifies them), so they follow the bytes too.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Mapping
from typing import Final

from kvstore.gen.kvstore_thrift.ttypes import Value

__all__ = ["Identity", "record_identity", "store_signature"]

_FORMAT_TAG: Final[bytes] = b"kvmesh-store-signature-v1\n"
_HEAD: Final = struct.Struct("<qqI")  # version, ttl_version, originator length
_LEN: Final = struct.Struct("<I")
_ABSENT: Final[bytes] = b"\xff\xff\xff\xff"  # value absent (a length no value can have here)

Identity = tuple[int, str, int, bytes | None]


def record_identity(value: Value) -> Identity:
    """What two nodes must agree on for one key: (version, originator, ttl_version, value)."""
    return (value.version, value.originator_id, value.ttl_version, value.value)


def store_signature(key_vals: Mapping[str, Value]) -> str:
    """Hex SHA-256 signature of `key_vals` (see the module docstring for what it covers).

    Equal for two mappings iff they have the same keys and every key's `record_identity` is
    equal (up to a SHA-256 collision). Values must carry their payload (a full dump, not a hash
    dump): a value without bytes is signed as "absent", which differs from any bytes.
    """
    digest = hashlib.sha256(_FORMAT_TAG)
    update = digest.update
    for key in sorted(key_vals):
        value = key_vals[key]
        key_utf8 = key.encode()
        originator = value.originator_id.encode()
        update(_LEN.pack(len(key_utf8)))
        update(key_utf8)
        update(_HEAD.pack(value.version, value.ttl_version, len(originator)))
        update(originator)
        payload = value.value
        if payload is None:
            update(_ABSENT)
        else:
            update(_LEN.pack(len(payload)))
            update(payload)
    return digest.hexdigest()

"""Anti-entropy digest tree, so that syncing two big stores costs in proportion to their difference.

Geometry (from the IDL, identical on every node): DIGEST_FANOUT children per node, DIGEST_DEPTH
levels below the root, node ids in heap order (root 0, children of n are n*F+1 .. n*F+F). The
leaves are `F**DEPTH` buckets; a key's bucket is the top `DEPTH*log2(F)` bits of `key_hash(key)`,
so bucket b is leaf node `FIRST_LEAF + b` and the path from the root to it spells b's digits.

Every node's digest is the XOR of the contributions (`hashing.contribution`) of all keys beneath
it. Upkeep is lazy, so that the flood hot path pays one flag store per update: a change only
marks its key's leaf bucket stale; when a digest is read, each stale leaf is recomputed from the
keys of its bucket (the owner supplies that function), then the inner nodes above changed leaves.
The cost moves to read time (anti-entropy, full sync, NODE_INFO) and is bounded by the number of
buckets changed since the last read times the keys per bucket (~15 at 1 M keys).

`DigestWalk` is the sans-I/O protocol on top: ask the peer for the children of the root, descend
only into children whose digests differ, and end with the differing leaf buckets, which the
caller then reconciles with the ordinary 3-way exchange restricted to those buckets.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Final, Protocol

from kvstore.gen.kvstore_thrift.constants import DIGEST_DEPTH, DIGEST_FANOUT

__all__ = [
    "BUCKET_BITS",
    "FIRST_LEAF",
    "NUM_BUCKETS",
    "NUM_NODES",
    "DigestSource",
    "DigestTree",
    "DigestWalk",
    "bucket_of_hash",
    "children_of",
]

FANOUT: Final[int] = DIGEST_FANOUT
DEPTH: Final[int] = DIGEST_DEPTH
if FANOUT < 2 or FANOUT & (FANOUT - 1):
    raise ImportError(f"DIGEST_FANOUT must be a power of two >= 2, got {FANOUT}")
_LEVEL_BITS: Final[int] = FANOUT.bit_length() - 1
BUCKET_BITS: Final[int] = _LEVEL_BITS * DEPTH
NUM_BUCKETS: Final[int] = 1 << BUCKET_BITS
# Heap-order id of the first node of each level: (F**d - 1) / (F - 1).
_LEVEL_START: Final[tuple[int, ...]] = tuple(
    (FANOUT**d - 1) // (FANOUT - 1) for d in range(DEPTH + 2)
)
FIRST_LEAF: Final[int] = _LEVEL_START[DEPTH]
NUM_NODES: Final[int] = _LEVEL_START[DEPTH + 1]
_BUCKET_SHIFT: Final[int] = 64 - BUCKET_BITS
_U64: Final[int] = 1 << 64
_NO_STALE: Final[bytes] = bytes(NUM_BUCKETS)
_I64_TOP: Final[int] = 1 << 63


def bucket_of_hash(key_hash_u64: int) -> int:
    """Leaf bucket (0 .. NUM_BUCKETS-1) of a key, from its unsigned 64-bit `key_hash`."""
    return key_hash_u64 >> _BUCKET_SHIFT


def children_of(node_id: int) -> range:
    """Heap-order ids of the children of an inner node."""
    if type(node_id) is not int or not 0 <= node_id < FIRST_LEAF:
        raise ValueError(f"digest node id {node_id!r} is not an inner node (0..{FIRST_LEAF - 1})")
    first = node_id * FANOUT + 1
    return range(first, first + FANOUT)


def _signed(h: int) -> int:
    return h - _U64 if h >= _I64_TOP else h


class DigestTree:
    """XOR digests of the whole tree, recomputed lazily from stale leaves (see the module doc).

    `leaf_digest(bucket)` must return the unsigned XOR of the contributions of the keys currently
    in `bucket`; it is called only for buckets marked stale since the last read.
    """

    __slots__ = ("_followers", "_leaf_digest", "_levels", "_stale")

    def __init__(self, leaf_digest: Callable[[int], int]) -> None:
        # _levels[d] holds the FANOUT**d unsigned digests of depth d; _levels[DEPTH] are the leaves.
        self._levels: list[list[int]] = [[0] * (FANOUT**d) for d in range(DEPTH + 1)]
        self._leaf_digest = leaf_digest
        # One flag byte per leaf: a store into a bytearray is the cheapest mark for the hot path
        # (no hashing, no allocation), and finding the marks is a C-speed scan of 64 KiB.
        self._stale = bytearray(NUM_BUCKETS)
        # Stale flags of trees over a subset of the same keys (a leaf peer's share: see
        # `KvStoreDb.filtered_digests`): each stale leaf found here is marked there too before
        # the flags are cleared, so the hot path still marks one array.
        self._followers: list[bytearray] = []

    def follow(self, stale: bytearray) -> None:
        """Mark `stale` (another tree's flags) wherever this tree's leaves go stale."""
        self._followers.append(stale)

    def unfollow(self, stale: bytearray) -> None:
        self._followers = [f for f in self._followers if f is not stale]

    @property
    def stale(self) -> bytearray:
        """Per-bucket stale flags, for hot loops that inline `mark_stale` (`stale[b] = 1`)."""
        return self._stale

    def mark_stale(self, bucket: int) -> None:
        """The keys of `bucket` changed: recompute its leaf at the next read."""
        self._stale[bucket] = 1

    def refresh(self) -> None:
        """Recompute the stale leaves now (and so mark them in the followers)."""
        self._refresh()

    def _refresh(self) -> None:
        stale = self._stale
        pos = stale.find(1)
        if pos < 0:
            return
        levels = self._levels
        leaves = levels[DEPTH]
        leaf_digest = self._leaf_digest
        find = stale.find
        # Changed nodes are tracked as flags of the level above, not as a set of ints: after a
        # bulk load every leaf changes, and a 65 k-int set would be megabytes of transient memory
        # that the allocator keeps.
        changed = bytearray(FANOUT ** (DEPTH - 1))
        followers = self._followers
        while pos >= 0:
            for follower in followers:
                follower[pos] = 1
            digest = leaf_digest(pos)
            if digest != leaves[pos]:
                leaves[pos] = digest
                changed[pos >> _LEVEL_BITS] = 1
            pos = find(1, pos + 1)
        stale[:] = _NO_STALE  # in place: hot loops may hold the array
        for depth in range(DEPTH - 1, -1, -1):
            below = levels[depth + 1]
            row = levels[depth]
            parents = bytearray(FANOUT ** (depth - 1)) if depth > 0 else None
            index = changed.find(1)
            while index >= 0:
                first = index << _LEVEL_BITS
                acc = 0
                for digest in below[first : first + FANOUT]:
                    acc ^= digest
                row[index] = acc
                if parents is not None:
                    parents[index >> _LEVEL_BITS] = 1
                index = changed.find(1, index + 1)
            if parents is None:
                break
            changed = parents

    def root(self) -> int:
        """Digest of the whole store, as a signed i64."""
        self._refresh()
        return _signed(self._levels[0][0])

    def node(self, node_id: int) -> int:
        """Digest of one node (heap-order id), as a signed i64."""
        self._refresh()
        depth, index = _locate(node_id)
        return _signed(self._levels[depth][index])

    def children(self, node_ids: Iterable[int]) -> dict[int, int]:
        """For each inner node id, the signed digests of its FANOUT children (child id -> digest).

        Raises ValueError for an id that is not an inner node, or for more ids than there are
        inner nodes (a request can never need more; this bounds the work a peer can cause).
        """
        ids = list(node_ids)
        if len(ids) > FIRST_LEAF:
            raise ValueError(f"too many digest node ids ({len(ids)} > {FIRST_LEAF})")
        self._refresh()
        levels = self._levels
        out: dict[int, int] = {}
        for node_id in ids:
            first_child = children_of(node_id).start
            depth, index = _locate(first_child)
            row = levels[depth]
            for offset in range(FANOUT):
                out[first_child + offset] = _signed(row[index + offset])
        return out


def _locate(node_id: int) -> tuple[int, int]:
    """(depth, index within the depth) of a heap-order node id."""
    if type(node_id) is not int or not 0 <= node_id < NUM_NODES:
        raise ValueError(f"digest node id {node_id!r} out of range 0..{NUM_NODES - 1}")
    depth = 0
    while node_id >= _LEVEL_START[depth + 1]:
        depth += 1
    return depth, node_id - _LEVEL_START[depth]


class DigestSource(Protocol):
    """Anything that can answer a digest request locally (a `KvStoreDb`)."""

    def digest_children(self, node_ids: Iterable[int]) -> dict[int, int]: ...


class DigestWalk:
    """Sans-I/O walk down two digest trees to the leaf buckets where they differ.

    Usage by a node, against one peer::

        walk = DigestWalk(db)
        while (ids := walk.next_request()) is not None:
            walk.on_reply(ask_peer_for_digests(ids))   # DIGEST_GET{node_ids=ids}
        buckets = walk.differing_buckets()   # then hash_dump / dump_difference with buckets=...

    The local side is read at each `on_reply`, so local merges during the walk are harmless: at
    worst a bucket is reconciled needlessly or a difference is left for the next round.
    A reply that lacks a child digest (or carries a non-integer) counts that child as different.
    """

    __slots__ = ("_buckets", "_local", "_pending", "_waiting", "done", "replies")

    def __init__(self, local: DigestSource) -> None:
        self._local = local
        self._pending: list[int] = [0]
        self._waiting = False
        self._buckets: list[int] = []
        self.done = False
        self.replies = 0

    def next_request(self) -> list[int] | None:
        """Node ids whose children's digests to ask the peer for, or None once the walk is done."""
        if self.done:
            return None
        self._waiting = True
        return list(self._pending)

    def on_reply(self, digests: Mapping[int, int]) -> None:
        """Feed the peer's answer (child id -> digest) to the last `next_request`."""
        if not self._waiting:
            raise RuntimeError("DigestWalk.on_reply without an outstanding request")
        self._waiting = False
        self.replies += 1
        mine = self._local.digest_children(self._pending)
        differing = [child for child, digest in mine.items() if digests.get(child) != digest]
        differing.sort()
        if not differing:
            self._pending = []
            self.done = True
        elif differing[0] >= FIRST_LEAF:
            self._buckets = [child - FIRST_LEAF for child in differing]
            self._pending = []
            self.done = True
        else:
            self._pending = differing

    def differing_buckets(self) -> list[int]:
        """Sorted leaf buckets whose digests differ (empty until the walk is done)."""
        return list(self._buckets)

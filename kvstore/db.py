"""KvStoreDb: the I/O-free KvStore database (CRDT merge, TTL countdown, dumps, full-sync diff).

Nothing here does I/O or reads a clock: every method that depends on time takes `now_ms`, the
caller's monotonic clock in milliseconds. See docs/kvstore-core.md for the behaviour contract.

Storage layout (per key, kept small because a node holds ~1 M keys):
- `_kv`: dict key -> stored `Value`. The stored record's `ttl_ms` holds the key's ABSOLUTE expiry
  time (monotonic ms), or TTL_INFINITY; read paths convert it back to the remaining TTL.
- `_keys`: SortedList of the keys, for prefix range scans.
- `_buckets`: per digest-leaf-bucket lists of keys (~15 keys each at 1 M keys), so the keys of a
  bucket are listed without a scan and removed in O(bucket).
- `_digests`: the XOR digest tree (`digest.DigestTree`): ~70 k ints whatever the key count; a
  merge or removal only flags its key's leaf bucket stale; stale leaves are recomputed from
  `_buckets` (and the inner nodes above them) when a digest is read.
- `_expiry`: the TTL queue (`ttl.ExpiryQueue`) for keys with a finite TTL.

Ownership: a stored record is never mutated after it is stored. Two entry points merge:
- `merge(key_vals)`: for key-values built in Python (tests, the simulation, tools). Every field is
  checked, the caller's objects are neither changed nor kept, and the delta holds fresh copies.
- `merge_decoded(key_vals)`: the node's hot path, for a `WireKeyVals` map (`kvstore.wire`): fresh
  objects the Thrift decoder made that nobody else holds. The store takes them over: their hash
  is (re)computed, originator and TTL canonicalised, and for an infinite TTL the object itself
  becomes the stored record (no copy per key). The delta holds those same objects: read-only,
  except that the flood core (`kvstore.flood`) may write the wire TTL into finite-TTL ones
  (never stored: the store keeps a copy holding the absolute expiry).
Every read path (get, dump, hash_dump, dump_difference) returns fresh copies; `prepare_flood`
returns the delta's own infinite-TTL objects (read-only).

Hashes: none received is trusted. The merge recomputes the hash of every value it applies from
the bytes (a forged or stale hash would hide a difference from anti-entropy for good).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Final

from sortedcontainers import SortedList
from xxhash import xxh3_64_intdigest

from kvstore import stats
from kvstore.digest import NUM_BUCKETS, DigestTree, bucket_of_hash
from kvstore.filters import KeyFilter
from kvstore.hashing import MASK64, contribution, pack_version, value_hash, value_hash_head
from kvstore.signature import store_signature
from kvstore.ttl import ExpiryQueue
from kvstore.value import (
    I64_MIN,
    REPLACEMENT_CHAR,
    TTL_INFINITY,
    NoMergeReason,
    Value,
    WireKeyVals,
    hop_ttl,
    invalid_reason,
    is_wire_text,
    with_ttl,
)

__all__ = ["KvStoreDb", "MergeResult", "compare_values", "record_order"]

_INF: Final[int] = TTL_INFINITY
_REPLACEMENT: Final[str] = REPLACEMENT_CHAR
_I64_TOP: Final[int] = 1 << 63
_U64: Final[int] = 1 << 64
_UNKNOWN: Final[int] = 2  # compare_values: neither side can be shown better (hashes differ)
_MAX_INTERNED_ORIGINATORS: Final[int] = 65536
# TTL queue compaction: when it holds more than this many entries and this many per finite key.
_COMPACT_MIN_ENTRIES: Final[int] = 4096
_COMPACT_RATIO: Final[int] = 8
_BUCKET_SHIFT: Final[int] = 64 - (NUM_BUCKETS.bit_length() - 1)
# Digest trees over leaf peers' shares kept at once (~2.5 MB each); the least recently used
# one is dropped beyond this and built again (one scan of the store) when asked for.
MAX_FILTERED_DIGESTS: Final[int] = 16
_R = NoMergeReason


@dataclass(slots=True)
class MergeResult:
    """Outcome of `KvStoreDb.merge`.

    delta: the incoming values that changed the store, keyed by key: exactly what to publish to
        subscribers and flood on (after `prepare_flood`). A TTL-only update appears without
        `.value`. Read-only (see the module docstring on ownership).
    no_merge: key -> `NoMergeReason` string for every key that was not applied.
    """

    delta: dict[str, Value] = field(default_factory=dict)
    no_merge: dict[str, str] = field(default_factory=dict)


# The field that decided `record_order` (merge turns it into the no-merge reason).
BY_VERSION, BY_ORIGINATOR, BY_VALUE, BY_TTL_VERSION = range(4)
# A better record of mine, by the field that decided: the reason the other one is not merged.
_LOSES_BY: Final[tuple[str, ...]] = (
    _R.OLD_VERSION, _R.LOWER_ORIGINATOR, _R.LOWER_VALUE, _R.OLD_TTL_VERSION)


def record_order(mine: Value, theirs: Value) -> tuple[int, int]:
    """THE merge order of two records of one key (the one rule: `compare_values` and
    `KvStoreDb.merge` both decide through it): (1 mine better | -1 theirs | 0 same | 2 unknown,
    the field that decided).

    Higher version; then higher originator id (code-point order == UTF-8 byte order); then
    greater value bytes; then higher ttl_version (the same value with a newer TTL). Records
    without value bytes (hash dumps) compare by hash instead: equal hashes mean equal values;
    different hashes cannot be ordered (2), and the full sync exchanges the key both ways.
    Value bytes, when both are present, are compared before any hash: a hash that came with
    them is not trusted to stand for them.
    """
    if mine.version != theirs.version:
        return (1 if mine.version > theirs.version else -1), BY_VERSION
    if mine.originator_id != theirs.originator_id:
        return (1 if mine.originator_id > theirs.originator_id else -1), BY_ORIGINATOR
    if mine.value is not None and theirs.value is not None:
        if mine.value != theirs.value:
            return (1 if mine.value > theirs.value else -1), BY_VALUE
    elif mine.hash is None or mine.hash != theirs.hash:
        return _UNKNOWN, BY_VALUE
    return (mine.ttl_version > theirs.ttl_version) - (mine.ttl_version < theirs.ttl_version), \
        BY_TTL_VERSION


def compare_values(mine: Value, theirs: Value) -> int:
    """Which of two records for one key is better: 1 mine, -1 theirs, 0 same, 2 unknown (see
    `record_order`)."""
    return record_order(mine, theirs)[0]


class KvStoreDb:
    """One node's key-value store: CRDT merge, TTL countdown, dumps, digests. See module doc."""

    def __init__(
        self,
        node_id: str,
        *,
        ttl_decrement_ms: int = 1,
        ttl_threshold_ms: int = 500,
    ) -> None:
        if type(ttl_decrement_ms) is not int or ttl_decrement_ms < 0:
            raise ValueError(f"ttl_decrement_ms must be an int >= 0, got {ttl_decrement_ms!r}")
        if type(ttl_threshold_ms) is not int or ttl_threshold_ms < 0:
            raise ValueError(f"ttl_threshold_ms must be an int >= 0, got {ttl_threshold_ms!r}")
        self.node_id = node_id
        self.ttl_decrement_ms = ttl_decrement_ms
        self.ttl_threshold_ms = ttl_threshold_ms
        self.counters = stats.StatCounter()
        self._kv: dict[str, Value] = {}
        self._keys: SortedList = SortedList()
        self._buckets: list[list[str] | None] = [None] * NUM_BUCKETS
        self._digests = DigestTree(self._bucket_digest)
        # Digest trees of filtered views (a leaf peer's share), most recently used last.
        self._filtered: dict[KeyFilter, DigestTree] = {}
        self._expiry = ExpiryQueue()
        self._num_finite = 0
        # Keys removed by merge() because they had already expired: reported by the next expire().
        self._expired_unreported: list[str] = []
        # Interned originator -> (the canonical equal str, its `hashing.value_hash_head`).
        self._originators: dict[str, tuple[str, bytes]] = {}
        # Changes of the durable part of the store (see `enable_journal`); None: not kept.
        self._journal: dict[str, Value | None] | None = None

    # ------------------------------------------------------------------ basic container protocol

    def __len__(self) -> int:
        return len(self._kv)

    def __contains__(self, key: object) -> bool:
        return key in self._kv

    def keys(self, prefix: str = "") -> Iterator[str]:
        """Stored keys in sorted order (range scan for a prefix); includes keys not yet expired by
        `expire()` even if their TTL already ran out."""
        if not prefix:
            return iter(self._keys)
        return self._prefix_keys(prefix)

    # ------------------------------------------------------------------ durable part

    def enable_journal(self) -> None:
        """From now on, record every change of the durable part of the store: the key-values
        with an infinite TTL. `take_journal()` returns them as key -> the stored record (which
        is never mutated), or None when the key left the durable part (it turned finite).
        Finite-TTL keys are not recorded: their owners refresh them."""
        if self._journal is None:
            self._journal = {}

    def take_journal(self) -> dict[str, Value | None]:
        """The durable changes since the last call (latest per key); empty if not enabled."""
        journal = self._journal
        if not journal:
            return {}
        self._journal = {}
        return journal

    def load_durable(self, records: Iterable[tuple[str, Value]]) -> dict[str, str]:
        """Start-up: fill an EMPTY store with records read back from disk (one per key, an
        infinite TTL, no hash). Bulk work instead of a merge per key (a merge decides between
        two records; here there is only one): the sorted index is built once, digests are
        left stale. Returns key -> NoMergeReason of the records refused (version < 1)."""
        if self._kv:
            raise ValueError("load_durable needs an empty store")
        kv = self._kv
        originators = self._originators
        refused: dict[str, str] = {}
        for key, record in records:
            if record.version < 1:
                refused[key] = _R.INVALID_VERSION
                continue
            orig = record.originator_id
            interned = originators.get(orig)
            if interned is None:
                if len(originators) >= _MAX_INTERNED_ORIGINATORS:
                    originators.clear()
                interned = originators[orig] = (orig, value_hash_head(orig))
            canon = interned[0]
            record.originator_id = canon
            record.ttl_ms = _INF
            record.hash = value_hash(record.version, canon, record.value)
            kv[key] = record
        self._keys.update(kv)
        buckets = self._buckets
        for key in kv:
            bucket = xxh3_64_intdigest(key.encode()) >> _BUCKET_SHIFT
            members = buckets[bucket]
            if members is None:
                buckets[bucket] = [key]
            else:
                members.append(key)
        self._digests.stale[:] = b"\x01" * NUM_BUCKETS
        self.counters[stats.LOADED] += len(kv)
        return refused

    def durable_records(self) -> Iterator[tuple[str, Value]]:
        """Every stored key-value with an infinite TTL (the stored records, read-only)."""
        for key, record in self._kv.items():
            if record.ttl_ms == _INF:
                yield key, record

    # ------------------------------------------------------------------ merge

    def merge(self, key_vals: Mapping[str, Value], now_ms: int) -> MergeResult:
        """Apply key-values built in Python by the CRDT rules; return what changed and what not.

        Every field is checked (types, i64 ranges, wire text); the caller's objects are neither
        changed nor kept: the store works on copies, and the delta holds fresh copies too.
        Rules as in `merge_decoded`.
        """
        _check_now(now_ms)
        owned: dict[str, Value] = {}
        refused: dict[str, str] = {}
        for key, value in key_vals.items():
            reason = _invalid_reason(key, value)
            if reason is not None:
                refused[str(key)] = reason
                continue
            owned[key] = with_ttl(value, value.ttl_ms)
        result = self._merge(owned, now_ms, refused, len(key_vals))
        result.delta = {key: with_ttl(value, value.ttl_ms) for key, value in result.delta.items()}
        return result

    def merge_decoded(self, key_vals: WireKeyVals, now_ms: int) -> MergeResult:
        """Apply key-values fresh from the wire decoder by the CRDT rules (the node's hot path).

        Rules, in order: reject invalid input (ttl <= 0 and not infinite, version < 1, missing
        originator, U+FFFD in the key or originator: see `value.REPLACEMENT_CHAR`); a lower
        version loses; a higher version wins; on equal versions the higher originator id wins
        (code-point order == UTF-8 byte order); with the same originator the greater value bytes
        win; with equal values a higher ttl_version updates the TTL only. A TTL-only update (value
        None) applies only to a stored key with the same version and originator and a lower
        ttl_version.

        The decoder already guarantees every field's type and i64 range and valid UTF-8, so only
        those semantic checks run. The store takes the objects over (see the module docstring on
        ownership): hand it nothing that anyone else holds.
        """
        _check_now(now_ms)
        return self._merge(key_vals, now_ms, {}, len(key_vals))

    def _merge(
        self, key_vals: Mapping[str, Value], now_ms: int, no_merge: dict[str, str], received: int
    ) -> MergeResult:
        """The merge itself, on objects the store owns (typed right: decoded or checked).

        One loop on purpose, in three marked steps per key (semantic checks, decide, apply):
        it runs for every key-value a node receives, and a call per step per key would cost
        more than some of the steps themselves (see tools/bench/merge_bench.py)."""
        delta: dict[str, Value] = {}
        kv = self._kv
        kv_get = kv.get
        buckets = self._buckets
        stale = self._digests.stale
        originators = self._originators
        journal = self._journal
        num_finite = self._num_finite
        # Finite-TTL keys of this batch by TTL: one shared expiry int per distinct TTL, and the
        # keys are queued in bulk after the loop.
        expiry_of_ttl: dict[int, int] = {}
        expiring: dict[int, list[str]] = {}

        for key, new in key_vals.items():
            # ---- semantic checks (types are right here: decoded or checked above)
            ttl = new.ttl_ms
            if ttl <= 0 and ttl != _INF:
                no_merge[key] = _R.INVALID_TTL
                continue
            version = new.version
            if version < 1:
                no_merge[key] = _R.INVALID_VERSION
                continue
            if _REPLACEMENT in key:  # invalid UTF-8 on the wire (see value.REPLACEMENT_CHAR)
                no_merge[key] = _R.MALFORMED
                continue
            orig = new.originator_id
            if orig is None:
                no_merge[key] = _R.INVALID_ORIGINATOR
                continue
            # Interned originators were checked once when first seen.
            interned = originators.get(orig)
            if interned is None:
                if _REPLACEMENT in orig:
                    no_merge[key] = _R.INVALID_ORIGINATOR
                    continue
                if len(originators) >= _MAX_INTERNED_ORIGINATORS:
                    originators.clear()
                interned = originators[orig] = (orig, value_hash_head(orig))
            canon, head = interned
            val = new.value
            ttl_version = new.ttl_version

            cur = kv_get(key)
            if cur is not None and cur.ttl_ms != _INF and cur.ttl_ms <= now_ms:
                # Expired but not yet collected by expire(): it no longer exists.
                self._remove(key)
                self._expired_unreported.append(key)
                num_finite -= 1
                cur = None

            # ---- decide
            if cur is not None and version < cur.version:
                no_merge[key] = _R.OLD_VERSION
                continue
            if val is None:
                if cur is None:
                    no_merge[key] = _R.UNKNOWN_KEY_TTL_UPDATE
                    continue
                if version != cur.version or orig != cur.originator_id:
                    no_merge[key] = _R.TTL_UPDATE_MISMATCH
                    continue
                if ttl_version <= cur.ttl_version:
                    no_merge[key] = (
                        _R.NO_CHANGE if ttl_version == cur.ttl_version else _R.OLD_TTL_VERSION
                    )
                    continue
                ttl_only = True
            elif cur is None:
                ttl_only = False
            else:
                better, by = record_order(cur, new)
                if better >= 0:  # mine is at least as good (2 cannot happen: both have values)
                    no_merge[key] = _LOSES_BY[by] if better else _R.NO_CHANGE
                    continue
                ttl_only = by == BY_TTL_VERSION

            # ---- apply
            if ttl_only:
                assert cur is not None
                h = cur.hash
                stored_val = cur.value
                new.hash = h
            else:
                # Inlined `value_hash` (val is present here): every applied value is hashed.
                h = xxh3_64_intdigest(pack_version(version) + head + val)
                if h >= _I64_TOP:
                    h -= _U64
                new.hash = h
                stored_val = val
            if ttl == _INF:
                if ttl_only:
                    stored = Value(version, canon, stored_val, _INF, ttl_version, h)
                else:
                    new.originator_id = canon
                    new.ttl_ms = _INF
                    stored = new
            else:
                # One int object per distinct expiry time in the batch, shared by every record
                # (32 bytes per key saved on bulk loads).
                expires = expiry_of_ttl.get(ttl)
                if expires is None:
                    expires = expiry_of_ttl[ttl] = now_ms + ttl
                    expiring[expires] = [key]
                else:
                    expiring[expires].append(key)
                stored = Value(version, canon, stored_val, expires, ttl_version, h)
                num_finite += 1
            bucket = xxh3_64_intdigest(key.encode()) >> _BUCKET_SHIFT
            if cur is None:
                self._keys.add(key)
                members = buckets[bucket]
                if members is None:
                    buckets[bucket] = [key]
                else:
                    members.append(key)
            elif cur.ttl_ms != _INF:
                num_finite -= 1
            kv[key] = stored
            if journal is not None:
                if ttl == _INF:
                    journal[key] = stored
                elif cur is not None and cur.ttl_ms == _INF:
                    journal[key] = None  # turned finite: it leaves the durable part
            stale[bucket] = 1  # digest upkeep is lazy: see digest.DigestTree
            delta[key] = new

        self._num_finite = num_finite
        for expires, keys in expiring.items():
            self._expiry.push_many(keys, expires)
        counters = self.counters
        counters[stats.MERGE_RECEIVED] += received
        counters[stats.MERGE_UPDATED] += len(delta)
        for reason in no_merge.values():
            counters[stats.NO_MERGE(reason)] += 1
        self._maybe_compact_expiry()
        return MergeResult(delta, no_merge)

    # ------------------------------------------------------------------ removal and TTL

    def _remove(self, key: str) -> None:
        """Drop a stored key from every index (the TTL queue entry goes stale by itself)."""
        del self._kv[key]
        self._keys.remove(key)
        key_utf8 = key.encode()
        bucket = xxh3_64_intdigest(key_utf8) >> _BUCKET_SHIFT
        members = self._buckets[bucket]
        assert members is not None
        members.remove(key)
        if not members:
            self._buckets[bucket] = None
        self._digests.mark_stale(bucket)

    def _bucket_digest(self, bucket: int, key_filter: KeyFilter | None = None) -> int:
        """Unsigned XOR of the digest contributions of the keys stored in `bucket` (only those
        `key_filter` matches, if given)."""
        members = self._buckets[bucket]
        if members is None:
            return 0
        kv = self._kv
        acc = 0
        if key_filter is not None:
            prefixes, origs = key_filter.key_prefixes, key_filter.originator_ids
        for key in members:
            cur = kv[key]
            if key_filter is not None and not (
                key.startswith(prefixes) or cur.originator_id in origs
            ):
                continue
            # Inlined `hashing.contribution`: a sync after a bulk load recomputes every key.
            acc ^= xxh3_64_intdigest(key.encode(), (cur.hash + cur.ttl_version) & MASK64)
        return acc

    def expire(self, now_ms: int) -> list[str]:
        """Remove and return every key whose TTL has run out (expiry <= now_ms).

        Also returns keys that merge() found already expired and replaced or dropped since the
        last call, so subscribers hear about every expiry exactly once.
        """
        _check_now(now_ms)
        expired = self._expired_unreported
        self._expired_unreported = []
        kv = self._kv
        for expires, key in self._expiry.pop_due(now_ms):
            cur = kv.get(key)
            # A stale entry (key refreshed, replaced, made infinite or gone) does not match.
            if cur is not None and cur.ttl_ms == expires:
                self._remove(key)
                self._num_finite -= 1
                expired.append(key)
        if expired:
            self.counters[stats.EXPIRED_KEYS] += len(expired)
        return expired

    def next_expiry_ms(self) -> int | None:
        """Monotonic time at which `expire()` next has work, or None if no key has a finite TTL.

        Returns `now`-independent absolute time; if keys were found expired by merge() and not
        yet reported, returns the smallest possible time so the caller calls expire() promptly.
        """
        if self._expired_unreported:
            return I64_MIN
        queue = self._expiry
        kv = self._kv
        while (expires := queue.peek()) is not None:
            for index, key in enumerate(queue.keys_at(expires)):
                cur = kv.get(key)
                if cur is not None and cur.ttl_ms == expires:
                    # Stale keys before it go now: the node asks after every socket pass, and
                    # keys refreshed in the order they were queued would otherwise be walked
                    # again each time (quadratic under a steady flood of finite TTLs).
                    queue.drop_earliest_head(index)
                    return expires
            queue.pop_earliest()  # only stale entries at the top: discard them now
        return None

    def _maybe_compact_expiry(self) -> None:
        """Rebuild the TTL queue when stale entries dominate (bounded memory under refreshes).

        Stale entries die on their own when their time comes; with refreshes every TTL/4 a key
        has ~5 of them, so the 8x bound only trips on pathological patterns (a long TTL refreshed
        very often), and each rebuild is paid for by that many earlier updates.
        """
        queue = self._expiry
        if len(queue) > _COMPACT_MIN_ENTRIES and len(queue) > _COMPACT_RATIO * self._num_finite:
            queue.rebuild(
                (key, value.ttl_ms) for key, value in self._kv.items() if value.ttl_ms != _INF
            )
            self.counters[stats.TTL_QUEUE_COMPACTIONS] += 1

    # ------------------------------------------------------------------ reads

    def get(self, keys: Iterable[str], now_ms: int) -> dict[str, Value]:
        """Copies of the stored values of `keys` that exist, carrying their remaining TTL."""
        _check_now(now_ms)
        out: dict[str, Value] = {}
        kv_get = self._kv.get
        for key in keys:
            cur = kv_get(key)
            if cur is None:
                continue
            ttl = cur.ttl_ms
            if ttl != _INF:
                ttl -= now_ms
                if ttl <= 0:
                    continue
            out[key] = with_ttl(cur, ttl)
        return out

    def dump(
        self,
        now_ms: int,
        prefix: str = "",
        originator_ids: Collection[str] = (),
        buckets: Collection[int] | None = None,
        key_filter: KeyFilter | None = None,
    ) -> dict[str, Value]:
        """Copies of every live key matching prefix AND originator AND bucket filters (an empty
        filter matches everything; buckets=None means no bucket filter) AND `key_filter` (a leaf
        peer's share), with remaining TTL."""
        return self._dump(now_ms, prefix, originator_ids, buckets, key_filter, with_values=True)

    def hash_dump(
        self,
        now_ms: int,
        prefix: str = "",
        originator_ids: Collection[str] = (),
        buckets: Collection[int] | None = None,
        key_filter: KeyFilter | None = None,
    ) -> dict[str, Value]:
        """Like `dump` without payloads: version, originator, hash, remaining TTL, ttl_version."""
        return self._dump(now_ms, prefix, originator_ids, buckets, key_filter, with_values=False)

    def _dump(
        self,
        now_ms: int,
        prefix: str,
        originator_ids: Collection[str],
        buckets: Collection[int] | None,
        key_filter: KeyFilter | None,
        *,
        with_values: bool,
    ) -> dict[str, Value]:
        _check_now(now_ms)
        out: dict[str, Value] = {}
        kv = self._kv
        origs = frozenset(originator_ids) if originator_ids else None
        new_value = Value
        for key in self._scope_keys(prefix, buckets, key_filter):
            cur = kv[key]
            if origs is not None and cur.originator_id not in origs:
                continue
            if key_filter is not None and not key_filter.matches(key, cur):
                continue
            ttl = cur.ttl_ms
            if ttl != _INF:
                ttl -= now_ms
                if ttl <= 0:
                    continue
            out[key] = new_value(
                cur.version,
                cur.originator_id,
                cur.value if with_values else None,
                ttl,
                cur.ttl_version,
                cur.hash,
            )
        return out

    def _prefix_keys(self, prefix: str) -> Iterator[str]:
        for key in self._keys.irange(minimum=prefix):
            if not key.startswith(prefix):
                return
            yield key

    def _scope_keys(
        self, prefix: str, buckets: Collection[int] | None, key_filter: KeyFilter | None = None
    ) -> Iterable[str]:
        """Keys in the prefix range and (if given) the buckets; sorted unless buckets are given.
        With `key_filter` and no buckets: only keys it may match (callers still check it)."""
        if buckets is None:
            if key_filter is not None:
                return sorted(k for k in self._matching_keys(key_filter) if k.startswith(prefix))
            return self.keys(prefix)
        return self._bucket_keys(prefix, buckets)

    def _matching_keys(self, key_filter: KeyFilter) -> set[str]:
        """The stored keys `key_filter` matches, without testing every key against every
        prefix: range scans of the sorted index per prefix, one pass over the records for the
        originators (a C-speed comprehension)."""
        out: set[str] = set()
        for prefix in key_filter.key_prefixes:
            out.update(self._prefix_keys(prefix))
        origs = key_filter.originator_ids
        if origs:
            out.update([key for key, cur in self._kv.items() if cur.originator_id in origs])
        return out

    def _bucket_keys(self, prefix: str, buckets: Collection[int]) -> Iterator[str]:
        table = self._buckets
        for bucket in buckets:
            if type(bucket) is not int or not 0 <= bucket < NUM_BUCKETS:
                raise ValueError(f"bucket {bucket!r} out of range 0..{NUM_BUCKETS - 1}")
            members = table[bucket]
            if members is None:
                continue
            if prefix:
                for key in members:
                    if key.startswith(prefix):
                        yield key
            else:
                yield from members

    # ------------------------------------------------------------------ full sync

    def dump_difference(
        self,
        their_hashes: Mapping[str, Value],
        now_ms: int,
        prefix: str = "",
        originator_ids: Collection[str] = (),
        buckets: Collection[int] | None = None,
        key_filter: KeyFilter | None = None,
    ) -> tuple[dict[str, Value], list[str]]:
        """3-way full-sync responder.

        `their_hashes` is the requester's hash dump (values may be absent). Returns
        (key_vals: my values the requester lacks or has worse, as copies with the remaining TTL
        minus ttl_decrement_ms, keys with no more than that left being dropped;
        tobe_updated_keys: keys the requester has better or only it has, to be sent back).
        Keys the requester lists are compared whatever the filters; the filters select which of MY
        keys count as "the requester lacks them". `key_filter` (a leaf requester's filters, or
        this leaf's own) also applies to the requester's keys: one that does not match is
        neither sent nor asked for. Raises ValueError on a malformed entry.
        """
        _check_now(now_ms)
        send: dict[str, Value] = {}
        want: list[str] = []
        kv_get = self._kv.get
        for key, theirs in their_hashes.items():
            mine = kv_get(key)
            # Fast path, the common case of a periodic sync: an identical live entry. My fields are
            # well-typed, so equality proves theirs are too and no validation is needed.
            if (
                mine is not None
                and type(theirs) is Value
                and mine.hash == theirs.hash
                and mine.ttl_version == theirs.ttl_version
                and mine.version == theirs.version
                and mine.originator_id == theirs.originator_id
                and mine.hash is not None
                and (mine.ttl_ms == _INF or mine.ttl_ms > now_ms)
            ):
                continue
            _check_hash_entry(key, theirs)
            if (
                key_filter is not None
                and not key_filter.matches(key, theirs)
                and (mine is None or not key_filter.matches(key, mine))
            ):
                continue
            if mine is None or (mine.ttl_ms != _INF and mine.ttl_ms <= now_ms):
                want.append(key)
                continue
            rc = compare_values(mine, theirs)
            if rc == 0:
                continue
            if rc != -1:
                self._add_for_sync(send, key, mine, now_ms)
            if rc != 1:
                want.append(key)
        kv = self._kv
        origs = frozenset(originator_ids) if originator_ids else None
        for key in self._scope_keys(prefix, buckets, key_filter):
            if key in their_hashes:
                continue
            mine = kv[key]
            if origs is not None and mine.originator_id not in origs:
                continue
            if key_filter is not None and not key_filter.matches(key, mine):
                continue
            self._add_for_sync(send, key, mine, now_ms)
        self.counters[stats.FULL_SYNC_SENT_KEYS] += len(send)
        self.counters[stats.FULL_SYNC_REQUESTED_KEYS] += len(want)
        return send, want

    def _add_for_sync(self, out: dict[str, Value], key: str, cur: Value, now_ms: int) -> None:
        ttl: int | None = cur.ttl_ms
        if ttl != _INF:
            ttl = hop_ttl(cur.ttl_ms - now_ms, self.ttl_decrement_ms, self.ttl_threshold_ms)
            if ttl is None:
                return
        out[key] = with_ttl(cur, ttl)

    # ------------------------------------------------------------------ flooding

    def prepare_flood(
        self, delta: Mapping[str, Value], now_ms: int, *, in_place: bool = False
    ) -> dict[str, Value]:
        """The values of `delta` to send to peers, with the TTL each should carry on the wire.

        A finite TTL becomes the key's remaining time minus ttl_decrement_ms. Dropped: keys whose
        stored record no longer matches the delta value (version, originator, ttl_version: it was
        superseded or expired, and the newer state is flooded by its own merge), keys with no more
        than ttl_decrement_ms left, and keys with less than ttl_threshold_ms left. Infinite-TTL
        values are returned as they are (same objects, read-only).

        Finite-TTL values are returned as copies, unless `in_place`: then the delta's own objects
        get the wire TTL written into them. A finite-TTL delta value is never a stored record
        (the store keeps a copy holding the absolute expiry), so this is safe for a caller that
        owns the delta and is done with the TTL it arrived with (the node, after publishing it).
        """
        _check_now(now_ms)
        out: dict[str, Value] = {}
        kv_get = self._kv.get
        decrement = self.ttl_decrement_ms
        threshold = self.ttl_threshold_ms
        dropped = 0
        for key, value in delta.items():
            cur = kv_get(key)
            if cur is value:  # stored as merged (infinite TTL), so still current
                out[key] = value
                continue
            if (
                cur is None
                or cur.version != value.version
                or cur.originator_id != value.originator_id
                or cur.ttl_version != value.ttl_version
            ):
                dropped += 1
                continue
            expires = cur.ttl_ms
            if expires == _INF:
                out[key] = value
                continue
            wire_ttl = hop_ttl(expires - now_ms, decrement, threshold)
            if wire_ttl is None:
                dropped += 1
                continue
            if in_place:
                value.ttl_ms = wire_ttl
                out[key] = value
                continue
            out[key] = with_ttl(value, wire_ttl)
        if dropped:
            self.counters[stats.FLOOD_DROPPED_KEYS] += dropped
        return out

    def stored_as_merged(self, key_vals: Mapping[str, Value]) -> bool:
        """True if every value of `key_vals` is the stored record itself: each was applied by
        merge() with an infinite TTL and nothing has replaced it since. `prepare_flood` would
        return such values unchanged, so a publication made of them can be flooded on exactly as
        it was received (merge() only canonicalised equal fields and filled in a missing hash)."""
        kv_get = self._kv.get
        for key, value in key_vals.items():  # noqa: SIM110 (a plain loop: twice as fast as all())
            if kv_get(key) is not value:
                return False
        return True

    # ------------------------------------------------------------------ digests

    def digest_children(self, node_ids: Iterable[int]) -> dict[int, int]:
        """For each requested inner digest-tree node id, its DIGEST_FANOUT children's digests
        (child id -> signed i64). Raises ValueError for an id that is not an inner node."""
        return self._digests.children(node_ids)

    def filtered_digest_children(
        self, key_filter: KeyFilter, node_ids: Iterable[int]
    ) -> dict[int, int]:
        """`digest_children` of the tree over only the keys `key_filter` matches (a leaf
        peer's share), so a filtered anti-entropy walk costs in proportion to the difference."""
        return self._filtered_tree(key_filter).children(node_ids)

    def filtered_root_digest(self, key_filter: KeyFilter) -> int:
        """`root_digest` over only the keys `key_filter` matches."""
        return self._filtered_tree(key_filter).root()

    def _filtered_tree(self, key_filter: KeyFilter) -> DigestTree:
        """The digest tree of a filtered view, current. Built on first use (one scan of the
        store), then kept up to date as the main one is: a change marks its bucket stale in
        both (`DigestTree.follow`)."""
        tree = self._filtered.pop(key_filter, None)
        if tree is None:
            tree = DigestTree(lambda bucket: self._bucket_digest(bucket, key_filter))
            # The tree starts all zero: only buckets holding a matching key need computing.
            stale = tree.stale
            for key in self._matching_keys(key_filter):
                stale[xxh3_64_intdigest(key.encode()) >> _BUCKET_SHIFT] = 1
            self._digests.follow(tree.stale)
            self.counters[stats.LEAF_FILTERED_DIGEST_BUILDS] += 1
            if len(self._filtered) >= MAX_FILTERED_DIGESTS:
                oldest = next(iter(self._filtered))
                self._digests.unfollow(self._filtered.pop(oldest).stale)
        self._filtered[key_filter] = tree
        self._digests.refresh()  # hands this tree the buckets changed since its last read
        return tree

    def root_digest(self) -> int:
        """XOR digest of the whole store (signed i64); equal stores have equal root digests."""
        return self._digests.root()

    def bucket_of(self, key: str) -> int:
        """Digest-tree leaf bucket (0 .. NUM_BUCKETS-1) of a key."""
        return bucket_of_hash(xxh3_64_intdigest(key.encode()))

    def signature(self, now_ms: int, prefix: str = "") -> str:
        """`kvstore.signature.store_signature` of the live keys under `prefix` (all for ""):
        equal on two stores iff they hold the same keys with the same (version, originator,
        ttl_version, value bytes). A scan: O(keys under the prefix)."""
        return store_signature(self.dump(now_ms, prefix))

    # ------------------------------------------------------------------ introspection

    def audit(self) -> list[str]:
        """Problems with the store's internal consistency (empty when sound): every index agrees
        with the records, every key and originator is wire text, every stored hash is the hash
        of the stored bytes, and the digest tree matches the records. O(keys): for tests and
        fuzzing harnesses, not for the serving path."""
        problems: list[str] = []
        kv = self._kv
        if list(self._keys) != sorted(kv):
            problems.append("sorted key index differs from the records")
        in_buckets = [key for members in self._buckets if members for key in members]
        if sorted(in_buckets) != sorted(kv):
            problems.append("bucket index differs from the records")
        root = 0
        for key, cur in kv.items():
            if not is_wire_text(key) or not is_wire_text(cur.originator_id):
                problems.append(f"{key!r}: key or originator is not wire text")
            if cur.value is None or cur.hash != value_hash(cur.version, cur.originator_id,
                                                           cur.value):
                problems.append(f"{key!r}: stored hash is not the hash of the stored value")
                continue
            root ^= contribution(key.encode(), cur.hash, cur.ttl_version)
        if self._digests.root() & MASK64 != root:
            problems.append("root digest differs from the records")
        return problems

    def gauges(self) -> dict[str, int]:
        """Current sizes, for the node's counters."""
        return {
            stats.NUM_KEYS: len(self._kv),
            stats.NUM_FINITE_TTL_KEYS: self._num_finite,
            stats.TTL_QUEUE_SIZE: len(self._expiry),
        }


def _check_now(now_ms: object) -> None:
    # A float clock would leak into stored expiries and wire TTLs (Thrift i64): fail loudly.
    if type(now_ms) is not int:
        raise TypeError(f"now_ms must be an int (monotonic milliseconds), got {now_ms!r}")


def _invalid_reason(key: object, value: object) -> str | None:
    """Full validation of one key-value built in Python (not by the wire decoder)."""
    if type(key) is not str:
        return _R.MALFORMED
    reason = invalid_reason(value)
    if reason is not None:
        return reason
    if not is_wire_text(key):
        return _R.MALFORMED
    if not is_wire_text(value.originator_id):  # type: ignore[attr-defined]
        return _R.INVALID_ORIGINATOR
    return None


def _check_hash_entry(key: object, value: object) -> None:
    if type(key) is not str:
        raise ValueError(f"full-sync hash entry key must be a str, got {type(key).__name__}")
    if type(value) is not Value:
        raise ValueError(f"full-sync hash entry for {key!r} is not a Value")
    if type(value.version) is not int or type(value.originator_id) is not str:
        raise ValueError(f"full-sync hash entry for {key!r} lacks version/originator_id")
    if type(value.ttl_version) is not int:
        raise ValueError(f"full-sync hash entry for {key!r} has a non-integer ttl_version")
    if value.hash is not None and type(value.hash) is not int:
        raise ValueError(f"full-sync hash entry for {key!r} has a non-integer hash")
    if value.value is not None and type(value.value) is not bytes:
        raise ValueError(f"full-sync hash entry for {key!r} has a non-bytes value")

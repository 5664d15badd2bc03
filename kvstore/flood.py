"""The flood protocol of one node, sans-I/O: what a received KEY_SET means, and what goes to
which peer after a merge.

Events in (a decoded KEY_SET, a merge result, a merged delta, a timer poll), decisions out (what
to merge, which peer to resync, payloads and their targets); both clocks are passed in. The
node's shell (`kvstore.node`, `kvstore.node_peers`) moves the bytes and nothing else. See
docs/kvstore.md ("Flooding") for the behaviour as peers see it.

Receiving (`receive`), one rule for one-way floods and solicited sets alike:
- loop detection by flood path: a KEY_SET whose path (`node_ids`) already holds this node's name
  went round a loop; it is counted (`kvstore.looped_publications`) and not merged;
- hashes: none received is trusted; the store recomputes every one (`kvstore.db`), so there is
  nothing to decide per sender;
- time in transit: the age of the message (`timestamp_ms`) is charged to its finite TTLs
  (`kvstore.transit`); key-values whose TTL ran out on the way are left out and reported.
Leaf filters (`kvstore.filters`, docs/kvstore.md "Leaf nodes"): on a leaf (`own_filter`), a
received key-value its filters do not match is left out before the merge and counted
(`kvstore.leaf.refused_key_vals`), never an error; a solicited set learns it per key
(NO_MATCHED_KEY). Towards a peer whose filters are known (a leaf), `wants` decides per key: it
gets only what matches, never a forwarded publication's bytes, and finalize keys are filtered
the same way. A leaf floods only what a client gave it, never what a peer flooded it: with two
core peers (dual-homed) it must not carry floods from one to the other.
After the merge (`merged`): a peer's publication that changed nothing is counted redundant (it
also came by another path), and refusals showing that the sender's store and ours diverged
(`value.diverged_from_sender`) name the peer to resync now.

Sending (`flood`, `poll`, `finalize`):
- targets: the INITIALIZED peers not on the flood path, which includes the sender (`PeerTable`;
  peers in the middle of a sync remember the keys for their finalize step instead);
- the optional rate limiter (`kvstore.ratelimit`) may hold a delta back; `poll` releases it, to
  every peer, since a released buffer mixes paths;
- a peer's publication the store holds exactly as received goes on as its own bytes
  (`kvstore.forward`); the rest is encoded anew, every finite TTL set to what the next hop should
  carry (`KvStoreDb.prepare_flood`, one rule: `value.hop_ttl`).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from kvstore import stats, wire
from kvstore.batch_sizes import count_batch
from kvstore.db import KvStoreDb, MergeResult
from kvstore.filters import KeyFilter
from kvstore.forward import MIN_FORWARD_KEYS, Received, envelope_tail, forwarded_payload
from kvstore.gen.kvstore_thrift.ttypes import Command, KeySetParams, Request
from kvstore.peers import PeerTable
from kvstore.ratelimit import FloodLimiter, FloodRelease
from kvstore.transit import age_in_transit
from kvstore.value import Value, WireKeyVals, diverged_from_sender

__all__ = [
    "KEYS_PER_MESSAGE",
    "FloodProtocol",
    "IngestBatch",
    "Intake",
    "Path",
    "Send",
    "encode_key_set",
]

log = logging.getLogger("kvstore.node")

# A flood path: the node names a publication went through (`node_ids`), oldest first.
Path = tuple[str, ...]

# Keys per finalize KEY_SET (bounds the message size on big differences).
KEYS_PER_MESSAGE: Final[int] = 20_000


@dataclass(slots=True)
class Intake:
    """What a received KEY_SET comes to: merge `key_vals` (unless `looped`), which came by
    `path` (empty: from a client); `expired`: keys whose TTL ran out in transit (left out);
    `refused`: keys this leaf's filters do not match (left out)."""

    path: Path
    key_vals: WireKeyVals
    expired: list[str] = field(default_factory=list)
    looped: bool = False
    refused: list[str] = field(default_factory=list)  # not matched by this leaf's filters


class IngestBatch:
    """One-way KEY_SETs received in a row, merged as ONE batch.

    Merging key-disjoint sets together is the same as merging them one after the other (the
    merge is per key), and it saves the per-call cost for small publications. A set that shares
    a key with the batch, or came by another path, does not fit: the batch is merged first."""

    __slots__ = ("key_vals", "messages", "path")

    def __init__(self) -> None:
        self.path: Path = ()
        self.key_vals: WireKeyVals = WireKeyVals({})
        self.messages: list[Received] = []  # the peer publications in it (see kvstore.forward)

    def __len__(self) -> int:
        return len(self.key_vals)

    def fits(self, intake: Intake) -> bool:
        return not self.key_vals or (
            intake.path == self.path and self.key_vals.keys().isdisjoint(intake.key_vals)
        )

    def add(self, intake: Intake, message: Received | None) -> None:
        """Add a set that `fits` (`message`: the peer publication it came in, if any)."""
        if not self.key_vals:
            self.path = intake.path
            # A copy: the received map stays as it came (it may be forwarded as its bytes).
            self.key_vals = WireKeyVals(dict(intake.key_vals))
        else:
            self.key_vals.update(intake.key_vals)
        if message is not None:
            self.messages.append(message)

    def take(self) -> tuple[Path, WireKeyVals, list[Received]]:
        """Empty the batch; what it held."""
        taken = (self.path, self.key_vals, self.messages)
        self.key_vals = WireKeyVals({})
        self.messages = []
        return taken


@dataclass(slots=True)
class Send:
    """One one-way KEY_SET payload for each of `targets` (peer names), carrying `key_count`
    key-values."""

    targets: list[str]
    payload: bytes
    key_count: int


def encode_key_set(
    key_vals: Mapping[str, Value], node_ids: list[str], timestamp_ms: int,
    sender_id: str | None = None,
) -> bytes:
    """A one-way KEY_SET as peers send it: the flood path and the sender's wall clock."""
    return wire.encode(
        Request(
            cmd=Command.KEY_SET,
            key_set=KeySetParams(
                key_vals=key_vals,
                solicit_response=False,
                node_ids=node_ids,
                sender_id=sender_id,
                timestamp_ms=timestamp_ms,
            ),
        )
    )


class FloodProtocol:
    """One node's flooding decisions (see the module docstring). `counters` is the node's."""

    def __init__(
        self,
        name: str,
        db: KvStoreDb,
        table: PeerTable,
        counters: Counter[str],
        *,
        max_clock_skew_ms: int,
        limiter: FloodLimiter | None = None,
        own_filter: KeyFilter | None = None,
    ) -> None:
        self.name = name
        self.db = db
        self.table = table
        self.counters = counters
        self.max_clock_skew_ms = max_clock_skew_ms
        self.limiter = limiter
        self.own_filter = own_filter  # set on a leaf: what it keeps

    # ------------------------------------------------------------------ leaf filters

    def admit(self, key_vals: WireKeyVals) -> list[str]:
        """On a leaf: remove, in place, the key-values its filters do not match (counted);
        returns their keys. Elsewhere nothing is removed."""
        own = self.own_filter
        if own is None or not key_vals:
            return []
        refused = [key for key, value in key_vals.items() if not own.matches(key, value)]
        for key in refused:
            del key_vals[key]
        if refused:
            self.counters[stats.LEAF_REFUSED_KEY_VALS] += len(refused)
        return refused

    def wants(self, peer: str, key: str, value: Value) -> bool:
        """Does `peer` want this key-value? Only a peer with known filters (a leaf) may not."""
        key_filter = self.table[peer].key_filter if peer in self.table else None
        return key_filter is None or key_filter.matches(key, value)

    def _by_filter(self, targets: list[str]) -> tuple[list[str], dict[KeyFilter, list[str]]]:
        """Split flood targets: those that take everything, and the leaves by their filters."""
        plain: list[str] = []
        filtered: dict[KeyFilter, list[str]] = {}
        table = self.table
        for name in targets:
            key_filter = table[name].key_filter
            if key_filter is None:
                plain.append(name)
            else:
                filtered.setdefault(key_filter, []).append(name)
        return plain, filtered

    def _filtered_sends(
        self,
        filtered: Mapping[KeyFilter, list[str]],
        key_vals: Mapping[str, Value],
        node_ids: list[str],
        now_ms: int,
        now_wall_ms: int,
    ) -> list[Send]:
        """One KEY_SET per distinct filter with the share of `key_vals` it wants. The share is
        prepared as copies (`prepare_flood`): the everything-path may still write wire TTLs
        into the delta's own objects afterwards."""
        sends: list[Send] = []
        for key_filter, names in filtered.items():
            share = key_filter.select(key_vals)
            skipped = len(key_vals) - len(share)
            if skipped:
                self.counters[stats.LEAF_FLOOD_SKIPPED_KEY_VALS] += skipped * len(names)
            share = self.db.prepare_flood(share, now_ms)
            if share:
                sends.append(Send(names, encode_key_set(share, node_ids, now_wall_ms), len(share)))
        return sends

    # ------------------------------------------------------------------ receiving

    def receive(self, params: KeySetParams, now_wall_ms: int) -> Intake:
        """A KEY_SET this process just decoded (its key-values become the store's to keep)."""
        key_vals = wire.decoded_key_vals(params)
        node_ids = params.node_ids or ()
        path = tuple(node_ids)
        if node_ids:
            counters = self.counters
            counters[stats.RECEIVED_PUBLICATIONS] += 1
            counters[stats.RECEIVED_KEY_VALS] += len(key_vals)
            if self.name in node_ids:
                counters[stats.LOOPED_PUBLICATIONS] += 1
                return Intake(path, key_vals, looped=True)
        expired = self.charge_transit(key_vals, params.timestamp_ms, now_wall_ms)
        refused = self.admit(key_vals)
        return Intake(path, key_vals, expired, refused=refused)

    def charge_transit(
        self, key_vals: WireKeyVals, sent_wall_ms: int | None, now_wall_ms: int
    ) -> list[str]:
        """Take the time a message spent in transit off its TTLs (`kvstore.transit`), in place,
        and count what that did. Key-values whose TTL ran out on the way are removed; returns
        their keys."""
        if sent_wall_ms is None or not key_vals:
            return []
        aging = age_in_transit(key_vals, sent_wall_ms, now_wall_ms, self.max_clock_skew_ms)
        counters = self.counters
        if aging.expired:
            counters[stats.TTL_EXPIRED_IN_TRANSIT] += len(aging.expired)
            log.debug("%d key(s) expired in transit (%d ms)", len(aging.expired), aging.age_ms)
        if aging.clock_ahead_ms:
            counters[stats.TTL_CLOCK_AHEAD] += 1
            log.debug("peer timestamp %d ms in the future", aging.clock_ahead_ms)
        if aging.age_ms > counters[stats.TTL_TRANSIT_AGE_MS_MAX]:
            counters[stats.TTL_TRANSIT_AGE_MS_MAX] = aging.age_ms
        return aging.expired

    def merged(
        self, path: Path, result: MergeResult, received: Sequence[Mapping[str, Value]] = ()
    ) -> str | None:
        """Count a merge of what came by `path` (`received`: the key-value maps of the peer
        publications merged, for the redundancy count); returns the peer to resync now because
        the refusals show its store and ours diverged, or None."""
        delta = result.delta
        counters = self.counters
        if delta:
            counters[stats.UPDATED_KEY_VALS] += len(delta)
        redundant = 0
        for key_vals in received:
            if not delta or not any(key in delta for key in key_vals):
                redundant += 1
        if redundant:
            counters[stats.RECEIVED_REDUNDANT_PUBLICATIONS] += redundant
        if path and diverged_from_sender(result.no_merge):
            return path[-1]
        return None

    # ------------------------------------------------------------------ sending

    def flood(
        self,
        path: Path,
        delta: Mapping[str, Value],
        received: Sequence[Received],
        now_ms: int,
        now_wall_ms: int,
    ) -> list[Send]:
        """What to send after merging `delta`, which came by `path` (`received`: the peer
        publications it was merged from). Writes wire TTLs into the delta's finite-TTL objects
        (never stored ones: see `KvStoreDb`)."""
        if path and self.own_filter is not None:
            # A leaf floods only what it was given by a client (its agent): what one of its
            # core peers flooded it goes no further, so a dual-homed leaf never carries a flood
            # from one core to the other (never a transit node).
            return []
        targets = self.table.flood_targets(delta, exclude=path)
        if not targets:
            return []
        count_batch(self.counters, len(delta))
        if self.limiter is not None:
            release = self.limiter.submit(delta, now_ms)
            if release is None:
                return []
            if release.from_buffer:
                return self._release(release, now_ms, now_wall_ms)
            received = ()  # a limited node re-encodes: one code path to pace
        node_ids = [*path, self.name]
        sends: list[Send] = []
        targets, filtered = self._by_filter(targets)
        if filtered:
            sends += self._filtered_sends(filtered, delta, node_ids, now_ms, now_wall_ms)
        if not targets:
            return sends
        if received:
            delta = self._forward(targets, delta, received, node_ids, now_wall_ms, sends)
        key_vals = self.db.prepare_flood(delta, now_ms, in_place=True)
        if key_vals:
            sends.append(Send(targets, encode_key_set(key_vals, node_ids, now_wall_ms),
                              len(key_vals)))
        return sends

    def poll(self, now_ms: int, now_wall_ms: int) -> list[Send]:
        """A timer: what the rate limiter releases now."""
        if self.limiter is None:
            return []
        release = self.limiter.poll(now_ms)
        return [] if release is None else self._release(release, now_ms, now_wall_ms)

    def finalize(
        self, peer: str, keys: Iterable[str], now_ms: int, now_wall_ms: int
    ) -> list[Send]:
        """The last step of a full sync with `peer`: the current values of `keys` (those it
        asked for and those flooded while the sync ran), in KEY_SETs of at most
        KEYS_PER_MESSAGE keys, with only this node on the path."""
        key_vals = self.db.prepare_flood(self.db.get(keys, now_ms), now_ms, in_place=True)
        key_filter = self.table[peer].key_filter if peer in self.table else None
        if key_filter is not None:
            key_vals = key_filter.select(key_vals)
        items = list(key_vals.items())
        sends: list[Send] = []
        for start in range(0, len(items), KEYS_PER_MESSAGE):
            chunk = dict(items[start : start + KEYS_PER_MESSAGE])
            payload = encode_key_set(chunk, [self.name], now_wall_ms, sender_id=self.name)
            sends.append(Send([peer], payload, len(chunk)))
        return sends

    def _release(self, release: FloodRelease, now_ms: int, now_wall_ms: int) -> list[Send]:
        # A buffer flush mixes keys from many paths: it goes to every initialized peer with
        # only this node on its path (one redundant hop back to a sender, as in Open/R).
        targets, filtered = self._by_filter(self.table.flood_targets(release.key_vals))
        sends = self._filtered_sends(filtered, release.key_vals, [self.name], now_ms,
                                     now_wall_ms)
        key_vals = self.db.prepare_flood(release.key_vals, now_ms, in_place=True)
        if key_vals and targets:
            sends.append(
                Send(targets, encode_key_set(key_vals, [self.name], now_wall_ms), len(key_vals))
            )
        return sends

    def _forward(
        self,
        targets: list[str],
        delta: Mapping[str, Value],
        received: Sequence[Received],
        node_ids: list[str],
        now_wall_ms: int,
        sends: list[Send],
    ) -> Mapping[str, Value]:
        """Add a Send for each publication that can go on as received; return the rest of
        `delta` (to encode anew)."""
        tail: bytes | None = None
        forwarded: list[Mapping[str, Value]] = []
        forwarded_keys = 0
        stored_as_merged = self.db.stored_as_merged
        counters = self.counters
        for message in received:
            key_vals = message.key_vals
            if len(key_vals) < MIN_FORWARD_KEYS or not stored_as_merged(key_vals):
                continue
            end = message.entries_end()
            if end is None:
                counters[stats.FLOOD_REENCODED_LAYOUT] += 1
                continue
            if tail is None:
                tail = envelope_tail(node_ids, now_wall_ms)
            sends.append(Send(targets, forwarded_payload(message, end, tail), len(key_vals)))
            counters[stats.FLOOD_FORWARDED_PUBLICATIONS] += 1
            forwarded.append(key_vals)
            forwarded_keys += len(key_vals)
        if not forwarded:
            return delta
        # Forwarded maps are key-disjoint subsets of the delta (each holds the stored objects).
        if forwarded_keys == len(delta):
            return {}
        return {
            key: value
            for key, value in delta.items()
            if not any(key in key_vals for key_vals in forwarded)
        }

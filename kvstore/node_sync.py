"""Requester side of one full sync with one peer, as a sans-I/O step machine.

A sync runs in three phases over the peer's command socket:
1. digest walk: DIGEST_GET requests walk down the two digest trees (`digest.DigestWalk`), so only
   the leaf buckets whose digests differ are looked at (cost grows with the difference);
2. bucket exchange: for each chunk of differing buckets, KEY_DUMP with this node's hashes of those
   buckets; the peer answers with what it has better or that this node lacks (merged by the node)
   and `tobe_updated_keys`, the keys this node has better or only it has;
3. finalize: the node sends the current values of the `tobe_updated_keys` (plus the keys flooded
   while the peer was not initialized) back with one-way KEY_SETs.

Leaf filters (`kvstore.filters`): a leaf's requests carry its filters (`own_filter`), so the peer
walks and dumps only its matching keys. A leaf peer says so in its first digest reply; from then
on this side walks its own filtered digest tree (`KvStoreDb.filtered_digest_children`) and sends
only matching hashes, so both trees cover the same keys and the walk still ends on the buckets
that really differ. Two leaves do not sync with each other (a leaf is never a transit node).

The node moves the messages and merges the replies; this class only decides what to ask next.
Up to `window` bucket requests are in flight at once, to hide round trips on large differences.
"""

from __future__ import annotations

from collections.abc import Iterable

from kvstore.db import KvStoreDb
from kvstore.digest import DigestWalk
from kvstore.filters import KeyFilter, filter_from_wire
from kvstore.gen.kvstore_thrift.ttypes import (
    Command,
    DigestParams,
    DigestReply,
    KeyDumpParams,
    KeyFilters,
    Publication,
    Request,
    Response,
)
from kvstore.protocol import THIS_NODE, Speaks, agree, from_wire


class SyncProtocolError(Exception):
    """The peer's reply does not fit the step it answers."""


class ProtocolRefused(SyncProtocolError):
    """The peer speaks no KvStore protocol this node speaks (`kvstore.protocol.agree`); the
    message says both sides' versions and which one to upgrade."""


class SyncSession:
    DIGEST = "digest"
    DUMP = "dump"

    def __init__(
        self,
        peer: str,
        me: str,
        db: KvStoreDb,
        *,
        started_ms: int,
        buckets_per_request: int,
        window: int = 4,
        reason: str = "peer_add",
        own_filter: KeyFilter | None = None,
        peer_filter: KeyFilter | None = None,
    ) -> None:
        self.peer = peer
        self.me = me
        self.db = db
        self.started_ms = started_ms
        self.reason = reason
        self.own_filter = own_filter  # this node is a leaf: its requests carry its filters
        self.peer_filter = peer_filter  # the peer is a leaf: compare only its share
        self._walk = DigestWalk(self)
        self._buckets_per_request = buckets_per_request
        self._window = window
        self._chunks: list[list[int]] | None = None
        self._next_chunk = 0
        self.in_flight: dict[bytes, str] = {}  # correlation id -> phase
        self.tobe_updated: set[str] = set()
        self.differing_buckets = 0
        self.keys_received = 0
        self.requests_sent = 0
        self.peer_speaks: Speaks | None = None  # from the peer's first digest reply

    def digest_children(self, node_ids: Iterable[int]) -> dict[int, int]:
        """The local side of the walk: the whole store, or the peer's share if it is a leaf."""
        if self.peer_filter is None:
            return self.db.digest_children(node_ids)
        return self.db.filtered_digest_children(self.peer_filter, node_ids)

    @property
    def walk_done(self) -> bool:
        return self._walk.done

    def next_requests(self, now_ms: int) -> list[tuple[str, Request]]:
        """Requests to send now (phase, request); empty when waiting or when finished."""
        if not self._walk.done:
            if self.in_flight:
                return []
            node_ids = self._walk.next_request()
            assert node_ids is not None
            # Every DIGEST_GET says what this node speaks (the first one is the hello; the
            # responder cannot tell which one is first, and the fields cost a few bytes).
            request = Request(
                cmd=Command.DIGEST_GET,
                digest=DigestParams(
                    node_ids=node_ids, filters=self._wire_filter(), sender_id=self.me,
                    protocol=THIS_NODE.protocol, min_protocol=THIS_NODE.min_protocol,
                    version=THIS_NODE.version,
                ),
            )
            return [(self.DIGEST, request)]
        chunks = self._bucket_chunks()
        out: list[tuple[str, Request]] = []
        while len(self.in_flight) + len(out) < self._window and self._next_chunk < len(chunks):
            chunk = chunks[self._next_chunk]
            self._next_chunk += 1
            out.append((self.DUMP, self._dump_request(chunk, now_ms)))
        return out

    def _bucket_chunks(self) -> list[list[int]]:
        """The differing buckets (known once the walk is done), in request-sized chunks."""
        if self._chunks is None:
            buckets = self._walk.differing_buckets()
            self.differing_buckets = len(buckets)
            size = self._buckets_per_request
            self._chunks = [buckets[i : i + size] for i in range(0, len(buckets), size)]
        return self._chunks

    def _dump_request(self, buckets: list[int], now_ms: int) -> Request:
        # The hashes are read when the request is built, so merges that happened since the walk
        # (from flooding or earlier chunks) are taken into account.
        hashes = self.db.hash_dump(now_ms, buckets=buckets, key_filter=self.peer_filter)
        return Request(
            cmd=Command.KEY_DUMP,
            key_dump=KeyDumpParams(
                key_val_hashes=hashes,
                sender_id=self.me,
                buckets=buckets,
                filters=self._wire_filter(),
            ),
        )

    def _wire_filter(self) -> KeyFilters | None:
        return None if self.own_filter is None else self.own_filter.to_wire()

    def sent(self, corr: bytes, phase: str) -> None:
        self.in_flight[corr] = phase
        self.requests_sent += 1

    def on_digest_reply(self, corr: bytes, response: Response) -> None:
        self._expect(corr, self.DIGEST)
        if response.digest is None or response.digest.digests is None:
            raise SyncProtocolError(f"peer {self.peer}: DIGEST_GET reply without digests")
        if self._walk.replies == 0:  # the first reply: the peer's hello, and is it a leaf
            self._check_protocol(response.digest)
            try:
                peer_filter = filter_from_wire(response.digest.filters)
            except ValueError as exc:
                raise SyncProtocolError(f"peer {self.peer}: bad leaf filters: {exc}") from exc
            if peer_filter is not None and self.own_filter is not None:
                raise SyncProtocolError(
                    f"peer {self.peer} is a leaf too: a leaf peers only with non-leaf nodes"
                )
            self.peer_filter = peer_filter
        self._walk.on_reply(response.digest.digests)

    def _check_protocol(self, reply: DigestReply) -> None:
        """ProtocolRefused unless the peer speaks a protocol this node speaks."""
        try:
            speaks = from_wire(reply.protocol, reply.min_protocol, reply.version)
        except ValueError as exc:
            raise SyncProtocolError(f"peer {self.peer}: {exc}") from exc
        self.peer_speaks = speaks
        agreement = agree(self.peer, speaks)
        if agreement.refused is not None:
            raise ProtocolRefused(agreement.refused)

    def on_dump_reply(self, corr: bytes, response: Response) -> Publication:
        """The peer's difference; the caller merges `key_vals` (tobe_updated is recorded here)."""
        self._expect(corr, self.DUMP)
        publication = response.publication
        if publication is None:
            raise SyncProtocolError(f"peer {self.peer}: KEY_DUMP reply without publication")
        self.tobe_updated.update(publication.tobe_updated_keys or ())
        self.keys_received += len(publication.key_vals or {})
        return publication

    def _expect(self, corr: bytes, phase: str) -> None:
        got = self.in_flight.pop(corr, None)
        if got != phase:
            raise SyncProtocolError(f"peer {self.peer}: unexpected {phase} reply")

    @property
    def finished(self) -> bool:
        """Every phase but the finalize is done."""
        return (
            self._walk.done
            and not self.in_flight
            and self._next_chunk >= len(self._bucket_chunks())
        )


# ---------------------------------------------------------------------- responder side


def answered_share(own: KeyFilter | None, requested: KeyFilter | None) -> KeyFilter | None:
    """The keys a sync request is answered over: on a leaf its own share (it holds nothing else
    and must not ask for anything else), else the requesting leaf's share, else everything."""
    return own if own is not None else requested


def digest_reply(
    db: KvStoreDb, own: KeyFilter | None, requested: KeyFilter | None, node_ids: Iterable[int]
) -> DigestReply:
    """The answer to a DIGEST_GET (ValueError for a bad node id). A leaf says so in it: the
    requester then compares only this leaf's share."""
    key_filter = answered_share(own, requested)
    if key_filter is None or key_filter == own:  # a leaf's tree is its share already
        digests = db.digest_children(node_ids)
    else:
        digests = db.filtered_digest_children(key_filter, node_ids)
    return DigestReply(
        digests=digests, filters=None if own is None else own.to_wire(),
        protocol=THIS_NODE.protocol, min_protocol=THIS_NODE.min_protocol,
        version=THIS_NODE.version,
    )


def requester_refusal(params: DigestParams) -> str | None:
    """Why a DIGEST_GET's sender cannot be answered (its protocol range misses ours), or None.
    A range that makes no sense is refused the same way."""
    who = params.sender_id or "requester"
    try:
        speaks = from_wire(params.protocol, params.min_protocol, params.version)
    except ValueError as exc:
        return f"peer {who}: {exc}"
    return agree(who, speaks).refused

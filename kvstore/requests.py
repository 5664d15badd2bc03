"""The requests a client sends, built in one place for the sync and the asyncio client (and
their answers read back): each function is one command of `if/KvStore.thrift`."""

from __future__ import annotations

import time
from collections.abc import Collection, Iterable, Mapping

from kvstore.gen.kvstore_thrift.ttypes import (
    Command,
    DigestParams,
    KeyDumpParams,
    KeyGetParams,
    KeySetParams,
    PeerAddParams,
    PeerDelParams,
    PeerSpec,
    Request,
    Response,
    Value,
)


def key_set(key_vals: Mapping[str, Value], solicit_response: bool) -> Request:
    """A client's KEY_SET, stamped with this host's wall clock (`timestamp_ms`): a set that
    waits in a queue (a paused or unreachable node) has the wait taken off its TTLs when it
    arrives (docs/kvstore.md, "Time in transit"), rather than starting the TTL afresh."""
    return Request(
        cmd=Command.KEY_SET,
        key_set=KeySetParams(key_vals=dict(key_vals), solicit_response=solicit_response,
                             node_ids=[], timestamp_ms=int(time.time() * 1000)),
    )


def key_get(keys: Iterable[str]) -> Request:
    return Request(cmd=Command.KEY_GET, key_get=KeyGetParams(keys=list(keys)))


def key_dump(prefix: str = "", originator_ids: Collection[str] = (), *,
             hashes_only: bool = False) -> Request:
    params = KeyDumpParams(prefix=prefix, originator_ids=set(originator_ids))
    return Request(cmd=Command.HASH_DUMP if hashes_only else Command.KEY_DUMP, key_dump=params)


def node_info() -> Request:
    return Request(cmd=Command.NODE_INFO)


def peer_dump() -> Request:
    return Request(cmd=Command.PEER_DUMP)


def peer_add(peers: Mapping[str, PeerSpec]) -> Request:
    return Request(cmd=Command.PEER_ADD, peer_add=PeerAddParams(peers=dict(peers)))


def peer_del(names: Iterable[str]) -> Request:
    return Request(cmd=Command.PEER_DEL, peer_del=PeerDelParams(peer_names=list(names)))


def counters() -> Request:
    return Request(cmd=Command.COUNTERS_GET)


def digest_get(node_ids: Iterable[int]) -> Request:
    return Request(cmd=Command.DIGEST_GET, digest=DigestParams(node_ids=list(node_ids)))


def key_vals_of(response: Response) -> dict[str, Value]:
    """The key-values of a KEY_GET / KEY_DUMP / HASH_DUMP answer."""
    return dict(response.publication.key_vals or {}) if response.publication else {}

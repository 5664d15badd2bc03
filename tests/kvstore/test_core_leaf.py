"""Leaf filters in the I/O-free cores, without sockets: the per-peer flood decision
(`kvstore.flood`), a leaf's admission of what it receives, the filtered digest tree and sync
difference (`kvstore.db`), and a whole filtered sync (`kvstore.node_sync`) driven in memory."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from kvmesh.node_config import build_run_config
from kvstore import wire
from kvstore.config import ConfigError, NodeConfig, load_config
from kvstore.db import KvStoreDb
from kvstore.filters import KeyFilter, filter_from_wire, leaf_filter
from kvstore.flood import FloodProtocol
from kvstore.gen.kvstore_thrift.ttypes import (
    DigestReply,
    KeyFilters,
    KeySetParams,
    Publication,
    Request,
    Response,
)
from kvstore.node_sync import SyncProtocolError, SyncSession
from kvstore.peers import INITIALIZED, PeerTable
from kvstore.ratelimit import FloodLimiter
from kvstore.value import TTL_INFINITY, Value, WireKeyVals

LEAF = leaf_filter("leaf", ["config/leaf/", "status/leaf/"], ["ops"])


def _v(version: int = 1, originator: str = "a", value: bytes = b"x") -> Value:
    return Value(version, originator, value, TTL_INFINITY, 0)


def _initialized_table(**filters: KeyFilter | None) -> PeerTable:
    table = PeerTable()
    for name, key_filter in filters.items():
        peer = table.add(name, 0)
        peer.state = INITIALIZED
        peer.key_filter = key_filter
    return table


def _mixed() -> dict[str, Value]:
    return {
        "config/leaf/a": _v(),
        "config/other/a": _v(),
        "status/leaf/x": _v(),
        "misc/by-ops": _v(originator="ops"),
        "misc/by-leaf": _v(originator="leaf"),
        "misc/by-b": _v(originator="b"),
    }


def test_leaf_filter_is_or_over_prefixes_and_originators_and_keeps_its_own() -> None:
    assert LEAF.matches("config/leaf/a", _v(originator="zz"))
    assert LEAF.matches("anything", _v(originator="ops"))
    assert LEAF.matches("anything", _v(originator="leaf"))  # what it originates
    assert not LEAF.matches("config/other/a", _v(originator="b"))
    assert sorted(LEAF.select(_mixed())) == [
        "config/leaf/a", "misc/by-leaf", "misc/by-ops", "status/leaf/x"
    ]
    assert filter_from_wire(LEAF.to_wire()) == LEAF
    assert filter_from_wire(None) is None
    with pytest.raises(ValueError, match="too many"):
        filter_from_wire(KeyFilters(key_prefixes=[f"p{i}" for i in range(300)]))


def test_flood_sends_a_leaf_peer_only_what_it_wants() -> None:
    db = KvStoreDb("b")
    delta = db.merge(_mixed(), 1).delta
    table = _initialized_table(full=None, leaf=LEAF)
    counters: Counter[str] = Counter()
    flooding = FloodProtocol("b", db, table, counters, max_clock_skew_ms=1000)
    assert flooding.wants("full", "config/other/a", _v(originator="b"))
    assert not flooding.wants("leaf", "config/other/a", _v(originator="b"))
    assert flooding.wants("leaf", "config/leaf/a", _v(originator="b"))
    sends = flooding.flood((), delta, (), 1, 1000)
    got = {}
    for send in sends:
        request = wire.decode_request(send.payload)
        assert request.key_set is not None
        for target in send.targets:
            got[target] = sorted(request.key_set.key_vals)
    assert got["full"] == sorted(_mixed())
    assert got["leaf"] == sorted(LEAF.select(_mixed()))
    assert counters["kvstore.leaf.flood_skipped_key_vals"] == 2


def test_finalize_towards_a_leaf_sends_only_its_share() -> None:
    db = KvStoreDb("b")
    db.merge(_mixed(), 1)
    flooding = FloodProtocol("b", db, _initialized_table(leaf=LEAF), Counter(),
                             max_clock_skew_ms=1000)
    sends = flooding.finalize("leaf", list(_mixed()), 1, 1000)
    request = wire.decode_request(sends[0].payload)
    assert request.key_set is not None
    assert sorted(request.key_set.key_vals) == sorted(LEAF.select(_mixed()))


def test_a_leaf_refuses_what_its_filters_do_not_match_and_counts_it() -> None:
    counters: Counter[str] = Counter()
    flooding = FloodProtocol("leaf", KvStoreDb("leaf"), PeerTable(), counters,
                             max_clock_skew_ms=1000, own_filter=LEAF)
    intake = flooding.receive(KeySetParams(key_vals=_mixed(), node_ids=["b"]), 1000)
    assert sorted(intake.key_vals) == sorted(LEAF.select(_mixed()))
    assert sorted(intake.refused) == ["config/other/a", "misc/by-b"]
    assert counters["kvstore.leaf.refused_key_vals"] == 2
    # A full node refuses nothing.
    full = FloodProtocol("b", KvStoreDb("b"), PeerTable(), Counter(), max_clock_skew_ms=1000)
    assert full.receive(KeySetParams(key_vals=_mixed(), node_ids=["x"]), 1000).refused == []


def _big_full_store(keys: int = 3000) -> KvStoreDb:
    db = KvStoreDb("full")
    kv = {f"config/n{i % 50}/k{i}": _v(originator="a") for i in range(keys)}
    kv.update({f"config/leaf/k{i}": _v(originator="a") for i in range(100)})
    kv.update({f"misc/ops{i}": _v(originator="ops") for i in range(10)})
    db.merge(kv, 1)
    return db


def test_filtered_digest_equals_the_digest_of_a_store_holding_only_the_share() -> None:
    full = _big_full_store()
    leaf = KvStoreDb("leaf")
    leaf.merge(LEAF.select(full.dump(1)), 1)
    assert len(leaf) == 110
    assert full.filtered_root_digest(LEAF) == leaf.root_digest() != full.root_digest()
    # Kept current as the full store changes (changes outside the share do not count).
    full.merge({"config/leaf/new": _v(), "config/n1/new": _v()}, 2)
    assert full.filtered_root_digest(LEAF) != leaf.root_digest()
    leaf.merge({"config/leaf/new": _v()}, 2)
    assert full.filtered_root_digest(LEAF) == leaf.root_digest()


def test_filtered_difference_neither_sends_nor_asks_for_keys_outside_the_share() -> None:
    full = _big_full_store()
    theirs = {"config/leaf/k1": _v(version=2), "config/other/zz": _v(originator="b")}
    hashes = KvStoreDb("leaf")
    hashes.merge(theirs, 1)
    send, want = full.dump_difference(hashes.hash_dump(1), 1, key_filter=LEAF)
    assert want == ["config/leaf/k1"]
    assert len(send) == 109 and all(LEAF.matches(k, v) for k, v in send.items())


class _Responder:
    """A node's DIGEST_GET and KEY_DUMP answers (kvstore.node), on a bare store."""

    def __init__(self, db: KvStoreDb, own: KeyFilter | None) -> None:
        self.db = db
        self.own = own

    def answer(self, request: Request) -> Response:
        if request.digest is not None:
            asked = filter_from_wire(request.digest.filters)
            key_filter = self.own or asked
            digests = (self.db.digest_children(request.digest.node_ids)
                       if key_filter is None or key_filter == self.own
                       else self.db.filtered_digest_children(key_filter, request.digest.node_ids))
            filters = None if self.own is None else self.own.to_wire()
            return Response(digest=DigestReply(digests=digests, filters=filters))
        params = request.key_dump
        assert params is not None and params.key_val_hashes is not None
        key_filter = self.own or filter_from_wire(params.filters)
        send, want = self.db.dump_difference(
            params.key_val_hashes, 1, buckets=params.buckets, key_filter=key_filter
        )
        return Response(publication=Publication(key_vals=send, tobe_updated_keys=want))


def _sync(session: SyncSession, responder: _Responder, requester_filter: KeyFilter | None
          ) -> tuple[int, int]:
    """Run a session to its end in memory; (requests sent, keys merged)."""
    merged = 0
    corr = 0
    while not session.finished:
        for phase, request in session.next_requests(1):
            corr += 1
            key = corr.to_bytes(8, "big")
            session.sent(key, phase)
            reply = responder.answer(request)
            if phase == SyncSession.DIGEST:
                session.on_digest_reply(key, reply)
            else:
                publication = session.on_dump_reply(key, reply)
                key_vals = WireKeyVals(dict(publication.key_vals))
                if requester_filter is not None:
                    key_vals = WireKeyVals(requester_filter.select(key_vals))
                merged += len(session.db.merge(key_vals, 1).delta)
    finals = session.db.get(session.tobe_updated, 1)
    if session.peer_filter is not None:
        finals = session.peer_filter.select(finals)
    responder.db.merge(finals, 1)
    return session.requests_sent, merged


def test_a_leaf_syncs_only_its_share_in_proportion_to_the_difference() -> None:
    full = _big_full_store()
    leaf = KvStoreDb("leaf")
    session = SyncSession("full", "leaf", leaf, started_ms=1, buckets_per_request=4096,
                          own_filter=LEAF)
    _sync(session, _Responder(full, None), LEAF)
    assert sorted(leaf.dump(1)) == sorted(LEAF.select(full.dump(1)))
    # One key changes on each side: the next sync touches about two buckets.
    full.merge({"config/leaf/k5": _v(version=3), "config/n3/k3": _v(version=3)}, 2)
    leaf.merge({"status/leaf/s": _v(originator="leaf")}, 2)
    session = SyncSession("full", "leaf", leaf, started_ms=1, buckets_per_request=4096,
                          own_filter=LEAF)
    _sync(session, _Responder(full, None), LEAF)
    assert session.differing_buckets <= 2
    assert full.get(["status/leaf/s"], 2) and leaf.get(["config/leaf/k5"], 2)[
        "config/leaf/k5"].version == 3
    assert full.filtered_root_digest(LEAF) == leaf.root_digest()


def test_a_full_node_syncing_a_leaf_learns_its_filters_and_compares_only_its_share() -> None:
    full = _big_full_store()
    leaf = KvStoreDb("leaf")
    leaf.merge({"status/leaf/s": _v(originator="leaf")}, 1)
    session = SyncSession("leaf", "full", full, started_ms=1, buckets_per_request=4096)
    _sync(session, _Responder(leaf, LEAF), None)
    assert session.peer_filter == LEAF
    assert full.get(["status/leaf/s"], 1)
    assert sorted(leaf.dump(1)) == sorted(LEAF.select(full.dump(1)))
    assert full.filtered_root_digest(LEAF) == leaf.root_digest()


def test_two_leaves_do_not_sync() -> None:
    session = SyncSession("other", "leaf", KvStoreDb("leaf"), started_ms=1,
                          buckets_per_request=4096, own_filter=LEAF)
    other = leaf_filter("other", ["config/other/"], [])
    with pytest.raises(SyncProtocolError, match="is a leaf too"):
        _sync(session, _Responder(KvStoreDb("other"), other), LEAF)


def test_a_peer_that_is_no_longer_a_leaf_gets_everything_again() -> None:
    full = _big_full_store(200)
    session = SyncSession("was-leaf", "full", full, started_ms=1, buckets_per_request=4096,
                          peer_filter=LEAF)
    _sync(session, _Responder(KvStoreDb("was-leaf"), None), None)
    assert session.peer_filter is None


def test_leaf_configuration_from_toml_and_flags(tmp_path: Path) -> None:
    path = tmp_path / "node.toml"
    path.write_text('leaf = true\nkey_prefix_filters = ["config/x/"]\n'
                    'key_originator_filters = ["ops"]\n')
    config = load_config(path).with_overrides(name="x")
    assert config.leaf_filter == leaf_filter("x", ["config/x/"], ["ops"])
    assert NodeConfig(name="y").leaf_filter is None
    path.write_text('key_prefix_filters = ["config/x/"]\n')
    with pytest.raises(ConfigError, match="needs leaf = true"):
        load_config(path)
    path.write_text('leaf = true\n[peers]\na = "tcp://127.0.0.1:1"\nb = "tcp://127.0.0.1:2"\n')
    assert load_config(path).leaf  # dual-homed: two core peers
    path.write_text('leaf = true\n[peers]\na = "tcp://127.0.0.1:1"\nb = "tcp://127.0.0.1:2"\n'
                    'c = "tcp://127.0.0.1:3"\n')
    with pytest.raises(ConfigError, match="takes at most 2"):
        load_config(path).with_overrides(name="x")
    # `node run --agent --leaf` without filters keeps what the agent needs; flags win.
    def filters(**flags: object) -> tuple[str, ...]:
        run = build_run_config(None, {"name": "n1", "ephemeral": True, **flags})
        return run.node.key_prefix_filters

    assert filters(leaf=True, **{"agent.enabled": True}) == (
        "config/n1/", "status/n1/", "node/n1/", "revision/n1/")
    assert filters(leaf=True, key_prefix_filters=("config/n1/",),
                   **{"agent.enabled": True}) == ("config/n1/",)
    assert filters(**{"agent.enabled": True}) == ()


def test_a_rate_limited_release_sends_a_leaf_only_its_share_with_wire_ttls() -> None:
    db = KvStoreDb("b")
    table = _initialized_table(full=None, leaf=LEAF)
    limiter = FloodLimiter(db, 1, 1, 0)  # one publication per second
    flooding = FloodProtocol("b", db, table, Counter(), max_clock_skew_ms=1000, limiter=limiter)
    first = db.merge({"config/leaf/1": _v()}, 0).delta
    assert flooding.flood(("x",), first, (), 0, 1000)
    finite = {"config/leaf/2": Value(1, "a", b"v", 10_000, 0), "config/other/2": _v()}
    assert flooding.flood(("x",), db.merge(finite, 0).delta, (), 10, 1000) == []  # buffered
    sends = flooding.poll(1_010, 2000)
    got = {}
    for send in sends:
        request = wire.decode_request(send.payload)
        assert request.key_set is not None
        for target in send.targets:
            got[target] = request.key_set.key_vals
    assert sorted(got["full"]) == ["config/leaf/2", "config/other/2"]
    assert sorted(got["leaf"]) == ["config/leaf/2"]
    assert got["leaf"]["config/leaf/2"].ttl_ms == got["full"]["config/leaf/2"].ttl_ms == 8_989

"""The flood protocol's decisions (`kvstore.flood`), without sockets: events in, decisions out."""

from __future__ import annotations

import random
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from kvstore import wire
from kvstore.db import KvStoreDb
from kvstore.flood import KEYS_PER_MESSAGE, FloodProtocol, IngestBatch, Send, encode_key_set
from kvstore.forward import MIN_FORWARD_KEYS, Received
from kvstore.gen.kvstore_thrift.ttypes import KeySetParams, Request
from kvstore.hashing import value_hash
from kvstore.peers import PeerTable
from kvstore.ratelimit import FloodLimiter
from kvstore.value import TTL_INFINITY, NoMergeReason, Value

WALL = 1_700_000_000_000  # the wall clock passed in


def value(version: int = 1, payload: bytes = b"v", ttl: int = TTL_INFINITY) -> Value:
    return Value(version, "src", payload, ttl, 0, value_hash(version, "src", payload))


def protocol(
    peers: dict[str, str] | None = None, limiter: bool = False, name: str = "me"
) -> FloodProtocol:
    """A node `name` whose peers are in the given states ("up": INITIALIZED, "sync": SYNCING)."""
    db = KvStoreDb(name, ttl_decrement_ms=1, ttl_threshold_ms=500)
    table = PeerTable(initial_backoff_ms=100, max_backoff_ms=1000, rng=random.Random(1))
    for peer, state in (peers or {}).items():
        table.add(peer, 0)
        if state in ("up", "sync"):
            started = {p.name: p for p in table.start_syncs(0)}
            if state == "up":
                table.sync_succeeded(peer, started[peer].sync_id, 0)
    counters: Counter[str] = Counter()
    rate = FloodLimiter(db, 1, 1, 0) if limiter else None
    return FloodProtocol(name, db, table, counters, max_clock_skew_ms=1000, limiter=rate)


def received(key_vals: dict[str, Value], path: list[str], timestamp: int | None = None,
             solicit: bool = False) -> tuple[bytes, Request]:
    """A KEY_SET as a peer sends it, and the same decoded (fresh objects, as off the wire)."""
    payload = wire.encode(Request(cmd=1, key_set=KeySetParams(
        key_vals=key_vals, solicit_response=solicit, node_ids=path, timestamp_ms=timestamp)))
    return payload, wire.decode_request(payload)


def params_of(request: Request) -> KeySetParams:
    assert request.key_set is not None
    return request.key_set


def decode_send(send: Send) -> KeySetParams:
    return params_of(wire.decode_request(send.payload))


# ---------------------------------------------------------------------- receiving


def test_a_publication_that_went_round_a_loop_is_counted_and_not_merged() -> None:
    core = protocol()
    _payload, request = received({"k": value()}, ["a", "me", "b"])
    intake = core.receive(params_of(request), WALL)
    assert intake.looped and intake.path == ("a", "me", "b")
    assert core.counters["kvstore.looped_publications"] == 1
    assert core.counters["kvstore.received_publications"] == 1
    assert core.counters["kvstore.received_key_vals"] == 1


def test_a_clients_set_has_no_path_and_is_not_a_received_publication() -> None:
    core = protocol()
    _payload, request = received({"k": value()}, [])
    intake = core.receive(params_of(request), WALL)
    assert not intake.looped and intake.path == ()
    assert list(intake.key_vals) == ["k"]
    assert core.counters["kvstore.received_publications"] == 0


def test_time_in_transit_is_charged_by_the_clock_passed_in() -> None:
    core = protocol()
    key_vals = {"short": value(ttl=300), "long": value(ttl=10_000), "inf": value()}
    _payload, request = received(key_vals, ["a"], timestamp=WALL - 400)
    intake = core.receive(params_of(request), WALL)
    assert intake.expired == ["short"]
    assert intake.key_vals["long"].ttl_ms == 9_600
    assert intake.key_vals["inf"].ttl_ms == TTL_INFINITY
    assert "short" not in intake.key_vals
    assert core.counters["kvstore.ttl.expired_in_transit"] == 1
    assert core.counters["kvstore.ttl.transit_age_ms_max"] == 400


def test_a_sender_clock_ahead_is_counted_and_charges_nothing() -> None:
    core = protocol()
    _payload, request = received({"k": value(ttl=10_000)}, ["a"], timestamp=WALL + 5_000)
    intake = core.receive(params_of(request), WALL)
    assert intake.key_vals["k"].ttl_ms == 10_000
    assert core.counters["kvstore.ttl.clock_ahead"] == 1


def test_merged_counts_redundant_publications_and_names_a_diverged_sender() -> None:
    core = protocol()
    db = core.db
    db.merge({"k": value(2)}, 0)
    stale = {"k": value(1)}
    result = db.merge(stale, 0)
    assert core.merged(("a", "b"), result, [stale]) is None
    assert core.counters["kvstore.received_redundant_publications"] == 1
    # A TTL update for a version we do not hold: the sender (last hop) holds what we missed.
    mismatch = {"k": Value(3, "src", None, 5_000, 1)}
    result = db.merge(mismatch, 0)
    assert result.no_merge == {"k": NoMergeReason.TTL_UPDATE_MISMATCH}
    assert core.merged(("a", "b"), result, [mismatch]) == "b"
    assert core.merged((), result, []) is None  # a client: nobody to resync


# ---------------------------------------------------------------------- sending


def test_flood_targets_initialized_peers_off_the_path_and_syncing_peers_remember() -> None:
    core = protocol({"a": "up", "b": "up", "c": "sync", "d": "idle"})
    delta = core.db.merge({"k": value(ttl=5_000)}, 0).delta
    sends = core.flood(("a",), delta, (), 0, WALL)
    assert [send.targets for send in sends] == [["b"]]
    params = decode_send(sends[0])
    assert params.node_ids == ["a", "me"] and params.timestamp_ms == WALL
    assert params.solicit_response is False
    assert core.table["c"].pending_keys == {"k"}


def test_flood_sends_the_hop_ttl_and_drops_keys_about_to_expire() -> None:
    core = protocol({"b": "up"})
    delta = core.db.merge({"k": value(ttl=5_000), "soon": value(ttl=400)}, 0).delta
    sends = core.flood((), delta, (), 100, WALL)
    assert {k: v.ttl_ms for k, v in decode_send(sends[0]).key_vals.items()} == {"k": 4_899}
    assert sends[0].key_count == 1


def test_nothing_is_sent_without_a_target() -> None:
    core = protocol({"a": "up"})
    delta = core.db.merge({"k": value()}, 0).delta
    assert core.flood(("a",), delta, (), 0, WALL) == []


def test_a_peer_publication_stored_as_received_goes_on_as_its_bytes() -> None:
    core = protocol({"a": "up", "b": "up"})
    key_vals = {f"k/{i}": value() for i in range(MIN_FORWARD_KEYS)}
    payload, request = received(key_vals, ["a"], timestamp=WALL - 1)
    intake = core.receive(params_of(request), WALL)
    message = Received(payload, request)
    delta = core.db.merge_decoded(intake.key_vals, 0).delta
    sends = core.flood(intake.path, delta, [message], 0, WALL)
    assert len(sends) == 1 and sends[0].targets == ["b"]
    assert sends[0].payload[:100] == payload[:100]  # the received entries' bytes, not re-encoded
    params = decode_send(sends[0])
    assert params.key_vals == key_vals and params.node_ids == ["a", "me"]
    assert params.timestamp_ms == WALL
    assert core.counters["kvstore.flood.forwarded_publications"] == 1


def test_finite_ttls_and_small_publications_are_reencoded() -> None:
    for key_vals in ({f"k/{i}": value(ttl=60_000) for i in range(MIN_FORWARD_KEYS)},
                     {f"k/{i}": value() for i in range(MIN_FORWARD_KEYS - 1)}):
        core = protocol({"a": "up", "b": "up"})
        payload, request = received(key_vals, ["a"])
        intake = core.receive(params_of(request), WALL)
        delta = core.db.merge_decoded(intake.key_vals, 0).delta
        sends = core.flood(intake.path, delta, [Received(payload, request)], 0, WALL)
        assert core.counters["kvstore.flood.forwarded_publications"] == 0
        assert set(decode_send(sends[0]).key_vals) == set(key_vals)


def test_the_rate_limiter_holds_back_and_poll_releases_to_every_peer() -> None:
    core = protocol({"a": "up", "b": "up"}, limiter=True)  # 1 publication per second
    first = core.db.merge({"k1": value()}, 0).delta
    assert len(core.flood(("a",), first, (), 0, WALL)) == 1
    second = core.db.merge({"k2": value()}, 0).delta
    assert core.flood(("a",), second, (), 10, WALL) == []  # no token: buffered
    assert core.poll(500, WALL) == []
    sends = core.poll(1_010, WALL)
    assert [send.targets for send in sends] == [["a", "b"]]  # a buffer mixes paths
    assert decode_send(sends[0]).node_ids == ["me"]


def test_finalize_sends_current_values_in_bounded_sets_from_this_node() -> None:
    core = protocol({"b": "up"})
    n = KEYS_PER_MESSAGE + 5
    core.db.merge({f"k/{i}": value(ttl=10_000) for i in range(n)}, 0)
    core.db.merge({"soon": value(ttl=450)}, 0)
    sends = core.finalize("b", [*(f"k/{i}" for i in range(n)), "soon", "gone"], 0, WALL)
    assert [send.key_count for send in sends] == [KEYS_PER_MESSAGE, 5]
    params = decode_send(sends[0])
    assert params.sender_id == "me" and params.node_ids == ["me"]
    assert {v.ttl_ms for v in params.key_vals.values()} == {9_999}


def test_encode_key_set_is_what_receive_reads() -> None:
    core = protocol()
    payload = encode_key_set({"k": value()}, ["x", "y"], WALL - 5)
    intake = core.receive(params_of(wire.decode_request(payload)), WALL)
    assert intake.path == ("x", "y") and list(intake.key_vals) == ["k"]


# ---------------------------------------------------------------------- batching

key_sets = st.lists(
    st.tuples(
        st.sampled_from([(), ("a",), ("b",)]),
        st.dictionaries(st.sampled_from([f"k{i}" for i in range(6)]),
                        st.tuples(st.integers(1, 4), st.sampled_from([b"x", b"y"])),
                        min_size=1, max_size=4),
    ),
    max_size=12,
)


@settings(max_examples=200, deadline=None)
@given(key_sets)
def test_ingest_batching_merges_like_one_set_at_a_time(
    sets: list[tuple[tuple[str, ...], dict[str, tuple[int, bytes]]]],
) -> None:
    """Whatever the sets, batching them (`IngestBatch`) leaves the store as merging each in
    turn would, and a batch only ever holds one path and key-disjoint sets."""
    one_by_one, batched = KvStoreDb("x"), KvStoreDb("y")
    core = protocol()
    batch = IngestBatch()
    for path, entries in sets:
        key_vals = {k: value(version, payload) for k, (version, payload) in entries.items()}
        one_by_one.merge(key_vals, 0)
        _payload, request = received(key_vals, list(path))
        intake = core.receive(params_of(request), WALL)
        if not batch.fits(intake):
            assert batch.path != intake.path or not batch.key_vals.keys().isdisjoint(
                intake.key_vals)
            _path, taken, _messages = batch.take()
            batched.merge_decoded(taken, 0)
        batch.add(intake, None)
    _path, taken, _messages = batch.take()
    batched.merge_decoded(taken, 0)
    assert batched.dump(0) == one_by_one.dump(0)
    assert len(batch) == 0

"""Unit tests of the node's pure parts: configuration, wire codec, the sync step machine."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvstore import wire
from kvstore.config import ConfigError, NodeConfig, PeerAddress, load_config, parse_peer
from kvstore.db import KvStoreDb
from kvstore.gen.kvstore_thrift.ttypes import (
    Command,
    DigestReply,
    KeySetParams,
    Publication,
    Request,
    Response,
    Value,
)
from kvstore.node_sync import SyncProtocolError, SyncSession

# ---------------------------------------------------------------------- config


def test_defaults_are_valid() -> None:
    config = load_config(None)
    assert config.ttl_decrement_ms == 1
    assert config.ttl_threshold_ms == 500
    assert config.flood_msg_per_sec == 0


def test_toml_file_overrides_defaults(tmp_path: Path) -> None:
    path = tmp_path / "node.toml"
    path.write_text(
        'name = "n1"\nttl_decrement_ms = 5\nsync_interval_s = 2.5\n'
        'flood_msg_per_sec = 100\nflood_msg_burst = 10\n'
        '[peers]\nn2 = "tcp://10.0.0.2:60002,tcp://10.0.0.2:60001"\n'
    )
    config = load_config(path)
    assert (config.name, config.ttl_decrement_ms, config.sync_interval_s) == ("n1", 5, 2.5)
    assert config.peers == {"n2": PeerAddress("tcp://10.0.0.2:60002", "tcp://10.0.0.2:60001")}


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ("zmq_hwm = 0\n", "zmq_hwm"),
        ("sync_max_backoff_ms = 10\nsync_initial_backoff_ms = 20\n", "sync_max_backoff_ms"),
        ("cmd_url = 'localhost:1'\n", "cmd_url"),
        ("peers = 3\n", "peers"),
        ("name = 5\n", "name"),
        ("[peers]\nx = 5\n", "peers.x"),
    ],
)
def test_invalid_values_name_the_key(tmp_path: Path, content: str, needle: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(content)
    with pytest.raises(ConfigError, match=needle):
        load_config(path)


def test_overrides_are_validated() -> None:
    config = NodeConfig().with_overrides(name="x", cmd_url=None)
    assert config.name == "x" and config.cmd_url == NodeConfig().cmd_url
    with pytest.raises(ConfigError, match="itself"):
        NodeConfig().with_overrides(name="x", peers={"x": PeerAddress("tcp://1.2.3.4:5")})


def test_parse_peer() -> None:
    assert parse_peer("b=tcp://h:1") == ("b", PeerAddress("tcp://h:1", ""))
    assert parse_peer("b=tcp://h:1,tcp://h:2") == ("b", PeerAddress("tcp://h:1", "tcp://h:2"))
    for bad in ("b", "=tcp://h:1", "b="):
        with pytest.raises(ValueError, match="NAME=CMD_URL"):
            parse_peer(bad)


# ---------------------------------------------------------------------- wire


def test_request_round_trip() -> None:
    request = Request(
        cmd=Command.KEY_SET,
        key_set=KeySetParams(
            key_vals={"k": Value(3, "o", b"\x00\xff", 1234, 2, -5)},
            solicit_response=False,
            node_ids=["a", "b"],
        ),
    )
    decoded = wire.decode_request(wire.encode(request))
    assert decoded == request
    assert type(decoded.key_set.key_vals["k"].value) is bytes


def test_decode_errors_are_decode_errors() -> None:
    with pytest.raises(wire.DecodeError):
        wire.decode_request(b"")
    with pytest.raises(wire.DecodeError):
        wire.decode_publication(b"\x0f\x00\x02\x0b\x7f\xff\xff\xff")  # huge list claim


def test_decode_limit_bounds_strings() -> None:
    data = wire.encode(Publication(key_vals={"k" * 100: Value(1, "o", b"v")}))
    assert wire.decode_publication(data, limit=1000).key_vals
    with pytest.raises(wire.DecodeError):
        wire.decode_publication(data, limit=50)


def test_error_response() -> None:
    response = wire.decode_response(wire.error_response(wire.BAD_ARGUMENT, "why"))
    assert response.error is not None
    assert (response.error.code, response.error.message) == ("BAD_ARGUMENT", "why")
    assert wire.decode_response(wire.OK_RESPONSE) == Response()


# ---------------------------------------------------------------------- sync step machine


def serve(responder: KvStoreDb, request: Request, now: int) -> Response:
    """What a node's command socket answers (the subset a sync uses)."""
    if request.cmd == Command.DIGEST_GET:
        assert request.digest is not None
        digests = responder.digest_children(request.digest.node_ids)
        return Response(digest=DigestReply(digests=digests))
    assert request.cmd == Command.KEY_DUMP and request.key_dump is not None
    params = request.key_dump
    send, want = responder.dump_difference(
        params.key_val_hashes, now, buckets=params.buckets
    )
    return Response(publication=Publication(key_vals=send, tobe_updated_keys=want))


def run_sync(requester: KvStoreDb, responder: KvStoreDb, now: int = 0) -> SyncSession:
    """Drive a session to the end, delivering messages in order; merge as the node does."""
    session = SyncSession(
        "peer", "me", requester, started_ms=now, buckets_per_request=3, window=2
    )
    corr = 0
    while not session.finished:
        outgoing = session.next_requests(now)
        assert outgoing, "a session that is not finished must have something in flight"
        sent = []
        for phase, request in outgoing:
            corr += 1
            tag = corr.to_bytes(8, "big")
            session.sent(tag, phase)
            sent.append((tag, phase, wire.decode_request(wire.encode(request))))
        for tag, phase, request in sent:
            response = serve(responder, request, now)
            if phase == SyncSession.DIGEST:
                session.on_digest_reply(tag, response)
            else:
                publication = session.on_dump_reply(tag, response)
                requester.merge(publication.key_vals, now)
    # Finalize: the requester sends back what the responder asked for.
    responder.merge(requester.get(session.tobe_updated, now), now)
    return session


def v(version: int, originator: str, value: bytes) -> Value:
    return Value(version, originator, value)


def test_reference_full_sync_case() -> None:
    a, b = KvStoreDb("a"), KvStoreDb("b")
    a.merge({"k0": v(5, "a", b"0"), "k1": v(1, "a", b"1"), "k2": v(9, "a", b"2"),
             "k3": v(1, "a", b"3")}, 0)
    b.merge({"k1": v(1, "a", b"1"), "k2": v(1, "b", b"2"), "k3": v(9, "b", b"3"),
             "k4": v(6, "b", b"4")}, 0)
    run_sync(a, b)
    expected = {"k0": (5, "a"), "k1": (1, "a"), "k2": (9, "a"), "k3": (9, "b"), "k4": (6, "b")}
    for db in (a, b):
        assert {k: (x.version, x.originator_id) for k, x in db.dump(0).items()} == expected
    assert a.root_digest() == b.root_digest()


def test_walk_visits_only_differing_buckets() -> None:
    a, b = KvStoreDb("a"), KvStoreDb("b")
    common = {f"key/{i}": v(1, "x", b"v%d" % i) for i in range(2000)}
    a.merge(dict(common), 0)
    b.merge({k: Value(x.version, x.originator_id, x.value) for k, x in common.items()}, 0)
    b.merge({"key/7": v(2, "y", b"newer"), "only-b": v(1, "y", b"b")}, 0)
    session = run_sync(a, b)
    assert session.differing_buckets == len({a.bucket_of("key/7"), a.bucket_of("only-b")})
    assert session.keys_received == 2
    assert a.dump(0).keys() == b.dump(0).keys()
    assert a.root_digest() == b.root_digest()


def test_identical_stores_need_one_round_trip() -> None:
    a, b = KvStoreDb("a"), KvStoreDb("b")
    for db in (a, b):
        db.merge({"k": v(1, "o", b"v")}, 0)
    session = run_sync(a, b)
    assert session.requests_sent == 1
    assert session.differing_buckets == 0


def test_big_difference_is_chunked() -> None:
    a, b = KvStoreDb("a"), KvStoreDb("b")
    b.merge({f"k{i}": v(1, "o", b"x") for i in range(40)}, 0)
    session = run_sync(a, b)
    assert len(a) == 40
    # 4 digest levels, then ceil(differing / 3) bucket requests.
    assert session.requests_sent == 4 + -(-session.differing_buckets // 3)


def test_replies_must_match_their_request() -> None:
    a = KvStoreDb("a")
    session = SyncSession("p", "me", a, started_ms=0, buckets_per_request=10)
    [(phase, _request)] = session.next_requests(0)
    session.sent(b"1", phase)
    with pytest.raises(SyncProtocolError):
        session.on_dump_reply(b"1", Response(publication=Publication()))
    session.sent(b"2", SyncSession.DIGEST)
    with pytest.raises(SyncProtocolError):
        session.on_digest_reply(b"2", Response())

"""Hostile input against real node processes: invalid UTF-8, forged hashes (issue 12)."""

from __future__ import annotations

import zmq

from kvstore import wire
from kvstore.client import connect_socket, make_value
from kvstore.gen.kvstore_thrift.ttypes import (
    Command,
    KeySetParams,
    PeerAddParams,
    PeerSpec,
    Request,
    Value,
)
from kvstore.hashing import value_hash
from kvstore.value import TTL_INFINITY
from tests.kvstore.conftest import Mesh, wait_for_value
from tests.kvstore.test_cli_kvstore import cli, cli_json


def _key_set_bytes(key_vals: dict[str, Value], *, one_way: bool = False, **fields: object) -> bytes:
    request = Request(
        cmd=Command.KEY_SET,
        key_set=KeySetParams(key_vals=key_vals, solicit_response=not one_way, **fields),
    )
    return wire.encode(request)


def test_invalid_utf8_key_or_originator_is_refused_and_nothing_stored(mesh: Mesh) -> None:
    node = mesh.start(mesh.allocate("utf8"))
    # Placeholders of the right length, swapped for invalid UTF-8 in the encoded bytes.
    solicited = _key_set_bytes(
        {"KK": make_value(b"1", version=1, originator_id="good"),
         "ok": make_value(b"2", version=1, originator_id="OOOO")}
    )
    solicited = solicited.replace(b"KK", b"k\xff").replace(b"OOOO", b"\xff\xfeme")
    one_way = _key_set_bytes(
        {"KK": make_value(b"3", version=1, originator_id="good")}, one_way=True
    ).replace(b"KK", b"k\xfe")
    dealer = connect_socket(zmq.Context.instance(), zmq.DEALER, node.cmd_url)
    try:
        dealer.send_multipart([b"", one_way])
        # On the same connection, so it is handled after the one-way set.
        dealer.send_multipart([b"", solicited])
        assert dealer.poll(5000), "no reply"
        response = wire.decode_response(dealer.recv_multipart()[-1])
    finally:
        dealer.close(linger=0)
    assert response.no_merge_reasons == {"k\ufffd": "MALFORMED", "ok": "INVALID_ORIGINATOR"}
    with node.client() as client:
        assert client.dump() == {}  # neither k\xff nor k\xfe, nor "ok"
        peer_add = wire.encode(Request(cmd=Command.PEER_ADD, peer_add=PeerAddParams(
            peers={"PP": PeerSpec(cmd_url="tcp://127.0.0.1:1")}))).replace(b"PP", b"p\xff")
        error = client.request_raw(peer_add).error
        assert error is not None and error.code == wire.BAD_ARGUMENT, error
        assert client.peers() == {}
        counters = client.counters()
        assert counters["kvstore.no_merge.MALFORMED"] == 2
        assert counters["kvstore.no_merge.INVALID_ORIGINATOR"] == 1


def test_forged_hash_cannot_hide_a_difference(mesh: Mesh) -> None:
    p, q = mesh.start(mesh.allocate("p")), mesh.start(mesh.allocate("q"))
    with q.client() as client:
        client.set({"div/k1": make_value(b"BBBB", version=1, originator_id="o")})
    forged = Value(1, "o", b"AAAA", TTL_INFINITY, 0, value_hash(1, "o", b"BBBB"))
    with p.client() as client:
        client.request_raw(_key_set_bytes({"div/k1": forged}, node_ids=["x"]))
        assert client.get(["div/k1"])["div/k1"].value == b"AAAA"
    # The stores differ: neither signature nor compare may say otherwise.
    assert cli_json("signature", url=p.cmd_url) != cli_json("signature", url=q.cmd_url)
    differing = cli_json("compare", p.cmd_url, q.cmd_url, url=p.cmd_url)
    assert set(differing) == {"div/k1"}
    # Peered, the two converge on the better value (same version and originator: BBBB > AAAA).
    with p.client() as client:
        client.add_peer("q", q.cmd_url)
    with q.client() as client:
        client.add_peer("p", p.cmd_url)
    wait_for_value([p, q], "div/k1", lambda v: v is not None and v.value == b"BBBB")
    assert cli_json("signature", url=p.cmd_url) == cli_json("signature", url=q.cmd_url)
    assert "in sync" in cli("compare", p.cmd_url, q.cmd_url).stdout


def test_peer_add_is_all_or_nothing_when_a_connect_fails(mesh: Mesh) -> None:
    node = mesh.start(mesh.allocate("aon"))
    with node.client() as client:
        client.add_peer("kept", "tcp://127.0.0.1:1")
        request = Request(cmd=Command.PEER_ADD, peer_add=PeerAddParams(peers={
            "new1": PeerSpec(cmd_url="tcp://127.0.0.1:2"),
            "kept": PeerSpec(cmd_url="tcp://127.0.0.1:3"),  # a replacement, rolled back too
            "broken": PeerSpec(cmd_url="tcp://no-port-here"),  # ZeroMQ refuses the endpoint
        }))
        error = client.request_raw(wire.encode(request)).error
        assert error is not None and error.code == wire.BAD_ARGUMENT
        assert "nothing was added" in error.message
        peers = client.peers()
        assert set(peers) == {"kept"} and peers["kept"].cmd_url == "tcp://127.0.0.1:1"

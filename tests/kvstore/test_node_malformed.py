"""Bad input of every kind on the command socket: an error reply and a counter, never a crash."""

from __future__ import annotations

import struct
from collections.abc import Iterator

import pytest
import zmq

from kvstore import wire
from kvstore.client import make_value
from kvstore.gen.kvstore_thrift.ttypes import (
    Command,
    DigestParams,
    KeyDumpParams,
    KeyGetParams,
    KeySetParams,
    Request,
    Response,
    Value,
)
from tests.kvstore.conftest import Mesh, Node

CAP = 64 * 1024


@pytest.fixture
def node(mesh: Mesh) -> Node:
    n = mesh.start(mesh.allocate("victim", max_message_bytes=CAP))
    with n.client() as client:
        client.set({"precious": make_value(b"keep me", version=3, originator_id="victim")})
    return n


@pytest.fixture
def dealer(node: Node) -> Iterator[zmq.Socket[bytes]]:
    sock: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVTIMEO, 5000)
    sock.connect(node.cmd_url)
    try:
        yield sock
    finally:
        sock.close(linger=0)


def exchange(sock: zmq.Socket[bytes], frames: list[bytes]) -> list[bytes]:
    sock.send_multipart(frames)
    return sock.recv_multipart()


def error_code(reply_frames: list[bytes]) -> str | None:
    response = wire.decode_response(reply_frames[-1])
    return response.error.code if response.error else None


def thrift_field_header(ttype: int, field_id: int) -> bytes:
    return struct.pack(">bh", ttype, field_id)


encoded = wire.encode

# (description, frames after the DEALER's own envelope, expected error code)
BAD_INPUTS: list[tuple[str, list[bytes], str]] = [
    ("no delimiter, one frame", [wire.encode(Request(cmd=Command.NODE_INFO))], wire.MALFORMED),
    ("delimiter not empty", [b"x", wire.encode(Request(cmd=Command.NODE_INFO))], wire.MALFORMED),
    ("too many frames", [b"e"] * 30 + [b"", b"p"], wire.MALFORMED),
    ("empty payload", [b"", b""], wire.MALFORMED),
    ("garbage payload", [b"", b"\xff\xfe\xfd garbage \x00\x01"], wire.MALFORMED),
    (
        "truncated request",
        [b"", encoded(Request(cmd=Command.KEY_GET, key_get=KeyGetParams(keys=["a" * 50])))[:-9]],
        wire.MALFORMED,
    ),
    (
        "container length beyond any cap",
        # Request.key_get (struct) -> keys: list<string> claiming 2**31-1 elements.
        [
            b"",
            thrift_field_header(12, 3)
            + thrift_field_header(15, 1)
            + struct.pack(">bi", 11, 2**31 - 1),
        ],
        wire.MALFORMED,
    ),
    ("unknown command", [b"", wire.encode(Request(cmd=99))], wire.UNKNOWN_COMMAND),
    # cmd sent as a string: Thrift skips the mistyped field, so there is no command at all.
    (
        "command of the wrong type",
        [b"", thrift_field_header(11, 1) + struct.pack(">i", 3) + b"GET" + b"\x00"],
        wire.UNKNOWN_COMMAND,
    ),
    ("KEY_GET without params", [b"", wire.encode(Request(cmd=Command.KEY_GET))], wire.BAD_ARGUMENT),
    ("KEY_SET without params", [b"", wire.encode(Request(cmd=Command.KEY_SET))], wire.BAD_ARGUMENT),
    (
        "KEY_SET params of the wrong type",
        # key_set (field 2) sent as an i32 instead of a struct: skipped, so missing.
        [b"", wire.encode(Request(cmd=Command.KEY_SET))[:-1] + thrift_field_header(8, 2)
         + struct.pack(">i", 7) + b"\x00"],
        wire.BAD_ARGUMENT,
    ),
    ("PEER_ADD without params", [b"", encoded(Request(cmd=Command.PEER_ADD))], wire.BAD_ARGUMENT),
    ("PEER_DEL without params", [b"", encoded(Request(cmd=Command.PEER_DEL))], wire.BAD_ARGUMENT),
    (
        "DIGEST_GET with a leaf id",
        [b"", wire.encode(Request(cmd=Command.DIGEST_GET, digest=DigestParams(node_ids=[99_999])))],
        wire.BAD_ARGUMENT,
    ),
    (
        "KEY_DUMP with an out-of-range bucket",
        [b"", wire.encode(Request(cmd=Command.KEY_DUMP, key_dump=KeyDumpParams(buckets=[-5])))],
        wire.BAD_ARGUMENT,
    ),
    ("oversized request", [b"", b"\x00" * (CAP + 1)], wire.TOO_LARGE),
]


@pytest.mark.parametrize(
    ("frames", "code"), [(f, c) for _, f, c in BAD_INPUTS], ids=[d for d, _, _ in BAD_INPUTS]
)
def test_bad_input_gets_error_reply_and_node_keeps_serving(
    node: Node, dealer: zmq.Socket[bytes], frames: list[bytes], code: str
) -> None:
    reply = exchange(dealer, frames)
    assert error_code(reply) == code
    with node.client() as client:
        assert client.get(["precious"])["precious"].value == b"keep me"
        counters = client.counters()
    assert counters["kvstore.malformed_requests"] == 1
    assert counters[f"kvstore.errors.{code}"] == 1
    assert node.alive()


def test_every_kind_in_a_row_then_normal_service(node: Node, dealer: zmq.Socket[bytes]) -> None:
    for _, frames, code in BAD_INPUTS:
        assert error_code(exchange(dealer, frames)) == code
    # A REQ client (the other supported framing) still works, as do ordinary requests.
    req: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.REQ)
    req.setsockopt(zmq.LINGER, 0)
    req.setsockopt(zmq.RCVTIMEO, 5000)
    req.connect(node.cmd_url)
    try:
        req.send(b"not thrift")
        assert error_code([req.recv()]) == wire.MALFORMED
        req.send(wire.encode(Request(cmd=Command.NODE_INFO)))
        info = wire.decode_response(req.recv()).node_info
        assert info is not None and info.name == "victim"
    finally:
        req.close(linger=0)
    with node.client() as client:
        assert client.counters()["kvstore.malformed_requests"] == len(BAD_INPUTS) + 1
        client.set({"after": make_value(b"ok", version=1, originator_id="t")})
        assert set(client.dump()) == {"precious", "after"}


def test_far_oversized_frame_drops_only_that_connection(node: Node) -> None:
    # Beyond the hard guard (2x the cap) ZeroMQ closes the offending connection: no reply is
    # possible, but the node and every other client carry on.
    sock: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(node.cmd_url)
    try:
        sock.send_multipart([b"", b"\x00" * (4 * CAP)])
        assert sock.poll(500) == 0
    finally:
        sock.close(linger=0)
    with node.client() as client:
        assert client.get(["precious"])["precious"].value == b"keep me"


def test_invalid_values_are_refused_per_key(node: Node) -> None:
    bad = {
        "zero-version": Value(0, "o", b"v"),
        "bad-ttl": Value(1, "o", b"v", -5, 0),
        "no-originator": Value(1, None, b"v"),
        "good": Value(1, "o", b"v"),
    }
    request = Request(
        cmd=Command.KEY_SET, key_set=KeySetParams(key_vals=bad, solicit_response=True, node_ids=[])
    )
    with node.client() as client:
        response: Response = client.request(request)
        assert response.error is None
        reasons = response.no_merge_reasons or {}
        assert set(reasons) == {"zero-version", "bad-ttl", "no-originator"}
        assert set(client.dump()) == {"precious", "good"}


def test_client_supplied_hash_is_not_trusted(node: Node) -> None:
    from kvstore.hashing import value_hash

    with node.client() as client:
        client.set({"h": Value(1, "o", b"v", -2147483648, 0, 12345)})
        stored = client.hash_dump(prefix="h")["h"]
    assert stored.hash == value_hash(1, "o", b"v") != 12345

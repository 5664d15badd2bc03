"""Protocol versions between peers (kvstore/protocol.py): the I/O-free agreement, and real nodes
refusing a peer whose protocol they cannot speak — on both sides of a sync, with a log line, a
counter and PEER_DUMP's `refused` — while a peer that says nothing (0.4.0) peers as protocol 1."""

from __future__ import annotations

import subprocess
import sys

import pytest
import zmq

from kvstore import stats, wire
from kvstore.client import make_value
from kvstore.gen.kvstore_thrift.ttypes import (
    Command,
    DigestParams,
    DigestReply,
    PeerState,
    Request,
    Response,
)
from kvstore.protocol import INCOMPATIBLE_PROTOCOL, THIS_NODE, Speaks, agree, from_wire
from kvstore.version import MIN_PROTOCOL_VERSION, PROTOCOL_VERSION, __version__
from tests.kvstore.conftest import Mesh, free_port
from tests.util import wait_until


def test_a_peer_that_says_nothing_speaks_protocol_1() -> None:
    assert from_wire(None, None, None) == Speaks(1, 1, None)
    assert from_wire(3, None, "9.0") == Speaks(3, 3, "9.0")
    for bad in ((0, None), (2, 3), (-1, -5), (1 << 20, 1)):
        with pytest.raises(ValueError, match="nonsensical"):
            from_wire(bad[0], bad[1], None)


def test_agreement_is_the_highest_common_protocol_or_a_refusal_naming_the_older_side() -> None:
    me = Speaks(2, 4, "1.0")
    assert agree("p", Speaks(1, 3), me).protocol == 3
    assert agree("p", Speaks(3, 9), me).protocol == 4
    old = agree("p", Speaks(1, 1), me)
    assert old.protocol is None and old.refused is not None
    assert "upgrade peer p" in old.refused and "version 0.4.0 or older" in old.refused
    new = agree("p", Speaks(5, 6, "2.0"), me)
    assert new.protocol is None and new.refused is not None
    assert "upgrade this node" in new.refused and "protocol 5..6 (version 2.0)" in new.refused
    # Today's release speaks what 0.4.0 speaks.
    assert agree("old", from_wire(None, None, None)).protocol == 1
    assert Speaks(MIN_PROTOCOL_VERSION, PROTOCOL_VERSION, __version__) == THIS_NODE


def _digest_get(sock: zmq.Socket[bytes], **hello: object) -> Response:
    request = Request(cmd=Command.DIGEST_GET, digest=DigestParams(node_ids=[0], **hello))
    sock.send_multipart([b"", wire.encode(request)])
    assert sock.poll(5000), "no reply to DIGEST_GET"
    return wire.decode_response(sock.recv_multipart()[-1])


@pytest.mark.process
def test_node_answers_its_versions_and_refuses_a_requester_it_cannot_speak(
    mesh: Mesh, ctx: zmq.Context[zmq.Socket[bytes]]
) -> None:
    (node,) = mesh.chain(["a"])
    with node.client() as client:
        info = client.node_info(refresh=True)
    assert (info.version, info.protocol, info.min_protocol) == (
        __version__, PROTOCOL_VERSION, MIN_PROTOCOL_VERSION)
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(node.cmd_url)
    legacy = _digest_get(sock)  # a 0.4.0 requester: no hello fields at all
    assert legacy.error is None and legacy.digest is not None
    assert (legacy.digest.protocol, legacy.digest.version) == (PROTOCOL_VERSION, __version__)
    future = PROTOCOL_VERSION + 10
    refused = _digest_get(sock, sender_id="z", protocol=future, min_protocol=future,
                          version="99.0")
    assert refused.error is not None and refused.error.code == INCOMPATIBLE_PROTOCOL
    assert "peer z speaks protocol" in refused.error.message
    assert "upgrade this node" in refused.error.message
    with node.client() as client:
        assert client.counters()[stats.PEER_PROTOCOL_REFUSED] == 1
    assert "DIGEST_GET refused: incompatible KvStore protocol" in node.log()


@pytest.mark.process
def test_node_refuses_a_peer_whose_hello_it_cannot_speak_and_floods_it_nothing(
    mesh: Mesh, ctx: zmq.Context[zmq.Socket[bytes]]
) -> None:
    """The peer is this test's ROUTER: it answers the node's DIGEST_GET with a protocol range
    above the node's. The node must stop the sync there, say why, and never flood it."""
    fake = ctx.socket(zmq.ROUTER)
    fake.setsockopt(zmq.LINGER, 0)
    fake_url = f"tcp://127.0.0.1:{free_port()}"
    fake.bind(fake_url)
    node = mesh.allocate("a")
    node.peers["z"] = fake_url
    mesh.start(node)
    future = PROTOCOL_VERSION + 10
    assert fake.poll(10_000), "the node sent no sync request"
    frames = fake.recv_multipart()
    request = wire.decode_request(frames[-1])
    assert request.cmd == Command.DIGEST_GET and request.digest is not None
    hello = request.digest
    assert (hello.protocol, hello.min_protocol, hello.version) == (
        PROTOCOL_VERSION, MIN_PROTOCOL_VERSION, __version__)
    reply = Response(digest=DigestReply(digests={i: 0 for i in range(1, 17)},
                                        protocol=future, min_protocol=future, version="99.0"))
    fake.send_multipart([*frames[:-1], wire.encode(reply)])

    def refused() -> bool:
        with node.client() as client:
            spec = client.peers()["z"]
        return spec.refused is not None

    wait_until(refused, timeout=10, message="peer z refused")
    with node.client() as client:
        spec = client.peers()["z"]
        counters = client.counters()
        client.set({"k": make_value(b"v", version=1, originator_id="t")})
    assert spec.state == PeerState.IDLE
    assert spec.refused is not None and "upgrade this node" in spec.refused
    assert (spec.protocol, spec.version) == (future, "99.0")
    assert counters[stats.PEER_PROTOCOL_REFUSED] >= 1
    assert counters[stats.NUM_PEERS_REFUSED] == 1
    assert "peer z refused: incompatible KvStore protocol" in node.log()
    shown = subprocess.run([sys.executable, "-m", "kvmesh", "--url", node.cmd_url, "peer", "dump"],
                           capture_output=True, text=True, timeout=60)
    assert "z REFUSED: incompatible KvStore protocol" in shown.stdout, shown.stdout + shown.stderr
    assert "99.0" in shown.stdout  # the Version column
    # Nothing but sync retries reaches the refused peer: no flood of "k".
    for _ in range(20):
        if not fake.poll(300):
            break
        got = wire.decode_request(fake.recv_multipart()[-1])
        assert got.cmd == Command.DIGEST_GET, f"a refused peer got {got.cmd}"

"""Resource exhaustion against real node processes (issue 12): for each attack the node's RSS
stays bounded (VmRSS from /proc, a bound with headroom, not a timing), it keeps serving another
client, and the event is counted."""

from __future__ import annotations

import os
import resource
from collections.abc import Callable
from pathlib import Path

import pytest
import zmq

from kvstore import wire
from kvstore.client import KvStoreRequestError, connect_socket, make_value
from kvstore.gen.kvstore_thrift.ttypes import (
    Command,
    KeySetParams,
    PeerAddParams,
    PeerSpec,
    Request,
    Value,
)
from kvstore.node_ports import free_tcp_port
from tests.kvstore.conftest import Mesh, Node
from tests.util import wait_until

MIB = 1024 * 1024


def rss_bytes(node: Node) -> int:
    assert node.proc is not None
    for line in Path(f"/proc/{node.proc.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def serves(node: Node) -> bool:
    """Another client gets an answer (a write and a read)."""
    with node.client(timeout_s=10) as client:
        client.set({"probe": make_value(os.urandom(8), version=1, originator_id="probe")})
        return "probe" in client.get(["probe"])


def counters(node: Node) -> dict[str, int]:
    with node.client(timeout_s=10) as client:
        return client.counters()


def _value_batch(version: int, keys: int = 100, size: int = 100) -> dict[str, Value]:
    return {
        f"flood/{i:03d}": Value(version, "attacker", b"v" * size, -2**31, 0) for i in range(keys)
    }


def test_subscriber_that_never_reads_is_bounded_and_counted(
    mesh: Mesh, ctx: zmq.Context[zmq.Socket[bytes]]
) -> None:
    node = mesh.start(mesh.allocate("pubsub", subscriber_queue_bytes=2 * MIB))
    stalled = ctx.socket(zmq.SUB)
    stalled.setsockopt(zmq.RCVHWM, 1)
    stalled.setsockopt(zmq.RCVBUF, 4096)
    stalled.setsockopt(zmq.SUBSCRIBE, b"")
    stalled.connect(node.pub_url)
    wait_until(lambda: counters(node).get("kvstore.subscriptions", 0) >= 1, message="subscribed")
    before = rss_bytes(node)
    published = 0
    with node.client(timeout_s=30) as client:
        for version in range(1, 401):  # 400 publications of 100 x 1 KiB: ~40 MiB published
            batch = _value_batch(version, size=1024)
            assert client.set(batch) == {}
            published += sum(len(v.value or b"") for v in batch.values())
    grown = rss_bytes(node) - before
    assert published >= 39 * MIB
    # Bound: 2 MiB queued for the subscriber, plus allocator slack; unbounded it was ~published.
    assert grown < 16 * MIB, f"RSS grew {grown / MIB:.1f} MiB for {published / MIB:.0f} MiB"
    assert counters(node)["kvstore.subscribers.dropped_publications"] > 0
    assert "a subscriber is not reading" in node.log()
    assert serves(node)
    stalled.close(linger=0)


def test_publications_are_split_into_bounded_frames() -> None:
    from kvstore.gen.kvstore_thrift.ttypes import Publication
    from kvstore.publisher import publication_frames

    big = Publication(key_vals=_value_batch(1, keys=300, size=200), node_ids=["a"],
                      expired_keys=[f"gone/{i}" for i in range(50)], timestamp_ms=7)
    frames = publication_frames(big, 8192)
    assert len(frames) > 1 and all(len(f) <= 8192 for f in frames)
    parts = [wire.decode_publication(f) for f in frames]
    merged: dict[str, Value] = {}
    gone: list[str] = []
    for part in parts:
        assert part.node_ids == ["a"] and part.timestamp_ms == 7
        merged.update(part.key_vals or {})
        gone.extend(part.expired_keys or [])
    assert merged == big.key_vals and gone == big.expired_keys
    huge = Publication(key_vals={"one": Value(1, "a", b"x" * 20000, -2**31, 0)})
    assert len(publication_frames(huge, 8192)) == 1  # one key-value is never split


def test_oneway_key_set_flood_is_bounded_and_counted(
    mesh: Mesh, ctx: zmq.Context[zmq.Socket[bytes]]
) -> None:
    node = mesh.start(mesh.allocate("flooded", zmq_hwm=500))
    messages = [
        wire.encode(Request(cmd=Command.KEY_SET, key_set=KeySetParams(
            key_vals=_value_batch(version), solicit_response=False)))
        for version in range(1, 3001)
    ]
    sent = sum(map(len, messages))
    before = rss_bytes(node)
    flooder = connect_socket(ctx, zmq.DEALER, node.cmd_url)
    flooder.setsockopt(zmq.SNDHWM, 100)
    for message in messages:
        flooder.send_multipart([b"", message])  # blocks when the node's queue is full
        if message is messages[len(messages) // 2]:
            assert serves(node)  # in the middle of the flood
    wait_until(lambda: counters(node).get("kvstore.cmd_key_set", 0) >= len(messages) + 1,
               timeout=60, message="every one-way KEY_SET handled")
    grown = rss_bytes(node) - before
    assert sent > 30 * MIB
    assert grown < 24 * MIB, f"RSS grew {grown / MIB:.1f} MiB for {sent / MIB:.0f} MiB sent"
    with node.client() as client:
        assert client.get(["flood/000"])["flood/000"].version == len(messages)
    flooder.close(linger=0)


def test_thousands_of_connections_are_capped_and_counted(
    mesh: Mesh, ctx: zmq.Context[zmq.Socket[bytes]]
) -> None:
    cap, attempts = 300, 1200
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 4 * attempts:
        pytest.skip(f"needs an open-file hard limit of {4 * attempts} (have {hard})")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 8 * attempts)), hard))
    node = mesh.start(mesh.allocate("crowded", max_clients=cap))
    before = rss_bytes(node)
    sockets = []
    # Each look at the node is a new client's (a client idle since before the crowd is the
    # idlest connection: reaped first, a request in flight on it then times out).

    def fresh_counters() -> dict[str, int]:
        with node.client(timeout_s=10) as client:
            return client.counters()

    try:
        for _ in range(attempts):
            sock = ctx.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.RECONNECT_IVL, 2000)  # reaped ones retry every 2 s
            sock.connect(node.cmd_url)
            sockets.append(sock)
        wait_until(lambda: fresh_counters().get("kvstore.clients.reaped", 0)
                   >= attempts - cap, timeout=30, message="idle connections over the cap reaped")
        snapshot = fresh_counters()
        assert snapshot["kvstore.clients.connected"] <= cap + 5  # + in-flight reaps
        with node.client(timeout_s=10) as client:
            client.set({"probe": make_value(b"p", version=1, originator_id="probe")})
            assert "probe" in client.get(["probe"])
        assert "idlest connection was closed" in node.log() and "max_clients = 300" in node.log()
        assert serves(node)  # a new client too
        grown = rss_bytes(node) - before
        assert grown < 48 * MIB, f"RSS grew {grown / MIB:.1f} MiB"
    finally:
        for sock in sockets:
            sock.close(linger=0)
    wait_until(lambda: node.answers(), timeout=30, message="new clients served again")
    assert serves(node)


def start_with_fd_limit(mesh: Mesh, node: Node, soft: int, hard: int | None = None) -> Node:
    """Start `node` with a low soft open-file limit (the node must raise it itself), and a
    lower hard limit if given (a host where raising it is not enough)."""
    if hard is None:
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    return mesh.start(node, preexec_fn=limit)


def _peer_add(node: Node, count: int) -> Callable[[], None]:
    dead = free_tcp_port()  # nothing listens there: every peer is unreachable
    peers = {f"bogus{i:05d}": PeerSpec(cmd_url=f"tcp://127.0.0.1:{dead}") for i in range(count)}

    def add() -> None:
        with node.client(timeout_s=60) as client:
            client.request(Request(cmd=Command.PEER_ADD, peer_add=PeerAddParams(peers=peers)))

    return add


def test_peer_add_of_thousands_is_all_or_nothing_and_bounded(mesh: Mesh) -> None:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard < 8192:
        pytest.skip(f"needs an open-file hard limit of 8192 (have {hard})")
    node = start_with_fd_limit(mesh, mesh.allocate("peers", max_peers=1500), soft=1024)
    limits = Path(f"/proc/{node.proc.pid}/limits").read_text()  # type: ignore[union-attr]
    soft_now = next(line.split()[3] for line in limits.splitlines()
                    if line.startswith("Max open files"))
    assert soft_now == str(hard) or soft_now == "unlimited"
    # Over max_peers: refused as a whole, nothing added.
    with pytest.raises(KvStoreRequestError, match="max_peers is 1500; nothing was added"):
        _peer_add(node, 2000)()
    with node.client() as client:
        assert client.peers() == {}
    assert counters(node)["kvstore.peer_add_refused"] == 1
    # Within it: 1200 unreachable peers (beyond the 1024 descriptors it was started with).
    before = rss_bytes(node)
    _peer_add(node, 1200)()
    with node.client() as client:
        assert len(client.peers()) == 1200
    assert serves(node)
    assert counters(node)["kvstore.peer_adds"] == 1200
    grown = rss_bytes(node) - before
    assert grown < 96 * MIB, f"RSS grew {grown / MIB:.1f} MiB for 1200 peers"


def test_message_over_twice_the_cap_drops_the_connection_and_is_counted(
    mesh: Mesh, ctx: zmq.Context[zmq.Socket[bytes]]
) -> None:
    cap = 64 * 1024
    node = mesh.start(mesh.allocate("capped", max_message_bytes=cap))
    with node.client() as client:
        client.set({"precious": make_value(b"keep", version=1, originator_id="x")})
    before_rss = rss_bytes(node)
    before = counters(node).get("kvstore.clients.disconnected", 0)
    # Between the cap and twice the cap: an answer.
    sock = connect_socket(ctx, zmq.DEALER, node.cmd_url)
    sock.send_multipart([b"", b"\x00" * (cap + 10)])
    assert sock.poll(10_000)
    error = wire.decode_response(sock.recv_multipart()[-1]).error
    assert error is not None and error.code == wire.TOO_LARGE
    # Over twice the cap: ZeroMQ drops the connection (no answer), the node counts it.
    for _ in range(20):
        sock.send_multipart([b"", b"\x00" * (4 * cap)])
    wait_until(lambda: counters(node).get("kvstore.clients.disconnected", 0) > before,
               timeout=10, message="dropped connection counted")
    sock.close(linger=0)
    assert rss_bytes(node) - before_rss < 8 * MIB
    assert serves(node)
    with node.client() as client:
        assert client.get(["precious"])["precious"].value == b"keep"

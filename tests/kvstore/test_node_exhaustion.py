"""Issue 17, items 3 and 4, against real node processes: a subscriber that never reads pins at
most its byte budget (however large the published values), and 2000 idle connections do not
lock a new client out."""

from __future__ import annotations

import os
import resource
import time

import pytest
import zmq

from kvstore import wire
from kvstore.client import KvStoreAuthError, KvStoreClient, make_value
from kvstore.gen.kvstore_thrift.ttypes import Command, Publication, Request
from tests.kvstore.conftest import Mesh, Node
from tests.kvstore.test_node_resources import MIB, counters, rss_bytes, start_with_fd_limit
from tests.util import wait_until


def test_subscriber_that_never_reads_large_values_pins_at_most_its_budget(
    mesh: Mesh, ctx: zmq.Context[zmq.Socket[bytes]]
) -> None:
    """150 MiB published as 1 MiB values: each is one publication frame, so a queue bounded in
    messages alone (4096 frames) would hold all of it (measured: RSS +155 MiB)."""
    cap = 32 * MIB  # the default subscriber_queue_bytes
    node = mesh.start(mesh.allocate("stalled", subscriber_queue_bytes=cap))
    stalled = ctx.socket(zmq.SUB)
    stalled.setsockopt(zmq.LINGER, 0)
    stalled.setsockopt(zmq.RCVHWM, 1)  # its own process takes (almost) nothing off the node
    stalled.setsockopt(zmq.RCVBUF, 64 * 1024)
    # A topic that matches every one-key publication but not the node's padding frames: the
    # node must still count the padding in its queue (it subscribes everyone to everything).
    one_key = wire.encode(
        Publication(key_vals={"k": make_value(b"", version=1, originator_id="t")})
    )
    topic = one_key[:9]  # the key_vals header: a map of one string -> struct entry
    assert not wire.PUBLICATION_PADDING.startswith(topic)
    stalled.setsockopt(zmq.SUBSCRIBE, topic)
    stalled.connect(node.pub_url)
    with node.client(timeout_s=30) as client, client.subscribe() as reader:
        wait_until(lambda: client.counters().get("kvstore.subscriptions", 0) >= 2,
                   message="both subscribed")
        before = rss_bytes(node)
        peak = before
        value = os.urandom(MIB)
        count = 150
        for version in range(1, count + 1):
            client.set({f"big/{version % 4}": make_value(value, version=version,
                                                          originator_id="t")})
            # The reader keeps up: it gets every publication, whatever the stalled one does.
            publication = reader.recv(timeout_s=10)
            assert publication is not None and publication.key_vals is not None, version
            assert [v.version for v in publication.key_vals.values()] == [version]
            peak = max(peak, rss_bytes(node))
        grown = peak - before
        snapshot = client.counters()
    # The budget, plus one frame in ZeroMQ's hands and one being written, plus allocator slack.
    assert grown < cap + 20 * MIB, f"RSS grew {grown / MIB:.0f} MiB for {count} MiB published"
    assert snapshot["kvstore.send_failure.pub"] > 0
    assert snapshot["kvstore.subscribers.dropped_publications"] > 0
    assert "a subscriber is not reading" in node.log()
    # Memory returns once the stalled subscriber leaves (its queue is freed with it).
    stalled.close(linger=0)
    wait_until(lambda: rss_bytes(node) - before < 12 * MIB, timeout=20,
               message="memory released after the subscriber left")


def _open_fds(node: Node) -> int:
    assert node.proc is not None
    return len(os.listdir(f"/proc/{node.proc.pid}/fd"))


def test_two_thousand_idle_connections_do_not_lock_a_new_client_out(
    mesh: Mesh, ctx: zmq.Context[zmq.Socket[bytes]]
) -> None:
    crowd = 2000
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 3 * crowd:
        pytest.skip(f"needs an open-file hard limit of {3 * crowd} (have {hard})")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4 * crowd)), hard))
    # Default max_clients (1024) on a host whose hard limit is 1024: the caps must fit in it.
    node = start_with_fd_limit(mesh, mesh.allocate("crowded"), soft=1024, hard=1024)
    assert "open-file limit: soft 1024 (was 1024), hard 1024" in node.log()
    request = wire.encode(Request(cmd=Command.NODE_INFO))
    sockets = []
    try:
        for i in range(crowd):
            sock = ctx.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.ROUTING_ID, b"idle-%05d" % i)
            sock.connect(node.cmd_url)
            sock.send_multipart([b"", request])  # one request each, then idle
            sockets.append(sock)
        wait_until(lambda: counters(node).get("kvstore.clients.accepted", 0) >= crowd,
                   timeout=60, message="the crowd connected")
        # While every one of them stays open, new clients are served within 3 s, each time.
        for attempt in range(5):
            started = time.monotonic()
            with KvStoreClient(node.cmd_url, timeout_s=3) as client:
                assert client.node_info(refresh=True).name == "crowded"
            assert time.monotonic() - started < 3, attempt
        snapshot = counters(node)
        assert snapshot["kvstore.clients.reaped"] > 0
        assert _open_fds(node) < 1024
        assert "the idlest connection was closed for a new one" in node.log()
        assert "enforcing" in node.log()  # the caps were shrunk to fit 1024 descriptors
    finally:
        for sock in sockets:
            sock.close(linger=0)


def test_a_subscriber_over_max_subscribers_gets_an_error_naming_the_cap(mesh: Mesh) -> None:
    """Refused at once (not a timeout), and the error does not only blame CurveZMQ."""
    node = mesh.start(mesh.allocate("fewsubs", max_subscribers=1))
    with node.client() as client, client.subscribe() as first:
        assert first.recv(timeout_s=0.2) is None  # connected, nothing published
        wait_until(lambda: client.counters().get("kvstore.subscribers.connected", 0) == 1,
                   message="the first subscriber connected")
        started = time.monotonic()
        with client.subscribe() as second, pytest.raises(KvStoreAuthError,
                                                         match="at its connection cap"):
            second.recv(timeout_s=10)
        assert time.monotonic() - started < 5
        assert client.counters()["kvstore.subscribers.refused"] >= 1

"""Floods queued towards a paused peer must not bring an expired key back (issue 10).

Real processes on loopback: a - b - c. b is frozen with SIGSTOP while a short-TTL key is written on
a, so a's flood to b waits in the socket queues; b is thawed after the key's TTL has run out. The
flood carries the sender's wall clock (`timestamp_ms`): b must take the time spent in transit off
the TTL, find the key already expired, and neither store nor flood it on to c.
"""

from __future__ import annotations

import signal
import time

from kvstore.client import make_value
from kvstore.gen.kvstore_thrift.ttypes import Command, KeySetParams, Request
from tests.kvstore.conftest import Mesh, Node, wait_for_value
from tests.util import wait_until

TTL_MS = 1500


def _frozen(node: Node) -> bool:
    with open(f"/proc/{node.proc.pid}/stat") as stat:  # type: ignore[union-attr]
        return stat.read().rsplit(")", 1)[1].split()[0] == "T"


def test_key_flooded_to_a_paused_peer_does_not_outlive_its_ttl(mesh: Mesh) -> None:
    a, b, c = mesh.chain(["a", "b", "c"])
    assert b.proc is not None
    b.proc.send_signal(signal.SIGSTOP)
    try:
        wait_until(lambda: _frozen(b), message="b stopped")
        written = time.monotonic()
        with a.client() as client:
            client.set({"short": make_value(b"x", version=1, originator_id="a", ttl_ms=TTL_MS)})
            # Sent after `short` on the same a -> b link: its arrival on c proves b has
            # processed the flood that carried `short`.
            client.set({"marker": make_value(b"m", version=1, originator_id="a")})
        wait_for_value([a], "short", lambda v: v is None, timeout=10)
        # Not before its TTL, to the node's clock: whole milliseconds, so a key merged in the
        # millisecond `written` fell in may go up to 1 ms early by this (finer) clock.
        assert time.monotonic() - written >= (TTL_MS - 1) / 1000
    finally:
        b.proc.send_signal(signal.SIGCONT)
    wait_for_value([b, c], "marker", lambda v: v is not None, timeout=20)
    for node in (a, b, c):
        with node.client() as client:
            assert "short" not in client.get(["short"]), f"expired key back on {node.name}"
    with b.client() as client:
        assert client.counters()["kvstore.ttl.expired_in_transit"] >= 1


def test_key_delayed_in_transit_keeps_only_the_ttl_it_has_left(mesh: Mesh) -> None:
    """A key that arrives late but not yet expired gets the remaining time, not a fresh TTL."""
    a, b = mesh.chain(["a", "b"])
    assert b.proc is not None
    ttl_ms = 8000
    b.proc.send_signal(signal.SIGSTOP)
    try:
        wait_until(lambda: _frozen(b), message="b stopped")
        with a.client() as client:
            client.set({"slow": make_value(b"x", version=1, originator_id="a", ttl_ms=ttl_ms)})
        # Hold b for 3 s (measured on a: the key's remaining TTL there).
        wait_for_value([a], "slow", lambda v: v is not None and v.ttl_ms <= ttl_ms - 3000)
    finally:
        b.proc.send_signal(signal.SIGCONT)
    wait_for_value([b], "slow", lambda v: v is not None)
    with a.client() as client_a, b.client() as client_b:
        left_a = client_a.get(["slow"])["slow"].ttl_ms
        left_b = client_b.get(["slow"])["slow"].ttl_ms  # read after a's: it can only be less
    # Without aging b would hold ~8000 ms; it must hold no more than a has left (plus a little
    # for the per-node rounding of expiry times).
    assert left_b <= left_a + 100, (left_a, left_b)


def test_client_set_queued_towards_a_paused_node_does_not_outlive_its_ttl(mesh: Mesh) -> None:
    """Clients stamp their sets too: one that waits in a queue for a paused node is aged."""
    a, b = mesh.chain(["a", "b"])
    assert b.proc is not None
    with b.client() as client_b, a.client() as client_a:
        client_b.node_info(refresh=True)  # connected (handshake done) before the pause
        b.proc.send_signal(signal.SIGSTOP)
        try:
            wait_until(lambda: _frozen(b), message="b stopped")
            client_b.send_oneway(
                {"late": make_value(b"x", version=1, originator_id="t", ttl_ms=TTL_MS)})
            # A twin written on a (not paused) at the same time: once it is gone, so is the
            # TTL of the queued one.
            client_a.set({"twin": make_value(b"x", version=1, originator_id="t", ttl_ms=TTL_MS)})
            wait_for_value([a], "twin", lambda v: v is None, timeout=10)
        finally:
            b.proc.send_signal(signal.SIGCONT)
        # Same connection, so processed after `late`.
        client_b.set({"marker": make_value(b"m", version=1, originator_id="t")})
        assert "late" not in client_b.get(["late"])
        assert client_b.counters()["kvstore.ttl.expired_in_transit"] >= 1


def test_a_set_that_arrives_expired_is_refused_with_a_reason(mesh: Mesh) -> None:
    """The requester learns that its set came too late: EXPIRED_IN_TRANSIT, nothing stored."""
    (a,) = mesh.chain(["a"])
    stamp = int(time.time() * 1000) - 5000  # sent 5 s ago (a queue, or a clock behind)
    request = Request(cmd=Command.KEY_SET, key_set=KeySetParams(
        key_vals={"late": make_value(b"x", version=1, originator_id="t", ttl_ms=2000),
                  "fine": make_value(b"y", version=1, originator_id="t", ttl_ms=60_000)},
        solicit_response=True, node_ids=[], timestamp_ms=stamp))
    with a.client() as client:
        reasons = client.request(request).no_merge_reasons
        assert reasons == {"late": "EXPIRED_IN_TRANSIT"}
        stored = client.get(["late", "fine"])
    assert "late" not in stored
    assert 50_000 <= stored["fine"].ttl_ms <= 55_000  # the 5 s were charged

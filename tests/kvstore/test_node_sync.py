"""Multi-process full sync: 3-way sync on peer add, anti-entropy, restart repair, initial sync."""

from __future__ import annotations

import signal
import time
from functools import partial

import zmq

from kvstore import wire
from kvstore.client import KvStoreClient, make_value
from kvstore.db import KvStoreDb
from kvstore.gen.kvstore_thrift.ttypes import (
    Command,
    DigestReply,
    KeySetParams,
    PeerState,
    Publication,
    Request,
    Response,
    Value,
)
from tests.kvstore.conftest import Mesh, free_port, wait_for_value
from tests.util import wait_until


def identity(client: KvStoreClient) -> dict[str, tuple[int, str, bytes | None]]:
    return {k: (v.version, v.originator_id, v.value) for k, v in client.dump().items()}


def converged(client: KvStoreClient, expected: dict[str, tuple[int, str, bytes]]) -> bool:
    return identity(client) == expected


def repaired(client: KvStoreClient) -> bool:
    return len(client.hash_dump(prefix="r/")) == 50 and "while-down" in client.get(["while-down"])


def test_three_way_full_sync_on_peer_add(mesh: Mesh) -> None:
    """The reference FullSync case: both sides end with the best of each key."""
    a = mesh.start(mesh.allocate("a"))
    b = mesh.start(mesh.allocate("b"))
    with a.client() as client:
        client.set(
            {
                "k0": make_value(b"a0", version=5, originator_id="a"),
                "k1": make_value(b"a1", version=1, originator_id="a"),
                "k2": make_value(b"a2", version=9, originator_id="a"),
                "k3": make_value(b"a3", version=1, originator_id="a"),
            }
        )
    with b.client() as client:
        client.set(
            {
                "k1": make_value(b"a1", version=1, originator_id="a"),
                "k2": make_value(b"b2", version=1, originator_id="b"),
                "k3": make_value(b"b3", version=9, originator_id="b"),
                "k4": make_value(b"b4", version=6, originator_id="b"),
            }
        )
    # Only a declares the peering: a's sync alone must fix both stores (3-way).
    with a.client() as client:
        client.add_peer("b", b.cmd_url, b.pub_url)
    expected = {
        "k0": (5, "a", b"a0"),
        "k1": (1, "a", b"a1"),
        "k2": (9, "a", b"a2"),
        "k3": (9, "b", b"b3"),
        "k4": (6, "b", b"b4"),
    }
    for node in (a, b):
        with node.client() as client:
            wait_until(partial(converged, client, expected), timeout=20, message=node.name)
    with a.client() as client:
        peers = client.peers()
        counters = client.counters()
    assert peers["b"].state == PeerState.INITIALIZED
    assert counters["kvstore.full_sync.success"] >= 1
    assert counters["kvstore.full_sync.differing_buckets"] >= 1


def test_peer_not_initialized_gets_missed_keys_at_end_of_sync(mesh: Mesh) -> None:
    """A key set while a peer is down (no flood to it) reaches it by the sync retried once the
    peer is up."""
    a = mesh.start(mesh.allocate("a"))
    b_spec = mesh.allocate("b")
    # a declares b before b exists: the sync cannot finish, so b is not INITIALIZED...
    with a.client() as client:
        client.add_peer("b", b_spec.cmd_url)
        client.set({"early": make_value(b"1", version=1, originator_id="a")})
        assert client.peers()["b"].state != PeerState.INITIALIZED
    # ...and once b comes up, a's (retried) sync delivers the key.
    b = mesh.start(b_spec)
    wait_for_value([b], "early", lambda v: v is not None and v.value == b"1")


def test_key_merged_during_a_sync_is_sent_in_the_finalize_step(mesh: Mesh) -> None:
    """A key merged while a peer's sync is in flight is not flooded to it (not INITIALIZED) and
    is not in what the sync compares: only the finalize step can deliver it. The peer is a test
    socket speaking the responder side with an empty store and wanting nothing (so the only
    KEY_SET it can get is the finalize step's pending keys)."""
    a = mesh.allocate("a", sync_timeout_ms=60_000)
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()
    fake: zmq.Socket[bytes] = context.socket(zmq.ROUTER)
    fake.setsockopt(zmq.LINGER, 0)
    fake_url = f"tcp://127.0.0.1:{free_port()}"
    fake.bind(fake_url)
    empty = KvStoreDb("fake")
    got: dict[str, Value] = {}
    try:
        mesh.start(a)
        with a.client() as client:
            client.add_peer("fake", fake_url)
            requests = 0
            deadline = time.monotonic() + 60
            while "late" not in got:
                assert time.monotonic() < deadline, f"no finalize KEY_SET; {client.counters()}"
                if not fake.poll(200):
                    continue
                frames = fake.recv_multipart()
                identity, corr, payload = frames[0], frames[-3], frames[-1]
                request = wire.decode_request(payload)
                if request.cmd == Command.KEY_SET:  # finalize (no correlation id)
                    got.update(request.key_set.key_vals)
                    continue
                requests += 1
                if requests == 1:
                    # The sync is in flight (a waits for this reply): merge a key on a now.
                    client.set({"late": make_value(b"L", version=1, originator_id="a")})
                    assert client.peers()["fake"].state == PeerState.SYNCING
                if request.cmd == Command.DIGEST_GET:
                    response = Response(
                        digest=DigestReply(digests=empty.digest_children(request.digest.node_ids))
                    )
                else:
                    assert request.cmd == Command.KEY_DUMP
                    response = Response(publication=Publication(key_vals={}, tobe_updated_keys=[]))
                fake.send_multipart([identity, corr, b"", wire.encode(response)])
            wait_until(lambda: client.peers()["fake"].state == PeerState.INITIALIZED)
    finally:
        fake.close(linger=0)
    assert got["late"].value == b"L"


def test_anti_entropy_repairs_missed_publication(mesh: Mesh) -> None:
    a, b = mesh.chain(["a", "b"], sync_interval_s=0.5)
    # b receives a publication whose flood path already names a: b applies it but does not
    # flood it to a (a is on the path), so a misses it. Only anti-entropy can repair that.
    request = Request(
        cmd=Command.KEY_SET,
        key_set=KeySetParams(
            key_vals={"missed": make_value(b"m", version=3, originator_id="z")},
            solicit_response=True,
            node_ids=["a"],
        ),
    )
    with b.client() as client:
        assert client.request_raw(wire.encode(request)).error is None
        assert client.get(["missed"])["missed"].value == b"m"
    wait_for_value([a], "missed", lambda v: v is not None and v.value == b"m", timeout=20)
    with a.client() as client:
        counters = client.counters()
    with b.client() as client:
        counters_b = client.counters()
    syncs = counters.get("kvstore.anti_entropy_syncs", 0)
    syncs += counters_b.get("kvstore.anti_entropy_syncs", 0)
    assert syncs >= 1
    repairs = counters.get("kvstore.anti_entropy_repairs", 0)
    repairs += counters_b.get("kvstore.anti_entropy_repairs", 0)
    assert repairs >= 1


def test_node_restarted_empty_is_repaired_by_peers(mesh: Mesh) -> None:
    a, b, c = mesh.chain(["a", "b", "c"])
    with a.client() as client:
        for i in range(50):
            client.set({f"r/{i}": make_value(b"x" * i, version=1, originator_id="a")})
    wait_for_value([c], "r/49", lambda v: v is not None)
    b.kill()  # SIGKILL: no goodbye, the store is lost
    with a.client() as client:
        client.set({"while-down": make_value(b"d", version=1, originator_id="a")})
    mesh.start(b)
    mesh.wait_ready(b)
    for node in (a, b, c):
        with node.client() as client:
            wait_until(partial(repaired, client), timeout=20, message=f"{node.name} repaired")


def test_initial_sync_done_and_peer_states(mesh: Mesh) -> None:
    _a, b, c = mesh.chain(["a", "b", "c"])
    with b.client() as client:
        info = client.node_info(refresh=True)
        peers = client.peers()
    assert info.initial_sync_done
    assert {n: p.state for n, p in peers.items()} == {
        "a": PeerState.INITIALIZED,
        "c": PeerState.INITIALIZED,
    }
    assert all(p.flaps == 0 for p in peers.values())  # never fell back from INITIALIZED
    # A dead peer: b's next sync with it fails and b marks it IDLE, and keeps serving.
    c.stop(signal.SIGKILL)
    with b.client() as client:
        client.del_peers(["c"])
        client.add_peer("c", c.cmd_url)
        wait_until(
            lambda: client.peers()["c"].state == PeerState.IDLE, timeout=20, message="c idle"
        )
        assert client.counters()["kvstore.full_sync.timeouts"] >= 1
        client.del_peers(["c"])
        assert set(client.peers()) == {"a"}


def test_sync_keeps_remaining_ttl(mesh: Mesh) -> None:
    a = mesh.start(mesh.allocate("a"))
    b = mesh.start(mesh.allocate("b"))
    with a.client() as client:
        client.set({"t": Value(1, "a", b"v", 60_000, 0)})
        client.add_peer("b", b.cmd_url)
    wait_for_value([b], "t", lambda v: v is not None)
    with b.client() as client:
        ttl = client.get(["t"])["t"].ttl_ms
    assert 0 < ttl < 60_000


def test_ttl_update_for_a_missed_version_resyncs_with_that_peer(mesh: Mesh) -> None:
    """A peer floods a TTL refresh of a version this node never got (TTL_UPDATE_MISMATCH): the
    node resyncs with that peer at once (anti-entropy is off here) and gets the value."""
    a, b = mesh.chain(["a", "b"])
    with a.client() as ca, b.client() as cb:
        ca.set({"k": make_value(b"old", version=1, originator_id="o")})
        wait_for_value([b], "k", lambda v: v is not None and v.version == 1)
        # Version 2 reaches b only: its flood path claims it came from a, so b does not flood
        # it back to a (the way a lost flood looks).
        cb.request(Request(cmd=Command.KEY_SET, key_set=KeySetParams(
            key_vals={"k": make_value(b"new", version=2, originator_id="o", ttl_ms=60_000)},
            node_ids=["a"])))
        assert ca.get(["k"])["k"].version == 1
        before = ca.counters().get("kvstore.full_sync.divergence_resyncs", 0)
        # b's owner refreshes the TTL of version 2; a gets it as b's flood.
        refresh = make_value(None, version=2, originator_id="o", ttl_ms=60_000, ttl_version=1)
        ca.request(Request(cmd=Command.KEY_SET, key_set=KeySetParams(
            key_vals={"k": refresh}, node_ids=["b"])))
        wait_until(lambda: ca.get(["k"])["k"].version == 2, timeout=15,
                   message="a resynced with b and got version 2")
        assert ca.counters()["kvstore.full_sync.divergence_resyncs"] == before + 1

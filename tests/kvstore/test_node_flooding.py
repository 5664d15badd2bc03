"""Multi-process flooding: chain and full-mesh convergence, tie-breaking, versions, loops."""

from __future__ import annotations

import time

import zmq

from kvstore import wire
from kvstore.client import make_value
from kvstore.gen.kvstore_thrift.ttypes import Command, KeySetParams, Request, Value
from kvstore.hashing import value_hash
from tests.kvstore.conftest import Mesh, wait_for_value, wait_subscription_live
from tests.util import wait_until


def has(version: int, originator: str, value: bytes):
    def predicate(v: Value | None) -> bool:
        return (
            v is not None
            and v.version == version
            and v.originator_id == originator
            and v.value == value
        )

    return predicate


def test_three_node_chain_converges(mesh: Mesh) -> None:
    a, b, c = mesh.chain(["a", "b", "c"])
    with a.client() as client:
        _, reason = client.set_key("chain/k1", b"from-a")
    assert reason is None
    with c.client() as client:
        client.set_key("chain/k2", b"from-c")
    wait_for_value([a, b, c], "chain/k1", has(1, "a", b"from-a"))
    wait_for_value([a, b, c], "chain/k2", has(1, "c", b"from-c"))
    # The flood path is recorded: c received k1 via b; a looped copy is never re-flooded.
    with b.client() as client:
        counters = client.counters()
    assert counters["kvstore.received_publications"] >= 2
    assert counters["kvstore.sent_publications"] >= 2
    # Same content everywhere, down to the hash.
    dumps = []
    for node in (a, b, c):
        with node.client() as client:
            dumps.append(
                {k: (v.version, v.originator_id, v.hash) for k, v in client.hash_dump().items()}
            )
    assert dumps[0] == dumps[1] == dumps[2]
    assert set(dumps[0]) == {"chain/k1", "chain/k2"}


def test_full_mesh_converges_without_loops(mesh: Mesh) -> None:
    nodes = mesh.full_mesh(["m1", "m2", "m3", "m4"])
    for i, node in enumerate(nodes):
        with node.client() as client:
            value = make_value(f"v{i}".encode(), version=1, originator_id=node.name)
            client.set({f"mesh/{i}": value})
    for i, node in enumerate(nodes):
        wait_for_value(nodes, f"mesh/{i}", has(1, node.name, f"v{i}".encode()))
    # Each change crosses each link at most once per direction: with 4 nodes and 4 keys, no node
    # can have received more than 3 publications per key, and duplicates are not re-flooded.
    for node in nodes:
        with node.client() as client:
            counters = client.counters()
        assert counters["kvstore.updated_key_vals"] == 4
        assert counters["kvstore.received_key_vals"] <= 3 * 4


def test_tie_breaking_on_16_node_chain(mesh: Mesh) -> None:
    names = [f"n{i:02d}" for i in range(16)]
    nodes = mesh.chain(names)
    first, last = nodes[0], nodes[-1]
    # Same version at both ends with originators "1" and "2": "2" must win everywhere.
    with first.client() as client:
        client.set({"tie": make_value(b"one", version=10, originator_id="1")})
    with last.client() as client:
        client.set({"tie": make_value(b"two", version=10, originator_id="2")})
    wait_for_value(nodes, "tie", has(10, "2", b"two"), timeout=30)
    # A lower version is ignored, whatever its originator.
    with first.client() as client:
        reasons = client.set({"tie": make_value(b"nine", version=9, originator_id="3")})
    assert reasons == {"tie": "OLD_VERSION"}
    for node in nodes:
        with node.client() as client:
            assert has(10, "2", b"two")(client.get(["tie"]).get("tie"))


def test_lower_version_from_peer_is_not_reflooded(mesh: Mesh) -> None:
    a, b, c = mesh.chain(["a", "b", "c"])
    with a.client() as client:
        client.set({"v": make_value(b"new", version=5, originator_id="a")})
    wait_for_value([a, b, c], "v", has(5, "a", b"new"))
    with c.client() as client:
        before = client.counters()["kvstore.received_publications"]
    # b gets an older version as if flooded by a: it must drop it and not pass it on.
    with b.client() as client:
        reasons = client.set({"v": make_value(b"old", version=4, originator_id="z")})
        assert reasons == {"v": "OLD_VERSION"}
        client.send_oneway({"w": make_value(b"x", version=1, originator_id="a")})
    wait_for_value([a, b, c], "w", has(1, "a", b"x"))
    with c.client() as client:
        after = client.counters()["kvstore.received_publications"]
        assert client.get(["v"])["v"].value == b"new"
    assert after - before == 1  # only "w" came through


def test_looped_publication_is_dropped_and_counted(mesh: Mesh) -> None:
    _a, b = mesh.chain(["a", "b"])

    looped = Request(
        cmd=Command.KEY_SET,
        key_set=KeySetParams(
            key_vals={"loop": make_value(b"x", version=1, originator_id="x")},
            solicit_response=True,
            node_ids=["x", "b", "y"],
        ),
    )
    with b.client() as client:
        response = client.request_raw(wire.encode(looped))
        assert response.error is None
        assert "loop" not in client.get(["loop"])
        wait_until(lambda: client.counters()["kvstore.looped_publications"] == 1)


def test_rate_limited_node_buffers_and_loses_nothing(mesh: Mesh) -> None:
    """b may send 1 publication per second (burst 1): however many updates go through it,
    what it sends stays within the tokens it had, and c still gets every key's last value."""
    a = mesh.allocate("a")
    b = mesh.allocate("b", flood_msg_per_sec=1, flood_msg_burst=1)
    c = mesh.allocate("c")
    a.peers["b"] = b.cmd_url
    b.peers.update({"a": a.cmd_url, "c": c.cmd_url})
    c.peers["b"] = b.cmd_url
    for node in (a, b, c):
        mesh.start(node, wait=False)
    for node in (a, b, c):
        mesh.wait_ready(node)
    keys = 30
    started = time.monotonic()  # before the baseline: tokens are counted from here
    with b.client() as client_b:
        sent_before = client_b.counters().get("kvstore.sent_publications", 0)
        with a.client() as client:
            for i in range(keys):
                # One publication each reaching b (b has it before the next): without the
                # limiter, b would flood 30 publications to c.
                client.set({f"rl/{i}": make_value(b"x", version=1, originator_id="a")})
                wait_for_value([b], f"rl/{i}", lambda v: v is not None)
            for version in range(1, 31):
                client.set(
                    {"rl/hot": make_value(b"v%d" % version, version=version, originator_id="a")}
                )
        wait_for_value([c], "rl/hot", has(30, "a", b"v30"), timeout=60)
        with c.client() as client:
            wait_until(lambda: len(client.hash_dump(prefix="rl/")) == keys + 1, timeout=60)
        counters = client_b.counters()
    elapsed_s = time.monotonic() - started
    sent = counters["kvstore.sent_publications"] - sent_before
    assert counters["kvstore.rate_limit_suppress"] >= 1
    # At most the burst plus one token per second of the whole run (+1 for the refill that
    # may land between the last send and the clock read): far fewer than the 60 updates.
    assert sent <= 1 + elapsed_s + 1, (sent, elapsed_s)


def peer_flood(node_ids: list[str], key_vals: dict[str, Value]) -> bytes:
    return wire.encode(
        Request(
            cmd=Command.KEY_SET,
            key_set=KeySetParams(key_vals=key_vals, solicit_response=False, node_ids=node_ids),
        )
    )


def test_peer_publication_is_forwarded_as_received_or_reencoded(mesh: Mesh) -> None:
    _a, b, c = mesh.chain(["a", "b", "c"])
    plain = {f"fw/{i:02d}": make_value(b"v%d" % i, version=1, originator_id="a") for i in range(40)}
    finite = {
        f"fw/ttl/{i:02d}": make_value(b"t", version=1, originator_id="a", ttl_ms=60_000)
        for i in range(40)
    }
    with c.client() as client, client.subscribe(prefix="fw/") as subscription:
        with b.client() as injector:
            wait_subscription_live(injector, subscription, "fw/probe")
            # As if b's peer a flooded them: b applies them and floods them on to c.
            peer: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.DEALER)
            try:
                peer.connect(b.cmd_url)
                peer.send_multipart([b"", peer_flood(["a"], plain)])
                peer.send_multipart([b"", peer_flood(["a"], finite)])
            finally:
                peer.close(linger=1000)

            seen: dict[str, Value] = {}
            paths: list[list[str] | None] = []

            def all_published() -> bool:
                publication = subscription.recv(timeout_s=0.5)
                key_vals = publication.key_vals if publication is not None else None
                if publication is not None and key_vals and "fw/probe" not in key_vals:
                    seen.update(key_vals)
                    paths.append(publication.node_ids)
                return set(plain) | set(finite) <= set(seen)

            wait_until(all_published, message="both publications on c")
        got = client.get(list(plain) + list(finite))
    # c got them over the flood path a -> b -> c, with the values a set.
    assert paths and all(path == ["a", "b", "c"] for path in paths)
    for key, value in plain.items():
        assert got[key].value == value.value
        assert got[key].hash == value_hash(1, "a", value.value)
    for key, value in finite.items():
        assert got[key].value == value.value and 0 < got[key].ttl_ms < 60_000
    with b.client() as client:
        counters = client.counters()
    # The infinite-TTL publication went on as received; the finite one needed new TTLs.
    assert counters["kvstore.flood.forwarded_publications"] == 1
    assert counters["kvstore.sent_key_vals"] >= 80

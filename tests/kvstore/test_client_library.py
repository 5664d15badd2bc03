"""Client library: sync and asyncio clients against a real node and against a misbehaving server."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest
import zmq

from kvstore import wire
from kvstore.aioclient import AsyncKvStoreClient
from kvstore.client import (
    KvStoreClient,
    KvStoreError,
    KvStoreRequestError,
    KvStoreTimeout,
    make_value,
)
from kvstore.gen.kvstore_thrift.ttypes import NodeInfo, PeerState, Request, Response
from tests.kvstore.conftest import Mesh, Node, free_port
from tests.util import wait_until


@pytest.fixture
def node(mesh: Mesh) -> Node:
    return mesh.start(mesh.allocate("lib"))


def test_sync_client_round_trip(node: Node) -> None:
    with node.client() as client:
        info = client.node_info()
        assert (info.name, info.cmd_url, info.pub_url) == ("lib", node.cmd_url, node.pub_url)
        sent, reason = client.set_key("a/x", b"1")
        assert reason is None and (sent.version, sent.originator_id) == (1, "lib")
        sent, reason = client.set_key("a/x", b"2")
        assert sent.version == 2
        client.set({"b/y": make_value(b"3", version=4, originator_id="other", ttl_ms=30_000)})
        assert client.get(["a/x", "nope"]).keys() == {"a/x"}
        assert client.dump(prefix="a/").keys() == {"a/x"}
        assert client.dump(originator_ids=["other"]).keys() == {"b/y"}
        hashes = client.hash_dump()
        assert hashes.keys() == {"a/x", "b/y"}
        assert all(h.value is None and h.hash is not None for h in hashes.values())
        assert 0 < hashes["b/y"].ttl_ms <= 30_000
        assert client.counters()["kvstore.num_keys"] == 2
        assert client.peers() == {}
        with pytest.raises(KvStoreRequestError) as refused:
            client.add_peer("lib", "tcp://127.0.0.1:1")
        assert refused.value.code == wire.BAD_ARGUMENT


def test_subscription_with_prefix_filter(node: Node) -> None:
    with node.client() as client, client.subscribe(prefix="watch/") as subscription:
        versions = iter(range(1, 10_000))
        received = []

        def got_one() -> bool:
            version = next(versions)
            client.set({"other": make_value(b"o", version=version, originator_id="t")})
            client.set({"watch/k": make_value(b"w", version=version, originator_id="t")})
            publication = subscription.recv(timeout_s=0.1)
            if publication is not None:
                received.append(publication)
            return bool(received)

        wait_until(got_one, timeout=20, message="publication received")
        for publication in received:
            assert set(publication.key_vals) == {"watch/k"}
            assert publication.node_ids == ["lib"]
        # Publications without the prefix's bytes are skipped without being decoded.

        def skipped_one() -> bool:
            client.set({"unrelated": make_value(b"u", version=next(versions), originator_id="t")})
            assert subscription.recv(timeout_s=0.05) is None
            return subscription.skipped > 0

        wait_until(skipped_one, timeout=20, message="other-key publications skipped undecoded")
        assert subscription.malformed == 0


def test_timeout_never_hangs() -> None:
    url = f"tcp://127.0.0.1:{free_port()}"
    with KvStoreClient(url, timeout_s=0.3) as client, pytest.raises(KvStoreTimeout):
        client.get(["x"])


def test_bad_url() -> None:
    with KvStoreClient("nonsense://x", timeout_s=0.3) as client, pytest.raises(KvStoreError):
        client.get(["x"])


@pytest.fixture
def slow_server() -> Iterator[tuple[str, threading.Event]]:
    """A ROUTER that answers NODE_INFO only after `release` is set, then answers at once."""
    sock: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    port = sock.bind_to_random_port("tcp://127.0.0.1")
    release = threading.Event()
    stop = threading.Event()

    def serve() -> None:
        held: list[list[bytes]] = []
        while not stop.is_set():
            if sock.poll(20):
                held.append(sock.recv_multipart())
            if release.is_set():
                for frames in held:
                    reply = Response(node_info=NodeInfo(name=f"reply-to-{frames[1].hex()}"))
                    sock.send_multipart([*frames[:-1], wire.encode(reply)])
                held.clear()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"tcp://127.0.0.1:{port}", release
    finally:
        stop.set()
        thread.join(timeout=5)
        sock.close(linger=0)


def test_late_reply_is_not_taken_for_the_next_answer(
    slow_server: tuple[str, threading.Event],
) -> None:
    url, release = slow_server
    with KvStoreClient(url, timeout_s=0.3) as client:
        with pytest.raises(KvStoreTimeout):
            client.node_info(refresh=True)
        release.set()
        info = client.node_info(refresh=True)
        # The answer to the second request (correlation id 2), not the first one's late reply.
        assert info.name == f"reply-to-{(2).to_bytes(8, 'big').hex()}"


def test_async_client_concurrent_requests(mesh: Mesh) -> None:
    a, b = mesh.chain(["x", "y"])

    async def scenario() -> None:
        async with AsyncKvStoreClient(a.cmd_url) as client:
            results = await asyncio.gather(
                *(
                    client.set({f"k{i}": make_value(b"v", version=1, originator_id="x")})
                    for i in range(50)
                )
            )
            assert all(r == {} for r in results)
            assert len(await client.dump(prefix="k")) == 50
            assert len(await client.hash_dump()) == 50
            peers = await client.peers()
            assert peers["y"].state == PeerState.INITIALIZED
            assert (await client.counters())["kvstore.num_keys"] == 50
            info = await client.node_info()
            assert info.name == "x"
            subscription = await client.subscribe(prefix="late")
            try:
                versions = iter(range(1, 10_000))

                async def publication() -> object:
                    while True:
                        await client.set(
                            {"late": make_value(b"l", version=next(versions), originator_id="x")}
                        )
                        try:
                            return await asyncio.wait_for(subscription.recv(), 0.2)
                        except TimeoutError:
                            continue

                got = await asyncio.wait_for(publication(), 20)
                assert set(got.key_vals) == {"late"}  # type: ignore[attr-defined]
            finally:
                subscription.close()
        async with AsyncKvStoreClient(f"tcp://127.0.0.1:{free_port()}", timeout_s=0.3) as dead:
            with pytest.raises(KvStoreTimeout):
                await dead.request(Request(cmd=10))

    asyncio.run(scenario())
    with b.client() as client:
        wait_until(lambda: len(client.dump(prefix="k")) == 50, timeout=20)

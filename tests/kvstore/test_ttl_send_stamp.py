"""A stalled sender must not lengthen the TTLs it sends (issue 29, the TTL refresh flake).

A node computes the remaining TTL of what it sends at one instant (`now`, monotonic) and stamps
the message with its wall clock (`timestamp_ms`) so the receiver charges the time in transit.
If the stamp is read later than `now` (the node stalled in between: publishing to subscribers,
encoding, a dump of a big store, a process descheduled under load), that time was charged to no
one, and the receiver kept the key that much longer than its sender: at each hop, and again at
each re-introduction by a sync. The stamp is now the wall time of `now` (`shell.wall_at`).

Two nodes in this process (real sockets); the sender is made to stall after it read `now`
(an injected delay, `time.sleep`, in a step that runs between reading the clock and sending).
The key's absolute expiry at the receiver (monotonic ms: one clock in one process) must not be
later than at the sender.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from kvstore.aioclient import AsyncKvStoreClient
from kvstore.config import NodeConfig, PeerAddress
from kvstore.gen.kvstore_thrift.ttypes import Publication, Value
from kvstore.node import KvStoreNode

STALL_S = 0.6
TTL_MS = 3000


async def _deadline(condition: object, timeout: float, message: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        if time.monotonic() >= deadline:
            raise AssertionError(f"not within {timeout}s: {message}")
        await asyncio.sleep(0.01)


def _node(name: str, peers: dict[str, PeerAddress] | None = None) -> KvStoreNode:
    return KvStoreNode(NodeConfig(name=name, cmd_url="tcp://127.0.0.1:*",
                                  pub_url="tcp://127.0.0.1:*", peers=peers or {},
                                  sync_interval_s=0))


def test_a_sender_stalled_after_reading_its_clock_does_not_lengthen_the_ttl() -> None:
    async def scenario() -> None:
        b = _node("b")
        await b.start()
        a = _node("a", {"b": PeerAddress(b.cmd_url)})
        try:
            await a.start()
            assert a.peering is not None
            await _deadline(lambda: a.peering is not None and a.peering.initial_sync_done,
                            20, "a synced with b")
            publish = a._publish

            def stalled_publish(publication: Publication) -> None:
                if publication.key_vals and "k" in publication.key_vals:
                    time.sleep(STALL_S)  # after flush_floods read `now`, before the flood
                publish(publication)

            a._publish = stalled_publish  # type: ignore[method-assign]
            async with AsyncKvStoreClient(a.cmd_url) as client:
                await client.set({"k": Value(1, "a", b"v", TTL_MS, 0)})
            await _deadline(lambda: "k" in b.db, 20, "the key flooded to b")
            at_a = a.db._kv["k"].ttl_ms  # absolute expiry, monotonic ms
            at_b = b.db._kv["k"].ttl_ms
            assert at_b <= at_a, (
                f"b keeps the key {at_b - at_a} ms longer than a, its only source "
                f"(a stalled {STALL_S * 1000:.0f} ms between reading its clock and sending)")
        finally:
            a.close()
            b.close()

    asyncio.run(scenario())


def test_a_sync_reply_stalled_after_reading_the_clock_does_not_lengthen_the_ttl() -> None:
    """The same on the full-sync path: b answers a's sync with its key, and stalls between
    reading its clock and stamping the reply (the difference of a big store takes time)."""

    async def scenario() -> None:
        b = _node("b")
        await b.start()
        a: KvStoreNode | None = None
        try:
            async with AsyncKvStoreClient(b.cmd_url) as client:
                await client.set({"k": Value(1, "b", b"v", TTL_MS, 0)})
            difference = b.db.dump_difference

            def stalled_difference(*args: Any, **kwargs: Any) -> Any:
                result = difference(*args, **kwargs)
                time.sleep(STALL_S)  # after _cmd_key_dump read `now`, before the stamp
                return result

            b.db.dump_difference = stalled_difference  # type: ignore[method-assign]
            a = _node("a", {"b": PeerAddress(b.cmd_url)})
            await a.start()
            node_a = a
            await _deadline(lambda: "k" in node_a.db, 20, "the key synced to a")
            at_a = a.db._kv["k"].ttl_ms
            at_b = b.db._kv["k"].ttl_ms
            assert at_a <= at_b, (
                f"a keeps the key {at_a - at_b} ms longer than b, its only source "
                f"(b stalled {STALL_S * 1000:.0f} ms before stamping its sync reply)")
        finally:
            if a is not None:
                a.close()
            b.close()

    asyncio.run(scenario())

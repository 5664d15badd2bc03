"""Multi-process TTL behaviour: expiry everywhere, expiry publications, refresh, persisted keys."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from kvstore.aioclient import AsyncKvStoreClient, KeyManager
from kvstore.client import make_value
from kvstore.gen.kvstore_thrift.ttypes import Value
from tests.kvstore.conftest import Mesh, Node, wait_for_value, wait_subscription_live
from tests.util import wait_until


async def async_wait_until(
    condition: Callable[[], Awaitable[bool]], timeout: float = 20.0, message: str = ""
) -> None:
    """The asyncio twin of tests.util.wait_until (polls without blocking the loop)."""
    deadline = time.monotonic() + timeout
    while not await condition():
        if time.monotonic() >= deadline:
            raise AssertionError(f"condition not met within {timeout}s: {message}")
        await asyncio.sleep(0.02)


def test_ttl_expiry_everywhere_and_expired_key_publication(mesh: Mesh) -> None:
    a, b, c = mesh.chain(["a", "b", "c"])
    with c.client() as client, client.subscribe() as subscription:
        # Make sure the subscription is live before the key is set (ZeroMQ's slow joiner).
        with a.client() as writer:
            wait_subscription_live(writer, subscription)
            writer.set({"short": make_value(b"bye", version=1, originator_id="a", ttl_ms=1500)})
        wait_for_value([a, b, c], "short", lambda v: v is not None and 0 < v.ttl_ms <= 1500)
        expired_seen: list[str] = []

        def expired_on_c() -> bool:
            publication = subscription.recv(timeout_s=0.2)
            if publication is not None:
                expired_seen.extend(publication.expired_keys or ())
            return "short" in expired_seen

        wait_until(expired_on_c, timeout=20, message="expired-key publication on c")
    wait_for_value([a, b, c], "short", lambda v: v is None, timeout=20)
    for node in (a, b, c):
        with node.client() as client:
            counters = client.counters()
            assert counters["kvstore.expired_key_vals"] == 1, node.name
            # Expired keys are never flooded: nothing was sent after the expiry itself.
            assert "short" not in client.dump()


def test_short_ttl_is_applied_locally_but_not_flooded(mesh: Mesh) -> None:
    # A threshold far above the key's TTL: the key is alive on a for as long as the test reads.
    a, b = mesh.chain(["a", "b"], ttl_threshold_ms=120_000)
    with a.client() as client:
        client.set({"brief": make_value(b"x", version=1, originator_id="a", ttl_ms=60_000)})
        client.set({"marker": make_value(b"m", version=1, originator_id="a")})
        on_a = client.get(["brief"])
    assert "brief" in on_a and on_a["brief"].value == b"x"  # applied locally
    wait_for_value([b], "marker", lambda v: v is not None)
    with b.client() as client:
        assert "brief" not in client.get(["brief"])
    with a.client() as client:
        assert client.counters()["kvstore.flood.dropped_keys"] >= 1


def test_ttl_refresh_keeps_key_alive(mesh: Mesh) -> None:
    """A key refreshed (TTL-only updates) lives; once the refreshes stop it expires everywhere.

    Once seen failing under load: the key still at c 10 s after the refreshes stopped. Why no
    node can keep it longer than the last refresh's TTL (docs/kvstore.md, "TTL"): every copy of
    the key descends from a's last merge through floods and syncs; each hop's sender stamps what
    it sends with the wall time of the instant its remaining TTL was read, and the receiver
    charges the age; a node that expired the key takes it back only with what a sender still
    has left. One leak was found and fixed: a sender that stalled between reading its clock
    and stamping (tests/kvstore/test_ttl_send_stamp.py). Outside the nodes, a stall of the test
    process itself (a reply read long after c sent it) looks the same from here: the failure
    message says how long the last poll took, and what each node holds, with its counters."""
    a, _b, c = mesh.chain(["a", "b", "c"])

    async def scenario() -> None:
        async with AsyncKvStoreClient(a.cmd_url) as client, KeyManager(client) as keys:
            await keys.set_key("alive", b"yes", ttl_ms=1000)
            # Four TTLs' worth of time: without refreshes the key would be long gone.
            started = time.monotonic()
            async with AsyncKvStoreClient(c.cmd_url) as far:

                async def arrived() -> bool:
                    return "alive" in await far.get(["alive"])

                await async_wait_until(arrived, message="key at the far end")

                async def refreshed_many_times() -> bool:
                    value = (await far.get(["alive"])).get("alive")
                    assert value is not None, "key expired despite refreshes"
                    return time.monotonic() - started > 4.0 and value.ttl_version >= 8

                await async_wait_until(refreshed_many_times, timeout=30)
                assert keys.counters["refreshes"] >= 8
                # Stop refreshing: now it expires everywhere.
                keys.unset_key("alive")
                stopped = time.monotonic()
                polls: list[tuple[float, float, Value | None]] = []  # (sent, answered, value)

                async def gone() -> bool:
                    sent = time.monotonic()
                    value = (await far.get(["alive"])).get("alive")
                    polls.append((sent - stopped, time.monotonic() - stopped, value))
                    return value is None

                try:
                    await async_wait_until(gone, timeout=10)
                except AssertionError:
                    raise AssertionError(
                        await _ttl_diagnosis((a, _b, c), "alive", keys.counters, polls)
                    ) from None

    asyncio.run(scenario())
    with a.client() as client:
        assert "alive" not in client.get(["alive"])


_TTL_COUNTERS = (
    "kvstore.expired_key_vals", "kvstore.ttl.expired_in_transit", "kvstore.ttl.clock_ahead",
    "kvstore.ttl.transit_age_ms_max", "kvstore.full_sync.success", "kvstore.peer_silent",
)


def _held(value: Value | None) -> str:
    if value is None:
        return "absent"
    return (f"ttl left {value.ttl_ms} ms, ttl_version {value.ttl_version}, version "
            f"{value.version}, originator {value.originator_id!r}")


async def _ttl_diagnosis(
    nodes: tuple[Node, ...], key: str, sent: dict[str, int],
    polls: list[tuple[float, float, Value | None]],
) -> str:
    """What to know when a key outlived its refreshes: each poll of the far node (when sent and
    answered, seconds after the refreshes stopped: a long one means the test process or that
    node stalled, not the key living on), and what each node holds now with its TTL counters."""
    shown = polls if len(polls) <= 6 else polls[:3] + polls[-3:]
    lines = [f"'{key}' still held {polls[-1][1]:.1f}s after the refreshes stopped "
             f"({sent['refreshes']} refreshes sent, {len(polls)} polls of the far node; first "
             "and last, seconds after the stop when sent - answered: "
             + ", ".join(f"{s:.2f}-{r:.2f} {_held(v)}" for s, r, v in shown) + ")"]
    for node in nodes:
        async with AsyncKvStoreClient(node.cmd_url) as each:
            asked = time.monotonic()
            value = (await each.get([key])).get(key)
            counters = await each.counters()
        wall = time.time()
        lines.append(f"  {node.name} at {wall:.3f} (monotonic {asked:.3f}): {_held(value)}; "
                     + ", ".join(f"{name.removeprefix('kvstore.')}={counters.get(name, 0)}"
                                 for name in _TTL_COUNTERS))
    return "\n".join(lines)


def test_persist_key_wins_back_an_overridden_key(mesh: Mesh) -> None:
    a, b, c = mesh.chain(["a", "b", "c"])

    async def scenario() -> None:
        async with AsyncKvStoreClient(a.cmd_url) as client, KeyManager(client) as keys:
            first = await keys.persist_key("owned", b"mine")
            assert (first.version, first.originator_id) == (1, "a")
            async with AsyncKvStoreClient(c.cmd_url) as far:

                async def arrived() -> bool:
                    value = (await far.get(["owned"])).get("owned")
                    return value is not None and value.value == b"mine"

                await async_wait_until(arrived)
                # Someone else takes the key over with a much higher version.
                await far.set({"owned": Value(7, "zzz", b"theirs", -2147483648, 0)})

                async def won_back() -> bool:
                    value = (await far.get(["owned"])).get("owned")
                    return (
                        value is not None
                        and value.value == b"mine"
                        and value.originator_id == "a"
                        and value.version > 7
                    )

                await async_wait_until(won_back, timeout=20, message="persisted value back")
            assert keys.counters["overrides_defended"] >= 1

    asyncio.run(scenario())
    for node in (a, b, c):
        with node.client() as client:
            value = client.get(["owned"])["owned"]
            assert (value.value, value.originator_id) == (b"mine", "a")


def test_persisted_key_the_store_lost_is_advertised_again(mesh: Mesh) -> None:
    """KeyManager's periodic store check: the node restarts empty and nothing tells the manager
    (no publication says "gone"); the check finds the persisted key missing and re-advertises it."""
    a = mesh.start(mesh.allocate("a"))
    cmd_url = a.cmd_url

    async def scenario() -> None:
        async with AsyncKvStoreClient(a.cmd_url) as client, KeyManager(
            client, check_interval_s=0.3
        ) as keys:
            await keys.persist_key("kept", b"mine")
            advertised = keys.counters["advertised"]
            a.kill()
            mesh.start(a)  # in-memory store: it comes back without the key
            assert a.cmd_url == cmd_url, "restarted on other ports"
            async with AsyncKvStoreClient(a.cmd_url) as probe:

                async def back() -> bool:
                    value = (await probe.get(["kept"])).get("kept")
                    return value is not None and value.value == b"mine"

                await async_wait_until(back, timeout=30, message="re-advertised by the check")
            assert keys.counters["advertised"] > advertised

    asyncio.run(scenario())


def test_subscribe_key_callbacks_and_clear_key(mesh: Mesh) -> None:
    (a,) = mesh.chain(["a"])

    async def scenario() -> None:
        seen: list[tuple[str, bytes | None]] = []

        def on_change(key: str, value: Value | None) -> None:
            seen.append((key, None if value is None else value.value))

        async with AsyncKvStoreClient(a.cmd_url) as client, KeyManager(client) as keys:
            await keys.subscribe_key("watched", on_change)
            # The stream needs a moment to attach (slow joiner): write new versions until seen.
            versions = iter(range(1, 1000))

            async def first_seen() -> bool:
                await client.set({"watched": Value(next(versions), "w", b"v1", 60_000, 0)})
                return ("watched", b"v1") in seen

            await async_wait_until(first_seen, message="first update seen")
            await client.set({"watched": Value(next(versions), "w", b"v2", 1000, 0)})

            async def expired() -> bool:
                return ("watched", None) in seen

            await async_wait_until(expired, timeout=10, message="expiry callback")
            assert ("watched", b"v2") in seen
            # clear_key: a tombstone (empty value) at a higher version.
            await keys.set_key("gone", b"x")
            tombstone = await keys.clear_key("gone")
            assert tombstone is not None and tombstone.version == 2
            stored = (await client.get(["gone"]))["gone"]
            assert (stored.version, stored.value) == (2, b"")

    asyncio.run(scenario())

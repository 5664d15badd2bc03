"""`GET /stream` against a real node process: list-then-watch without a gap, authorisation,
the cap on streams, a client that does not read, heartbeats (kvmesh.agent.stream_hub)."""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from kvmesh.agent.http_api import HttpApi
from kvmesh.agent.sse import EventParser
from kvstore import make_value
from tests.agent.test_http_security import GOOD, READ_TOKEN, StubBackend, policy
from tests.kvstore.conftest import Mesh, Node
from tests.kvstore.conftest import mesh as mesh  # the fixture
from tests.util import wait_until

pytestmark = pytest.mark.process


@pytest.fixture
def node(mesh: Mesh) -> Node:
    return mesh.start(mesh.allocate("s1"))


@pytest.fixture
def api(node: Node) -> Iterator[HttpApi]:
    server = HttpApi(StubBackend(), "127.0.0.1", 0, security=policy(), node="n1",
                     kv_url=node.cmd_url, max_streams=2)
    try:
        yield server
    finally:
        server.close()


def open_stream(api: HttpApi, query: str, headers: dict[str, str] | None = None
                ) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
    conn = http.client.HTTPConnection(*api.address, timeout=10)
    conn.request("GET", f"/stream?{query}", headers=GOOD if headers is None else headers)
    return conn, conn.getresponse()


def events(resp: http.client.HTTPResponse) -> Iterator[tuple[str, dict[str, Any]]]:
    parser = EventParser()
    for raw in resp:
        event = parser.feed(raw.decode())
        if event is not None:
            yield event[0], json.loads(event[1])


def test_snapshot_then_live_changes_without_gap_or_duplicate(api: HttpApi, node: Node) -> None:
    """A writer keeps changing keys while the client connects: the snapshot and the live
    events together end exactly at the node's state, each version once."""
    stop = threading.Event()

    def write() -> None:
        with node.client() as client:
            version = 0
            while not stop.is_set():
                version += 1
                # A new key each time (one lost event is never repaired by a later one), and
                # one key changing all along (sent twice unless de-duplicated by version).
                client.set({f"p/k{version}": make_value(b"new", version=1, originator_id="t"),
                            "p/hot": make_value(f"v{version}".encode(), version=version,
                                                originator_id="t"),
                            "other/x": make_value(b"-", version=version, originator_id="t")})

    writer = threading.Thread(target=write)
    writer.start()
    try:
        time.sleep(0.2)  # the writer is mid-flight when the stream starts (not a sync point)
        conn, resp = open_stream(api, "prefix=p/&snapshot=1")
        assert resp.status == 200
        assert str(resp.getheader("Content-Type")).startswith("text/event-stream")
        seen: dict[str, int] = {}
        pairs: list[tuple[str, int]] = []
        synced = False
        deadline = time.monotonic() + 2.0
        for kind, data in events(resp):
            if kind == "synced":
                synced = True
                deadline = time.monotonic() + 1.0
                continue
            assert data["key"].startswith("p/")
            pairs.append((data["key"], data["version"]))
            assert data["version"] > seen.get(data["key"], 0), "a version went back"
            seen[data["key"]] = data["version"]
            if synced and time.monotonic() > deadline:
                break
        stop.set()
        writer.join()
        # Everything written after we stopped reading arrives too: read until it matches.
        with node.client() as client:
            final = {k: v.version for k, v in client.dump("p/").items()}
        for _kind, data in events(resp):
            seen[data["key"]] = data["version"]
            pairs.append((data["key"], data["version"]))
            if seen == final:
                break
        assert seen == final
        assert len(pairs) == len(set(pairs)), "an event was sent twice"
        conn.close()
    finally:
        stop.set()
        writer.join()


def test_reads_need_a_token_and_a_reader_token_will_do(api: HttpApi) -> None:
    conn, resp = open_stream(api, "prefix=", headers={})
    assert resp.status == 401
    conn.close()
    conn, resp = open_stream(api, "prefix=&snapshot=1",
                             headers={"Authorization": f"Bearer {READ_TOKEN}"})
    assert resp.status == 200
    assert next(kind for kind, _ in events(resp)) == "synced"
    conn.close()
    conn, resp = open_stream(api, "prefix=&bogus=1")
    assert resp.status == 400 and "bogus" in resp.read().decode()
    conn.close()


def test_at_most_max_streams_and_a_closed_client_frees_its_place(api: HttpApi) -> None:
    first = open_stream(api, "prefix=a")
    second = open_stream(api, "prefix=b")
    assert first[1].status == second[1].status == 200
    conn, resp = open_stream(api, "prefix=c")
    assert resp.status == 503 and "--http-max-streams" in resp.read().decode()
    conn.close()
    assert api.counters.get("streams_refused") == 1
    first[1].close()  # (the response holds the socket: both go)
    first[0].close()
    assert api.hub is not None
    wait_until(lambda: api.hub is not None and api.hub.open_streams == 1, timeout=5,
               message="the closed stream's place freed")
    conn, resp = open_stream(api, "prefix=c")
    assert resp.status == 200
    conn.close()
    second[0].close()


def test_a_client_that_does_not_read_is_dropped_with_a_final_event(api: HttpApi,
                                                                     node: Node) -> None:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(api.address)
    sock.sendall(f"GET /stream?prefix=big/ HTTP/1.1\r\nHost: x\r\n"
                 f"Authorization: {GOOD['Authorization']}\r\n\r\n".encode())
    wait_until(lambda: api.hub is not None and api.hub.open_streams == 1, timeout=5,
               message="stream open")
    blob = b"x" * (256 * 1024)
    with node.client() as client:
        version = 0

        def dropped() -> bool:
            nonlocal version
            version += 1
            client.set({f"big/{version}": make_value(blob, version=1, originator_id="t")})
            return api.counters.get("streams_dropped", 0) == 1

        wait_until(dropped, timeout=60, message="the client that does not read dropped")
    assert version * len(blob) < 64 * 1024 * 1024  # bounded: not everything was queued
    sock.settimeout(10)
    received = b""
    while chunk := sock.recv(1 << 20):
        received += chunk
    assert received.rstrip().endswith(b"}") and b"event: dropped" in received[-300:]
    sock.close()
    wait_until(lambda: api.hub is not None and api.hub.open_streams == 0, timeout=5,
               message="the dropped client's place freed")


def test_idle_stream_gets_heartbeats(api: HttpApi) -> None:
    assert api.hub is None  # made on first use
    api.stream_hub().heartbeat_s = 0.2
    conn, resp = open_stream(api, "prefix=nothing-here/")
    assert resp.status == 200
    started = time.monotonic()
    assert resp.readline() == b": heartbeat\n"
    assert time.monotonic() - started < 5
    conn.close()

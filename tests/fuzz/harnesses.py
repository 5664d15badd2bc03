"""One function per harness: bytes from outside in, every invariant asserted.

Each harness feeds its bytes to the real code the way the outside world would reach it, and
raises AssertionError (or lets an unexpected exception escape) on a finding. Expected refusals
(error replies, decode errors, BadRequest...) are not findings. The same functions serve the
coverage-guided fuzzer (`python -m tests.fuzz.run`, atheris) and the replay of the committed
corpus and regressions in the test suite.

- `request`: a command-socket payload through `KvStoreNode._handle_command` (every command and
  its fields, flood-path KEY_SETs, full-sync KEY_DUMPs with hashes, DIGEST_GETs). The node must
  answer every request but a one-way KEY_SET, never with INTERNAL, and its store stays sound.
- `sync_reply`: a peer's replies to this node's full-sync requests, through `SyncSession` and
  the merge, as `node_peers` handles them.
- `agent_value`: a desired-state value (msgpack) through `decode_config_value` and the model
  validation of every model key.
- `rest_query`: an agent REST request target through `http_api.dispatch` and its parameter
  parsers: 400 for bad parameters, never 500.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable
from typing import Any

from kvmesh.agent.desired import DesiredState, ValueDecodeError, decode_config_value
from kvmesh.agent.http_api import ROUTES, dispatch
from kvmesh.agent.models import ModelError, validate_model
from kvstore import wire
from kvstore.config import NodeConfig, PeerAddress
from kvstore.db import KvStoreDb
from kvstore.gen.kvstore_thrift.ttypes import Command, Value
from kvstore.node import KvStoreNode
from kvstore.node_sync import SyncProtocolError, SyncSession
from kvstore.value import TTL_INFINITY

# ---------------------------------------------------------------------- request


class _CapturingSocket:
    """Stands in for the ROUTER: keeps the replies."""

    closed = False

    def __init__(self) -> None:
        self.sent: list[list[bytes]] = []

    def send_multipart(self, frames: list[bytes], flags: int = 0) -> None:
        self.sent.append(list(frames))

    def fileno(self) -> int:
        return -1

    def close(self, linger: int = 0) -> None:
        pass


class _FakePeering:
    """Peers without sockets: a fuzzer must not connect anywhere."""

    initial_sync_done = True

    def __init__(self) -> None:
        self.links: dict[str, PeerAddress] = {}
        self.resyncs: list[str] = []  # peers a flood showed diverged (Peering.resync_diverged)

    def add(self, name: str, cmd_url: str, pub_url: str) -> None:
        self.links[name] = PeerAddress(cmd_url, pub_url)

    def remove(self, name: str) -> None:
        self.links.pop(name, None)

    def specs(self) -> dict[str, Any]:
        return {}

    def flood(self, *args: Any) -> None:
        pass

    def learn_filter(self, name: str, key_filter: Any) -> None:
        """A sync request's leaf filters (no peers here: nothing to learn)."""

    def resync_diverged(self, name: str) -> None:
        self.resyncs.append(name)

    def redial_unsynced(self, quiet_ms: int, only: str | None = None) -> list[str]:
        """A membership change or a peer syncing with the node (no sockets: nothing to dial)."""
        return []

    def gauges(self) -> dict[str, int]:
        return {}

    def tick(self, now: int) -> None:
        pass

    def close(self) -> None:
        pass


_node: KvStoreNode | None = None
_loop: asyncio.AbstractEventLoop | None = None
MAX_MESSAGE = 256 * 1024


def _request_node() -> KvStoreNode:
    global _node, _loop
    if _node is None:
        _loop = asyncio.new_event_loop()
        tag = f"{os.getpid()}-{id(_loop)}"
        node = KvStoreNode(NodeConfig(
            name="fuzz", cmd_url=f"inproc://fuzz-cmd-{tag}", pub_url=f"inproc://fuzz-pub-{tag}",
            max_message_bytes=MAX_MESSAGE, sync_interval_s=0, max_peers=64,
        ))
        _loop.run_until_complete(node.start())
        assert node.peering is not None and node._cmd is not None
        node.peering.close()
        node.peering = _FakePeering()  # type: ignore[assignment]
        _loop.remove_reader(node._cmd.fileno())
        node._cmd.close(linger=0)
        node._cmd = _CapturingSocket()  # type: ignore[assignment]
        _node = node
    return _node


def request(data: bytes) -> None:
    node = _request_node()
    sock: _CapturingSocket = node._cmd  # type: ignore[assignment]
    sock.sent.clear()
    internal_before = node.counters["kvstore.errors.INTERNAL"]
    node._handle_command([b"client", b"", data])
    node._merge_ingest()
    node.flush_floods()
    assert node.counters["kvstore.errors.INTERNAL"] == internal_before, "INTERNAL error reply"
    assert not node.counters["kvstore.counters_out_of_range"], "a counter left the i64 range"
    one_way = _is_one_way_key_set(data)
    if not one_way:
        assert len(sock.sent) == 1, f"{len(sock.sent)} replies to one request"
    for frames in sock.sent:
        assert frames[:2] == [b"client", b""], frames[:2]
        wire.decode_response(frames[-1])  # every reply decodes
    problems = node.db.audit()
    assert not problems, problems
    if len(node.db) > 2000:  # keep each run's store small (and the audit cheap)
        for key in list(node.db.keys())[:1000]:
            node.db._remove(key)
        assert not node.db.audit()


def _is_one_way_key_set(data: bytes) -> bool:
    try:
        decoded = wire.decode_request(data, MAX_MESSAGE)
    except wire.DecodeError:
        return False
    params = decoded.key_set
    return (
        decoded.cmd == Command.KEY_SET
        and params is not None
        and params.solicit_response is False
        and params.key_vals is not None
    )


# ---------------------------------------------------------------------- sync replies


def _sync_db() -> KvStoreDb:
    db = KvStoreDb("me")
    db.merge({f"k/{i}": Value(1, "me", str(i).encode(), TTL_INFINITY, 0) for i in range(50)}, 0)
    return db


def _frames(data: bytes) -> list[bytes]:
    """Input format of `sync_reply`: replies, each a 2-byte big-endian length and its bytes."""
    out = []
    while len(data) >= 2:
        size = int.from_bytes(data[:2], "big")
        out.append(data[2 : 2 + size])
        data = data[2 + size :]
    return out


def sync_reply(data: bytes) -> None:
    """Up to 8 replies, each answering the session's next outstanding request."""
    db = _sync_db()
    session = SyncSession("peer", "me", db, started_ms=0, buckets_per_request=64)
    corr_ids = iter(range(1_000_000))
    for raw in _frames(data)[:8]:
        if session.finished:
            break
        for phase, _request in session.next_requests(0):
            session.sent(next(corr_ids).to_bytes(8, "big"), phase)
        if not session.in_flight:
            break
        corr, phase = next(iter(session.in_flight.items()))
        try:
            response = wire.decode_response(raw)
            if response.error is not None:
                raise SyncProtocolError("refused")
            if phase == SyncSession.DIGEST:
                session.on_digest_reply(corr, response)
            else:
                publication = session.on_dump_reply(corr, response)
                if publication.key_vals:
                    db.merge_decoded(wire.decoded_key_vals(publication), 0)
        except (wire.DecodeError, SyncProtocolError, ValueError):
            break  # what node_peers counts as a bad reply and fails the sync on
    problems = db.audit()
    assert not problems, problems


# ---------------------------------------------------------------------- agent values

_MODEL_KEYS = (
    "linux/interface/x",
    "linux/interface/host/lo",
    "linux/route/main/10.0.0.0/24/x",
    "vpp/interface/x",
    "vpp/bd/x",
    "vpp/route/0/10.0.0.0/24/10.0.0.1",
)


def agent_value(data: bytes) -> None:
    try:
        value = decode_config_value(data)
        error = None
    except ValueDecodeError as exc:
        value, error = None, str(exc)
    if value is not None:
        for model_key in _MODEL_KEYS:
            with contextlib.suppress(ModelError):  # a refusal, not a finding
                validate_model(model_key, value)
    # Through the desired state: desired, or refused with the decode error (never silently
    # dropped); a tombstone (b"") is neither.
    state = DesiredState("n")
    state.update({"config/n/linux/interface/x": data})
    refusal = state.take_refusals().get("linux/interface/x")
    assert ("linux/interface/x" in state.desired) == (value is not None)
    assert refusal == error


# ---------------------------------------------------------------------- REST queries


class _Backend:
    """Answers every endpoint with a small fixed document (the parsing is under test)."""

    # What the backend methods answer when a list would not do (ApiBackend's contract).
    _DOCUMENTS: dict[str, Any] = {
        "graph_dot": "digraph {}",
        "metrics_text": "",
        "downstream_resync": {"errors": {}, "record": {"seq": 1}},
        "apply_configuration": {"seq": 1, "errors": {}},
        "assume_current": {"store_state": "SYNCED", "devices": {}, "all_known": True},
        "stats": {},
        "recon_services": {},
    }

    def __getattr__(self, name: str) -> Callable[..., Any]:
        def answer(*args: Any, **kwargs: Any) -> Any:
            return self._DOCUMENTS.get(name, [])

        return answer


_METHODS = ("GET", "POST", "PUT", "DELETE", "HEAD", "PATCH")


def rest_query(data: bytes) -> None:
    """Input format: a route index byte, a method byte, then the query string (latin-1, as
    http.server decodes a request line)."""
    if len(data) < 2:
        return
    routes = sorted(ROUTES)
    method, path = routes[data[0] % len(routes)]
    if data[1] & 0x80:
        method = _METHODS[data[1] % len(_METHODS)]
    query = data[2:].decode("latin-1")
    response = dispatch(_Backend(), method, f"{path}?{query}")
    assert response.status != 500, (method, path, query, response.body[:300])


def http_head(data: bytes) -> None:
    """Input format: raw bytes as a client sends them, read line by line as the agent's REST
    server does; every refusal must be an HttpError with a 4xx/5xx status and a message."""
    from kvmesh.agent.http_wire import (
        HttpError,
        body_length,
        is_end_of_headers,
        parse_header_line,
        parse_request_line,
    )

    lines = data.split(b"\n")
    try:
        start = parse_request_line(lines[0] + b"\n")
        assert start.method and start.target.startswith("/")
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if is_end_of_headers(line + b"\n"):
                break
            name, value = parse_header_line(line + b"\n")
            headers[name] = value
        assert 0 <= body_length(headers, 1024) <= 1024
    except HttpError as exc:
        assert 400 <= exc.status < 600 and exc.message, exc


HARNESSES: dict[str, Callable[[bytes], None]] = {
    "request": request,
    "sync_reply": sync_reply,
    "agent_value": agent_value,
    "rest_query": rest_query,
    "http_head": http_head,
}

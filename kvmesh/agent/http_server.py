"""The REST API's HTTP server: TLS, bearer tokens, and bounds on what one client can hold.

`http_api` decides what each endpoint answers; this module decides who gets to ask and how much
room a connection gets (docs/security.md, "REST API"):

- binds loopback unless told otherwise; any other address needs TLS (`--http-cert/--http-key`),
  checked before the server starts;
- every request is authorised (`http_auth`): writes always need an operator token, reads a
  token too unless `--http-public-reads`; a refusal is a 401/403 JSON answer, counted
  (`auth_refused`) and logged;
- not one thread per connection: one asyncio loop reads every request (a slow client costs a
  buffer, not a thread), and a small pool of worker threads answers complete requests. Each
  request must arrive whole within `request_timeout_s` of its connection being accepted; past
  `max_connections` the oldest connection still sending its request is dropped to make room
  (`evicted_slow`), so trickling clients cannot lock out a client that sends its request at once;
- bounded: request line, total header bytes, body bytes (414/431/413 JSON); methods no endpoint
  serves (TRACE, PUT, ...) get a 405 JSON answer;
- every answer, refusals included, names the node it comes from (`X-Kvmesh-Node`; JSON errors
  also carry `"node"`): a client asking for node h2 and reaching h1's agent can tell, and the CLI
  refuses the answer (kvmesh.rest_client).

One request per connection: every answer closes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from kvmesh.agent.http_auth import Granted, authorize
from kvmesh.agent.http_security import HttpSecurity, check_bind
from kvmesh.agent.http_wire import (
    NODE_HEADER,
    HttpError,
    body_length,
    is_end_of_headers,
    parse_header_line,
    parse_request_line,
    render_response,
)
from kvmesh.agent.proc_net import describe_uid, loopback_peer_uid

log = logging.getLogger("kvmesh.agent.http")

REFUSAL_LOG_INTERVAL_S = 1.0  # at most one log line per interval for refused requests
LINGER_S = 1.0  # how long an error answer waits for the client to stop sending


@dataclass(frozen=True)
class HttpLimits:
    max_request_line: int = 8 * 1024
    max_header_bytes: int = 32 * 1024
    max_body_bytes: int = 1024 * 1024
    request_timeout_s: float = 10.0
    max_connections: int = 256
    workers: int = 8  # threads answering complete requests


@dataclass(frozen=True)
class RestRequest:
    """A complete, authorised request as the API sees it."""

    method: str
    target: str
    body: bytes
    granted: Granted
    peer: tuple[str, int]
    peer_uid: int | None = None

    @property
    def who(self) -> str:
        """The identity the request's credential proves, where it came from (and, on loopback,
        the local account that sent it): what revisions and logs record."""
        uid = describe_uid(self.peer_uid)
        return f"{self.granted.identity} from {self.peer[0]}:{self.peer[1]}" + (
            f", {uid}" if uid else "")


# (request) -> (status, body, content type)
Responder = Callable[[RestRequest], tuple[int, bytes, str]]


@dataclass(eq=False)
class _Connection:
    writer: asyncio.StreamWriter
    accepted: float
    reading: bool = True  # still receiving its request (a candidate for eviction)


class AgentHttpServer:
    """Serves `responder` on a background asyncio loop until `close()`."""

    def __init__(self, address: tuple[str, int], responder: Responder, security: HttpSecurity,
                 limits: HttpLimits, methods: frozenset[str],
                 is_read: Callable[[str, str], bool], node: str) -> None:
        check_bind(address[0], security)
        self.node = node
        self.responder = responder
        self.security = security
        self.limits = limits
        self.methods = methods  # the methods some endpoint serves
        self.is_read = is_read
        self._counters: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._connections: set[_Connection] = set()
        self._last_refusal_log = 0.0
        self._refusals_unlogged = 0
        self._executor = ThreadPoolExecutor(limits.workers, thread_name_prefix="agent-http")
        self._loop = asyncio.new_event_loop()
        stream_limit = max(limits.max_request_line, limits.max_header_bytes) + 2
        try:
            self._server = self._loop.run_until_complete(asyncio.start_server(
                self._serve, address[0], address[1], limit=stream_limit, backlog=512))
        except BaseException:
            self._loop.close()
            self._executor.shutdown(wait=False)
            raise
        self._thread = threading.Thread(target=self._loop.run_forever, name="agent-http",
                                        daemon=True)
        self._thread.start()

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._server.sockets[0].getsockname()[:2]
        return str(host), int(port)

    @property
    def counters(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counters)

    def count(self, what: str) -> None:
        with self._lock:
            self._counters[what] += 1

    def close(self) -> None:
        if self._loop.is_closed():
            return
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(timeout=5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        if not self._thread.is_alive():
            self._loop.close()
        self._executor.shutdown(wait=False, cancel_futures=True)

    async def _shutdown(self) -> None:
        """Stop accepting, cut every connection, and give the handlers a moment to end (one
        waiting for a worker thread ends when that thread returns)."""
        self._server.close()
        for conn in list(self._connections):
            conn.writer.transport.abort()
        current = asyncio.current_task()
        pending = [task for task in asyncio.all_tasks() if task is not current]
        if pending:
            await asyncio.wait(pending, timeout=2)

    # -- one connection -------------------------------------------------------------------------

    def _admit(self, conn: _Connection) -> bool:
        """Room for `conn`: past the cap, the oldest connection still sending its request goes
        (a client that sends its request at once is never the oldest for long)."""
        if len(self._connections) >= self.limits.max_connections:
            reading = [c for c in self._connections if c.reading]
            if not reading:
                self.count("rejected_busy")
                return False
            victim = min(reading, key=lambda c: c.accepted)
            self._connections.discard(victim)
            victim.writer.transport.abort()
            self.count("evicted_slow")
        self._connections.add(conn)
        return True

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = _Connection(writer, time.monotonic())
        if not self._admit(conn):
            writer.transport.abort()
            return
        try:
            await self._exchange(conn, reader, writer)
        except (ConnectionError, OSError, asyncio.IncompleteReadError,
                asyncio.CancelledError):
            pass  # the client went away, was evicted, or the server is closing
        except Exception:
            log.exception("REST connection failed")
        finally:
            self._connections.discard(conn)
            if conn.reading:  # cut off (timeout, eviction, TLS failure): nothing to finish
                writer.transport.abort()
            else:
                writer.close()

    async def _exchange(self, conn: _Connection, reader: asyncio.StreamReader,
                        writer: asyncio.StreamWriter) -> None:
        limits = self.limits
        method = ""
        try:
            async with asyncio.timeout(limits.request_timeout_s):
                if self.security.tls is not None:
                    try:
                        await writer.start_tls(self.security.tls)
                    except OSError as exc:  # ssl.SSLError included
                        self.count("tls_failures")
                        log.debug("TLS handshake failed: %s", exc)
                        return
                method, request = await self._read_request(reader, writer)
        except TimeoutError:
            self.count("request_timeouts")
            return
        except HttpError as exc:
            conn.reading = False
            await self._answer_error(writer, exc, method)
            if writer.can_write_eof():
                writer.write_eof()
            await self._linger(reader)
            return
        conn.reading = False
        status, payload, content_type = await asyncio.get_running_loop().run_in_executor(
            self._executor, self.responder, request)
        writer.write(render_response(status, payload, content_type, {NODE_HEADER: self.node}))
        async with asyncio.timeout(limits.request_timeout_s):
            await writer.drain()

    async def _read_request(self, reader: asyncio.StreamReader,
                            writer: asyncio.StreamWriter) -> tuple[str, RestRequest]:
        limits = self.limits
        line = await self._readline(reader, HTTPStatus.REQUEST_URI_TOO_LONG,
                                    f"request line over {limits.max_request_line} bytes")
        if len(line) > limits.max_request_line + 2:
            raise HttpError(HTTPStatus.REQUEST_URI_TOO_LONG,
                            f"request line over {limits.max_request_line} bytes")
        start = parse_request_line(line)
        if start.method not in self.methods:
            raise HttpError(HTTPStatus.METHOD_NOT_ALLOWED, f"method {start.method} not allowed",
                            {"Allow": ", ".join(sorted(self.methods))})
        headers: dict[str, str] = {}
        total = 0
        too_big = HttpError(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE,
                            f"headers over {limits.max_header_bytes} bytes")
        while True:
            line = await self._readline(reader, too_big.status, too_big.message)
            if is_end_of_headers(line):
                break
            total += len(line)
            if total > limits.max_header_bytes:
                raise too_big
            name, value = parse_header_line(line)
            headers[name] = f"{headers[name]}, {value}" if name in headers else value
        path = start.target.split("?", 1)[0]
        read_only = self.is_read(start.method, path)
        try:
            granted = authorize(self.security.access, headers.get("authorization"), read_only)
        except HttpError as exc:
            self._refused(start.method, path, writer, exc)
            raise
        length = body_length(headers, limits.max_body_bytes)
        body = await reader.readexactly(length) if length else b""
        peer = _address(writer.get_extra_info("peername"))
        uid = None
        if not read_only:  # who changes the node: worth the lookup
            uid = loopback_peer_uid(peer, _address(writer.get_extra_info("sockname")))
        request = RestRequest(start.method, start.target, body, granted, peer, uid)
        if not read_only:
            log.info("REST %s %s by %s", start.method, path, request.who)
        return start.method, request

    async def _readline(self, reader: asyncio.StreamReader, status: int, message: str) -> bytes:
        try:
            return await reader.readuntil(b"\n")
        except asyncio.LimitOverrunError:
            raise HttpError(status, message) from None

    def _refused(self, method: str, path: str, writer: asyncio.StreamWriter,
                 exc: HttpError) -> None:
        self.count("auth_refused")
        now = time.monotonic()
        if now - self._last_refusal_log < REFUSAL_LOG_INTERVAL_S:
            self._refusals_unlogged += 1
            return
        peer = _address(writer.get_extra_info("peername"))
        uid = describe_uid(loopback_peer_uid(peer, _address(writer.get_extra_info("sockname"))))
        more = (f" ({self._refusals_unlogged} more refused since the last line)"
                if self._refusals_unlogged else "")
        log.warning("REST %s %s from %s:%d%s refused (%d): %s%s", method, path, peer[0], peer[1],
                    f" ({uid})" if uid else "", exc.status, exc.message, more)
        self._last_refusal_log, self._refusals_unlogged = now, 0

    async def _answer_error(self, writer: asyncio.StreamWriter, exc: HttpError,
                            method: str) -> None:
        self.count(f"status_{exc.status}")
        body = json.dumps({"error": exc.message, "node": self.node}).encode() + b"\n"
        writer.write(render_response(exc.status, body, "application/json",
                                     {**exc.headers, NODE_HEADER: self.node},
                                     head_only=method == "HEAD"))
        async with asyncio.timeout(self.limits.request_timeout_s):
            await writer.drain()

    async def _linger(self, reader: asyncio.StreamReader) -> None:
        """After an early answer, read (and drop) what the client still sends for a moment, so
        that closing does not reset the connection before the client read the answer."""
        with contextlib.suppress(TimeoutError, OSError):
            async with asyncio.timeout(LINGER_S):
                dropped = 0
                while dropped <= self.limits.max_body_bytes:
                    chunk = await reader.read(65536)
                    if not chunk:
                        return
                    dropped += len(chunk)


def _address(raw: Any) -> tuple[str, int]:
    if isinstance(raw, tuple) and len(raw) >= 2:
        return str(raw[0]), int(raw[1])
    return "?", 0

"""The REST API's HTTP server: TLS, bearer token, and bounds on what one client can hold.

`http_api` decides what each endpoint answers; this module decides who gets to ask and how much
room a connection gets (docs/security.md, "REST API"):

- binds loopback unless told otherwise; any other address needs TLS (`--http-cert/--http-key`)
  and a bearer token (`--http-token-file`), checked before the server starts;
- with a token configured, every request must carry `Authorization: Bearer <token>`, else 401 JSON
  (counted); without one (loopback only) nothing is asked;
- bounded: request line, total header bytes, body bytes (414/431/413 JSON); a connection must
  deliver its whole request within `request_timeout_s` of being accepted (a reaper thread shuts
  down the ones that do not, so headers that never finish cannot hold a thread); at most
  `max_connections` at once, the rest are closed at accept (counted), so a dozen idle sockets
  cannot starve it;
- methods that no endpoint serves get a 405 JSON answer (not http.server's 501 HTML page).

One request per connection (HTTP/1.0, the standard library's default): the time limit of a
request is that of its connection.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import logging
import socket
import ssl
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from kvstore.curve import is_loopback_host

log = logging.getLogger("kvmesh.agent.http")

# What a REST client reads from its environment (the CLI's --http-token-file and --http-ca).
HTTP_TOKEN_ENV = "KVMESH_HTTP_TOKEN_FILE"  # the bearer token the REST commands send
HTTP_CA_ENV = "KVMESH_HTTP_CA"  # the certificate (or CA) that verifies an agent's TLS

# (method, target, body) -> (status, body, content type)
Responder = Callable[[str, str, bytes], tuple[int, bytes, str]]


@dataclass(frozen=True)
class HttpLimits:
    max_request_line: int = 8 * 1024
    max_header_bytes: int = 32 * 1024
    max_body_bytes: int = 1024 * 1024
    request_timeout_s: float = 10.0
    max_connections: int = 32


@dataclass(frozen=True)
class HttpSecurity:
    tls: ssl.SSLContext | None = None
    token: str | None = field(default=None, repr=False)


class HttpConfigError(ValueError):
    """Unusable TLS/token settings; the message names the file or the address."""


def load_security(cert: str | None, key: str | None, token_file: str | None) -> HttpSecurity:
    tls = None
    if (cert is None) != (key is None):
        raise HttpConfigError("--http-cert and --http-key go together")
    if cert is not None and key is not None:
        tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        try:
            tls.load_cert_chain(cert, key)
        except (OSError, ssl.SSLError) as exc:
            raise HttpConfigError(f"{cert}/{key}: cannot load the TLS certificate: {exc}") \
                from exc
    token = None
    if token_file is not None:
        token = read_token(token_file)
    return HttpSecurity(tls, token)


def read_token(path: str) -> str:
    try:
        token = Path(path).read_text().strip()
    except OSError as exc:
        raise HttpConfigError(f"{path}: cannot read the token: {exc.strerror or exc}") from exc
    if len(token) < 16 or any(c.isspace() for c in token):
        raise HttpConfigError(f"{path}: a token is one word of at least 16 characters")
    return token


def check_bind(host: str, security: HttpSecurity) -> None:
    """Anything but loopback needs TLS and a token."""
    if is_loopback_host(host):
        return
    missing = [what for what, ok in (("TLS (--http-cert, --http-key)", security.tls),
                                     ("a token (--http-token-file)", security.token)) if not ok]
    if missing:
        raise HttpConfigError(
            f"the REST API on {host} (not loopback) needs {' and '.join(missing)}")


class GuardedHttpServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], responder: Responder,
                 security: HttpSecurity, limits: HttpLimits, methods: frozenset[str]) -> None:
        check_bind(address[0], security)
        self.responder = responder
        self.security = security
        self.limits = limits
        self.methods = methods  # the methods some endpoint serves
        self.counters: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._deadlines: dict[socket.socket, float] = {}
        self._active = 0
        self._closing = threading.Event()
        super().__init__(address, _GuardedHandler)
        self._reaper = threading.Thread(target=self._reap, name="agent-http-reaper", daemon=True)
        self._reaper.start()

    # -- the connection cap ---------------------------------------------------------------------

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._lock:
            busy = self._active >= self.limits.max_connections
            if not busy:
                self._active += 1
        if busy:
            self.count("rejected_busy")
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self._lock:
                self._active -= 1
            self.unwatch(request)

    # -- per-connection deadlines ---------------------------------------------------------------

    def watch(self, sock: socket.socket) -> None:
        with self._lock:
            self._deadlines[sock] = time.monotonic() + self.limits.request_timeout_s

    def unwatch(self, sock: socket.socket) -> None:
        with self._lock:
            self._deadlines.pop(sock, None)

    def _reap(self) -> None:
        while not self._closing.wait(0.2):
            now = time.monotonic()
            with self._lock:
                overdue = [s for s, deadline in self._deadlines.items() if deadline <= now]
                for sock in overdue:
                    del self._deadlines[sock]
            for sock in overdue:
                self.count("request_timeouts")
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that broke off (or was cut off) is not a server error worth a traceback.
        log.debug("REST connection from %s ended with an error", client_address, exc_info=True)

    def count(self, what: str) -> None:
        with self._lock:
            self.counters[what] += 1

    def server_close(self) -> None:
        self._closing.set()
        super().server_close()


class _GuardedHandler(BaseHTTPRequestHandler):
    server: GuardedHttpServer
    server_version = "kvmesh-agent"

    def setup(self) -> None:
        server = self.server
        # Each blocking read is bounded too: a backstop, should the reaper be late.
        self.request.settimeout(server.limits.request_timeout_s + 5.0)
        server.watch(self.request)
        if server.security.tls is not None:
            raw = self.request
            try:
                self.request = server.security.tls.wrap_socket(raw, server_side=True)
            except (OSError, ssl.SSLError) as exc:
                server.count("tls_failures")
                log.debug("TLS handshake with %s failed: %s", self.client_address, exc)
                server.unwatch(raw)
                raise
            server.unwatch(raw)
            server.watch(self.request)
        super().setup()

    def finish(self) -> None:
        self.server.unwatch(self.request)
        with contextlib.suppress(OSError):
            super().finish()

    def handle(self) -> None:
        # Shut down by the reaper, or the client went away: nothing to answer.
        with contextlib.suppress(OSError, ssl.SSLError):
            super().handle()

    # -- errors as JSON -------------------------------------------------------------------------

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        self.server.count(f"status_{code}")
        self._send_json(code, {"error": message or HTTPStatus(code).phrase})

    def _send_json(self, code: int, data: dict[str, Any],
                   headers: dict[str, str] | None = None) -> None:
        body = json.dumps(data).encode() + b"\n"
        self.send_response(code)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
        self.close_connection = True

    # -- every method ---------------------------------------------------------------------------

    def _serve(self) -> None:
        server = self.server
        limits = server.limits
        if len(self.requestline) > limits.max_request_line:
            self.send_error(HTTPStatus.REQUEST_URI_TOO_LONG,
                            f"request line over {limits.max_request_line} bytes")
            return
        header_bytes = sum(len(k) + len(v) + 4 for k, v in self.headers.items())
        if header_bytes > limits.max_header_bytes:
            self.send_error(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE,
                            f"headers over {limits.max_header_bytes} bytes")
            return
        if not self._authorized():
            return
        if self.command not in server.methods:
            self.server.count("status_405")
            self._send_json(HTTPStatus.METHOD_NOT_ALLOWED,
                            {"error": f"method {self.command} not allowed"},
                            {"Allow": ", ".join(sorted(server.methods))})
            return
        body = self._read_body()
        if body is None:
            return
        server.unwatch(self.request)  # the request is in; answering may take its time
        status, payload, content_type = server.responder(self.command, self.path, body)
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def _authorized(self) -> bool:
        token = self.server.security.token
        if token is None:
            return True
        given = self.headers.get("Authorization", "")
        scheme, _sep, value = given.partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(value.strip().encode(),
                                                              token.encode()):
            return True
        self.server.count("unauthorized")
        log.warning("REST %s %s from %s: %s bearer token", self.command, self.path.split("?")[0],
                    self.client_address[0], "wrong" if given else "no")
        self._send_json(HTTPStatus.UNAUTHORIZED,
                        {"error": "a bearer token is required (--http-token-file)"},
                        {"WWW-Authenticate": 'Bearer realm="kvmesh"'})
        return False

    def _read_body(self) -> bytes | None:
        if "Transfer-Encoding" in self.headers:
            self.send_error(HTTPStatus.LENGTH_REQUIRED, "send a Content-Length, not chunks")
            return None
        raw = self.headers.get("Content-Length", "0") or "0"
        if not raw.isdigit():
            self.send_error(HTTPStatus.BAD_REQUEST, f"bad Content-Length {raw!r}")
            return None
        length = int(raw)
        if length > self.server.limits.max_body_bytes:
            self.send_error(HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                            f"body over {self.server.limits.max_body_bytes} bytes")
            return None
        return self.rfile.read(length) if length else b""

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_HEAD = _serve

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.address_string(), *args)

"""The agent's REST API (after Ligato's `/scheduler/...` endpoints) and `/metrics`.

Built on the standard library's ThreadingHTTPServer: the API is a dozen small read-mostly
endpoints with no need for a framework, and it keeps the agent free of another dependency.
Every handler validates its query parameters; a bad one is a 400 with a JSON error message.
"""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import threading
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from http import HTTPStatus
from typing import Any, Protocol

from kvmesh.agent.http_server import GuardedHttpServer, HttpLimits, HttpSecurity
from kvmesh.agent.jsonable import to_jsonable
from kvmesh.agent.metrics import flat_counters, render

log = logging.getLogger("kvmesh.agent.http")


class BadRequest(Exception):
    """A client error: reported as HTTP 400 with the message."""


class ApiBackend(Protocol):
    """What the HTTP layer needs from the agent (the agent object implements it)."""

    def txn_history(self, seq: int | None, since: float | None, until: float | None) -> list[Any]:
        ...

    def key_timeline(self, key: str) -> list[Any]: ...

    def graph_snapshot(self, time: float | None) -> Any: ...

    def dump(self, descriptor: str | None, key_prefix: str | None, view: str) -> Any: ...

    def value_status(self, key: str | None) -> Any: ...

    def graph_dot(self) -> str: ...

    def stats(self) -> Any: ...

    def downstream_resync(self, retry: bool) -> Any: ...

    def recon_services(self) -> Any: ...

    def assume_current(self) -> Any: ...

    def metrics_text(self) -> str: ...


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes
    content_type: str

    @classmethod
    def json(cls, data: Any, status: int = 200) -> Response:
        body = json.dumps(to_jsonable(data), indent=2, sort_keys=True).encode() + b"\n"
        return cls(status, body, "application/json")

    @classmethod
    def text(cls, text: str, content_type: str = "text/plain; charset=utf-8") -> Response:
        return cls(200, text.encode(), content_type)


Query = dict[str, str]
Handler = Callable[[ApiBackend, Query], Response]


def _time_param(query: Query, name: str) -> float | None:
    """Accept seconds since the epoch or an ISO-8601 timestamp."""
    raw = query.get(name)
    if raw is None or raw == "":
        return None
    try:
        return float(raw)
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(raw).timestamp()
    except ValueError as exc:
        raise BadRequest(f"parameter {name!r}: expected epoch seconds or ISO-8601, got {raw!r}") \
            from exc


def _int_param(query: Query, name: str) -> int | None:
    raw = query.get(name)
    if raw is None or raw == "":
        return None
    try:
        value = int(raw)
    except ValueError as exc:
        raise BadRequest(f"parameter {name!r}: expected an integer, got {raw!r}") from exc
    if value < 0:
        raise BadRequest(f"parameter {name!r}: must not be negative")
    return value


def _bool_param(query: Query, name: str) -> bool:
    raw = query.get(name, "false").lower()
    if raw in ("1", "true", "yes", "on", ""):
        return raw != ""
    if raw in ("0", "false", "no", "off"):
        return False
    raise BadRequest(f"parameter {name!r}: expected true or false, got {raw!r}")


def _choice(query: Query, name: str, choices: tuple[str, ...], default: str) -> str:
    raw = query.get(name, default)
    for choice in choices:
        if raw.lower() == choice.lower():
            return choice
    raise BadRequest(f"parameter {name!r}: expected one of {', '.join(choices)}, got {raw!r}")


def _txn_history(api: ApiBackend, q: Query) -> Response:
    fmt = _choice(q, "format", ("json", "text"), "json")
    seq = _int_param(q, "seq-num")
    since, until = _time_param(q, "since"), _time_param(q, "until")
    if since is not None and until is not None and since > until:
        raise BadRequest("parameter 'since' is after 'until'")
    records = api.txn_history(seq, since, until)
    if seq is not None and not records:
        return Response.json({"error": f"no transaction with seq-num {seq}"}, HTTPStatus.NOT_FOUND)
    if fmt == "text":
        return Response.text("".join(_record_text(r) for r in records))
    return Response.json(records)


def _record_text(record: Any) -> str:
    """A transaction in the scheduler's log format (its `text()`), else its str()."""
    text = getattr(record, "text", None)
    out = text() if callable(text) else str(record)
    return out if out.endswith("\n") else out + "\n"


def _key_timeline(api: ApiBackend, q: Query) -> Response:
    key = q.get("key")
    if not key:
        raise BadRequest("parameter 'key' is required")
    return Response.json(api.key_timeline(key))


def _graph_snapshot(api: ApiBackend, q: Query) -> Response:
    return Response.json(api.graph_snapshot(_time_param(q, "time")))


def _dump(api: ApiBackend, q: Query) -> Response:
    view = _choice(q, "view", ("cached", "NB", "SB"), "cached")
    descriptor, prefix = q.get("descriptor") or None, q.get("key-prefix") or None
    return Response.json(api.dump(descriptor, prefix, view))


def _status(api: ApiBackend, q: Query) -> Response:
    return Response.json(api.value_status(q.get("key") or None))


def _graph(api: ApiBackend, q: Query) -> Response:
    fmt = _choice(q, "format", ("dot", "svg"), "dot")
    dot = api.graph_dot()
    if fmt == "dot":
        return Response.text(dot, "text/vnd.graphviz; charset=utf-8")
    return Response(200, render_svg(dot), "image/svg+xml")


def render_svg(dot: str) -> bytes:
    """SVG through Graphviz's `dot`; a clear error when Graphviz is not installed."""
    exe = shutil.which("dot")
    if exe is None:
        raise ServiceUnavailable("Graphviz 'dot' is not installed: use format=dot, or install "
                                 "the graphviz package")
    proc = subprocess.run([exe, "-Tsvg"], input=dot.encode(), capture_output=True, timeout=60,
                          check=False)
    if proc.returncode != 0:
        raise ServiceUnavailable(f"dot failed: {proc.stderr.decode(errors='replace').strip()}")
    return proc.stdout


class ServiceUnavailable(Exception):
    """The request is valid but cannot be served here (HTTP 503)."""


def _stats(api: ApiBackend, q: Query) -> Response:
    return Response.json(api.stats())


def _downstream_resync(api: ApiBackend, q: Query) -> Response:
    retry = _bool_param(q, "retry")
    verbose = _bool_param(q, "verbose")
    result = api.downstream_resync(retry)
    return Response.json(result if verbose else {"seq": getattr(result, "seq", result)})


def _recon_services(api: ApiBackend, q: Query) -> Response:
    return Response.json(api.recon_services())


def _assume_current(api: ApiBackend, q: Query) -> Response:
    return Response.json(api.assume_current())


def _metrics(api: ApiBackend, q: Query) -> Response:
    return Response.text(api.metrics_text(), "text/plain; version=0.0.4; charset=utf-8")


ROUTES: dict[tuple[str, str], Handler] = {
    ("GET", "/scheduler/txn-history"): _txn_history,
    ("GET", "/scheduler/key-timeline"): _key_timeline,
    ("GET", "/scheduler/graph-snapshot"): _graph_snapshot,
    ("GET", "/scheduler/dump"): _dump,
    ("GET", "/scheduler/status"): _status,
    ("GET", "/scheduler/graph"): _graph,
    ("GET", "/scheduler/stats"): _stats,
    ("POST", "/scheduler/downstream-resync"): _downstream_resync,
    ("GET", "/recon/services"): _recon_services,
    ("POST", "/agent/assume-current"): _assume_current,
    ("GET", "/metrics"): _metrics,
}


def dispatch(api: ApiBackend, method: str, target: str) -> Response:
    """Route one request; never raises."""
    parsed = urllib.parse.urlsplit(target)
    path = parsed.path.rstrip("/") or "/"
    handler = ROUTES.get((method, path))
    if handler is None:
        allowed = sorted(m for (m, p) in ROUTES if p == path)
        if allowed:
            return Response.json({"error": f"method {method} not allowed; use {allowed[0]}"},
                                 HTTPStatus.METHOD_NOT_ALLOWED)
        return Response.json({"error": f"no such endpoint: {path}",
                              "endpoints": sorted(f"{m} {p}" for m, p in ROUTES)},
                             HTTPStatus.NOT_FOUND)
    try:
        pairs = urllib.parse.parse_qsl(parsed.query, keep_blank_values=True, strict_parsing=False)
        query: Query = {}
        for name, value in pairs:
            if name in query:
                raise BadRequest(f"parameter {name!r} given more than once")
            query[name] = value
        return handler(api, query)
    except BadRequest as exc:
        return Response.json({"error": str(exc)}, HTTPStatus.BAD_REQUEST)
    except ServiceUnavailable as exc:
        return Response.json({"error": str(exc)}, HTTPStatus.SERVICE_UNAVAILABLE)
    except Exception as exc:
        log.exception("HTTP %s %s failed", method, target)
        return Response.json({"error": f"{type(exc).__name__}: {exc}"},
                             HTTPStatus.INTERNAL_SERVER_ERROR)


class HttpApi:
    """Serves `dispatch` on a background thread until `close()` (the server, with its TLS,
    token and limits, is `kvmesh.agent.http_server`)."""

    def __init__(self, api: ApiBackend, host: str, port: int,
                 security: HttpSecurity | None = None, limits: HttpLimits | None = None) -> None:
        backend = api

        def respond(method: str, target: str, body: bytes) -> tuple[int, bytes, str]:
            resp = dispatch(backend, method, target)
            payload = resp.body
            if resp.status == 200 and urllib.parse.urlsplit(target).path == "/metrics":
                # The server's own refusals and limits hit (kvmesh_agent_http_*_total).
                payload += render(flat_counters("kvmesh_agent_http", self.counters,
                                                help_prefix="REST server: ")).encode()
            return resp.status, payload, resp.content_type

        self.security = security or HttpSecurity()
        self._server = GuardedHttpServer((host, port), respond, self.security,
                                         limits or HttpLimits(),
                                         frozenset(m for m, _path in ROUTES))
        self._thread = threading.Thread(target=self._server.serve_forever, name="agent-http",
                                        daemon=True)
        self._thread.start()

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    @property
    def counters(self) -> dict[str, int]:
        """Refusals and limits hit (unauthorized, request_timeouts, rejected_busy, status_N)."""
        return dict(self._server.counters)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

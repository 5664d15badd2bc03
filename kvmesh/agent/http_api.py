"""The agent's REST API (after Ligato's `/scheduler/...` endpoints) and `/metrics`.

Served by `http_server` (standard library asyncio, no framework: the API is a dozen small
read-mostly endpoints). Every handler validates its query parameters; a bad one is a 400 with
a JSON error message. Which requests only read (`is_read`) is decided here, next to the routes:
the server asks an operator token for everything else.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import json
import logging
import shutil
import subprocess
import threading
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from http import HTTPStatus
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast

from kvmesh.agent.http_auth import authorize
from kvmesh.agent.http_security import HttpSecurity
from kvmesh.agent.http_server import AgentHttpServer, HttpLimits, RestRequest, StreamHandler
from kvmesh.agent.http_wire import HttpError
from kvmesh.agent.jsonable import to_jsonable
from kvmesh.agent.metrics import flat_counters, render
from kvmesh.agent.ui_session import Sessions, session_key
from scheduler import ValueState

if TYPE_CHECKING:
    from kvmesh.agent.stream_hub import Sink, StreamHub

log = logging.getLogger("kvmesh.agent.http")


class BadRequest(Exception):
    """A client error: reported as HTTP 400 with the message."""


class ApiBackend(Protocol):
    """What the HTTP layer needs from the agent (the agent object implements it)."""

    def txn_history(self, seq: int | None, since: float | None, until: float | None) -> list[Any]:
        ...

    def key_timeline(self, key: str) -> list[Any]: ...

    def graph_snapshot(self, time: float | None) -> Any: ...

    def dump(self, descriptor: str | None, key_prefix: str | None, view: str,
             state: str | None = None) -> Any: ...

    def value_status(self, key: str | None) -> Any: ...

    def graph_dot(self, txn: int | None = None) -> str: ...

    def stats(self) -> Any: ...

    def downstream_resync(self, retry: bool) -> Any: ...

    def recon_services(self) -> Any: ...

    def assume_current(self) -> Any: ...

    def plan_values(self, values: dict[str, Any]) -> list[Any]: ...

    def apply_configuration(self, values: dict[str, Any], replace: bool,
                            who: str) -> dict[str, Any]: ...

    def metrics_text(self) -> str: ...

    def revisions(self, node: str) -> list[Any]: ...

    def confirm_revision(self, node: str, rev: int) -> Any: ...

    def rollback_revision(self, node: str, rev: int, who: str) -> Any: ...


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes
    content_type: str
    headers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def json(cls, data: Any, status: int = 200) -> Response:
        body = json.dumps(to_jsonable(data), indent=2, sort_keys=True).encode() + b"\n"
        return cls(status, body, "application/json")

    @classmethod
    def text(cls, text: str, content_type: str = "text/plain; charset=utf-8") -> Response:
        return cls(200, text.encode(), content_type)


Query = dict[str, str]
Handler = Callable[[ApiBackend, Query], Response]
H = TypeVar("H", bound=Callable[..., Response])


def check_params(query: Query, names: tuple[str, ...]) -> None:
    """BadRequest for a parameter not in `names` (not silently ignored)."""
    unknown = sorted(set(query) - set(names))
    if unknown:
        allowed = ", ".join(names) or "none"
        raise BadRequest(f"unknown parameter(s) {', '.join(map(repr, unknown))} "
                         f"(accepted: {allowed})")


def accepts(*names: str) -> Callable[[H], H]:
    """The query parameters a handler takes: any other one is a 400."""

    def wrap(handler: H) -> H:
        @functools.wraps(handler)
        def checked(api: ApiBackend, query: Query, *rest: Any) -> Response:
            check_params(query, names)
            return handler(api, query, *rest)

        return cast(H, checked)

    return wrap


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


@accepts("format", "seq-num", "since", "until")
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


@accepts("key")
def _key_timeline(api: ApiBackend, q: Query) -> Response:
    key = q.get("key")
    if not key:
        raise BadRequest("parameter 'key' is required")
    return Response.json(api.key_timeline(key))


@accepts("time")
def _graph_snapshot(api: ApiBackend, q: Query) -> Response:
    return Response.json(api.graph_snapshot(_time_param(q, "time")))


@accepts("descriptor", "key-prefix", "view", "state")
def _dump(api: ApiBackend, q: Query) -> Response:
    view = _choice(q, "view", ("cached", "NB", "SB"), "cached")
    descriptor, prefix = q.get("descriptor") or None, q.get("key-prefix") or None
    state = q.get("state") or None
    if state is not None:
        state = _choice(q, "state", tuple(s.name for s in ValueState), "")
    try:
        return Response.json(api.dump(descriptor, prefix, view, state))
    except KeyError as exc:  # unknown descriptor
        raise BadRequest(str(exc.args[0] if exc.args else exc)) from None
    except ValueError as exc:  # e.g. view=SB on a descriptor without Retrieve
        raise BadRequest(str(exc)) from None


@accepts("key")
def _status(api: ApiBackend, q: Query) -> Response:
    return Response.json(api.value_status(q.get("key") or None))


@accepts("format", "txn")
def _graph(api: ApiBackend, q: Query) -> Response:
    """The value graph; `txn=SEQ`: as it was right after that transaction, the values it
    touched highlighted. SVG unless `format=dot` (what a browser asking for the URL wants)."""
    fmt = _choice(q, "format", ("dot", "svg"), "svg")
    txn = _int_param(q, "txn")
    try:
        dot = api.graph_dot(txn)
    except KeyError as exc:
        return Response.json({"error": str(exc.args[0] if exc.args else exc)},
                             HTTPStatus.NOT_FOUND)
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


@accepts()
def _stats(api: ApiBackend, q: Query) -> Response:
    return Response.json(api.stats())


@accepts("retry", "verbose")
def _downstream_resync(api: ApiBackend, q: Query) -> Response:
    retry = _bool_param(q, "retry")
    verbose = _bool_param(q, "verbose")
    result = api.downstream_resync(retry)
    # The resync ran even when values failed: 200, with the failures in "errors".
    errors, record = result["errors"], to_jsonable(result["record"])
    if verbose:
        return Response.json({**record, "errors": errors or record.get("errors") or {}})
    return Response.json({"seq": record.get("seq"), "errors": errors})


@accepts()
def _recon_services(api: ApiBackend, q: Query) -> Response:
    return Response.json(api.recon_services())


@accepts()
def _assume_current(api: ApiBackend, q: Query) -> Response:
    return Response.json(api.assume_current())


@accepts()
def _metrics(api: ApiBackend, q: Query) -> Response:
    return Response.text(api.metrics_text(), "text/plain; version=0.0.4; charset=utf-8")


def _json_body(body: bytes) -> Any:
    try:
        return json.loads(body or b"null")
    except ValueError as exc:
        raise BadRequest(f"the body is not valid JSON: {exc}") from None


def _values_body(body: bytes) -> dict[str, Any]:
    """``{"values": {model key: value or null}}`` (the shape of POST /configuration too)."""
    data = _json_body(body)
    values = data.get("values") if isinstance(data, dict) else None
    if not isinstance(values, dict):
        raise BadRequest('expected a JSON body {"values": {<model key>: <value>, ...}}')
    return values


@accepts("model")
def _jsonschema(api: ApiBackend, q: Query) -> Response:
    from kvmesh.agent.models import ModelError, json_schema

    try:
        return Response.json(json_schema(q.get("model") or None))
    except ModelError as exc:
        raise BadRequest(str(exc)) from None


@accepts()
def _validate(api: ApiBackend, q: Query, body: bytes) -> Response:
    """Each value checked against its model: ``{"valid": bool, "errors": {key: {field: ...}}}``."""
    from kvmesh.agent.models import invalid_values

    values = _values_body(body)
    errors = {key: {"error": str(exc), "fields": exc.problems}
              for key, exc in invalid_values({k: v for k, v in values.items()
                                              if v is not None}).items()}
    return Response.json({"valid": not errors, "errors": errors})


@accepts()
def _plan(api: ApiBackend, q: Query, body: bytes) -> Response:
    """What the scheduler would do with these changes (read-only)."""
    values = _values_body(body)
    return Response.json({"operations": api.plan_values(values)})


@accepts()
def _configuration(api: ApiBackend, q: Query, body: bytes, who: str) -> Response:
    """The node's values as one transaction with revert (after Ligato's gRPC northbound):
    400 with every bad field when a value is invalid (nothing applied), 409 with the errors
    when the node refused it (everything reverted), else 200."""
    from kvmesh.agent.models import invalid_values

    data = _json_body(body)
    values = _values_body(body)
    replace = data.get("replace", False)
    if not isinstance(replace, bool):
        raise BadRequest("'replace' must be true or false")
    if any(not isinstance(v, dict) for v in values.values()):
        raise BadRequest("every value must be a JSON object (omit a key, with replace, to "
                         "remove it)")
    invalid = invalid_values(values)
    if invalid:
        return Response.json({"error": f"{len(invalid)} invalid value(s): nothing applied",
                              "errors": {k: {"error": str(e), "fields": e.problems}
                                         for k, e in invalid.items()}}, HTTPStatus.BAD_REQUEST)
    result = api.apply_configuration(values, replace, who)
    return Response.json(result, HTTPStatus.OK if result["ok"] else HTTPStatus.CONFLICT)


def _revision_params(q: Query) -> tuple[str, int]:
    node, rev = q.get("node") or "", _int_param(q, "rev")
    if not node or rev is None:
        raise BadRequest("parameters 'node' and 'rev' are required")
    return node, rev


@accepts("node")
def _revisions(api: ApiBackend, q: Query) -> Response:
    """A node's kept revisions (revision/<node>/...), newest first."""
    if not q.get("node"):
        raise BadRequest("parameter 'node' is required")
    return Response.json(api.revisions(q["node"]))


def _revision_action(act: Callable[[], Any]) -> Response:
    from kvmesh.agent.config_writer import WriteRefused
    from kvmesh.agent.revision_actions import RevisionError

    try:
        return Response.json(act())
    except (RevisionError, WriteRefused) as exc:
        return Response.json({"error": str(exc)}, HTTPStatus.CONFLICT)


@accepts("node", "rev")
def _confirm_revision(api: ApiBackend, q: Query, body: bytes, who: str) -> Response:
    """Confirm a pending revision: the node's agent will not roll it back."""
    node, rev = _revision_params(q)
    return _revision_action(lambda: api.confirm_revision(node, rev))


@accepts("node", "rev")
def _rollback_revision(api: ApiBackend, q: Query, body: bytes, who: str) -> Response:
    """Roll a pending revision back now (as its confirm timer would)."""
    node, rev = _revision_params(q)
    return _revision_action(lambda: api.rollback_revision(node, rev, who))


BodyHandler = Callable[[ApiBackend, Query, bytes], Response]
BODY_ROUTES: dict[tuple[str, str], BodyHandler] = {
    ("POST", "/configuration/validate"): _validate,
    ("POST", "/scheduler/plan"): _plan,
}
# Handlers that change the node and are told who asks (recorded in the revision).
WriteHandler = Callable[[ApiBackend, Query, bytes, str], Response]
WRITE_BODY_ROUTES: dict[tuple[str, str], WriteHandler] = {
    ("POST", "/configuration"): _configuration,
    ("POST", "/revisions/confirm"): _confirm_revision,
    ("POST", "/revisions/rollback"): _rollback_revision,
}

ROUTES: dict[tuple[str, str], Handler] = {
    ("GET", "/info/configuration/jsonschema"): _jsonschema,
    ("GET", "/scheduler/txn-history"): _txn_history,
    ("GET", "/scheduler/key-timeline"): _key_timeline,
    ("GET", "/scheduler/graph-snapshot"): _graph_snapshot,
    ("GET", "/scheduler/dump"): _dump,
    ("GET", "/scheduler/status"): _status,
    ("GET", "/scheduler/graph"): _graph,
    ("GET", "/scheduler/stats"): _stats,
    ("POST", "/scheduler/downstream-resync"): _downstream_resync,
    ("GET", "/recon/services"): _recon_services,
    ("GET", "/revisions"): _revisions,
    ("POST", "/agent/assume-current"): _assume_current,
    ("GET", "/metrics"): _metrics,
}


# The requests that change the node: they need an operator token, always. Every other route
# only reads (a reader's token, or none with --http-public-reads, will do).
WRITES = frozenset({("POST", "/scheduler/downstream-resync"), ("POST", "/agent/assume-current"),
                    *WRITE_BODY_ROUTES})
STREAM_ROUTES = frozenset({("GET", "/stream")})  # served on the loop (kvmesh.agent.stream_hub)
ALL_ROUTES = (*ROUTES, *BODY_ROUTES, *WRITE_BODY_ROUTES, *STREAM_ROUTES)


def _path(target: str) -> str:
    return urllib.parse.urlsplit(target).path.rstrip("/") or "/"


def is_read(method: str, target: str) -> bool:
    """Does this request only read? (Unknown routes count as reads: they get a 404.)"""
    return (method, _path(target)) not in WRITES


def parse_query(target: str) -> Query:
    """The request's query parameters; one given twice is a BadRequest."""
    pairs = urllib.parse.parse_qsl(urllib.parse.urlsplit(target).query, keep_blank_values=True,
                                   strict_parsing=False)
    query: Query = {}
    for name, value in pairs:
        if name in query:
            raise BadRequest(f"parameter {name!r} given more than once")
        query[name] = value
    return query


def dispatch(api: ApiBackend, method: str, target: str, body: bytes = b"",
             who: str = "unknown") -> Response:
    """Route one request; never raises. `who`: the identity the request proved (revisions)."""
    path = _path(target)
    handler = ROUTES.get((method, path))
    body_handler = BODY_ROUTES.get((method, path))
    write_handler = WRITE_BODY_ROUTES.get((method, path))
    if body_handler is not None:
        def handler(api: ApiBackend, query: Query) -> Response:
            return body_handler(api, query, body)
    if write_handler is not None:
        def handler(api: ApiBackend, query: Query) -> Response:
            return write_handler(api, query, body, who)
    if handler is None:
        allowed = sorted(m for (m, p) in ALL_ROUTES if p == path)
        if allowed:
            return Response.json({"error": f"method {method} not allowed; use {allowed[0]}"},
                                 HTTPStatus.METHOD_NOT_ALLOWED)
        return Response.json({"error": f"no such endpoint: {path}",
                              "endpoints": sorted(f"{m} {p}" for m, p in ALL_ROUTES)},
                             HTTPStatus.NOT_FOUND)
    try:
        return handler(api, parse_query(target))
    except BadRequest as exc:
        return Response.json({"error": str(exc)}, HTTPStatus.BAD_REQUEST)
    except ServiceUnavailable as exc:
        return Response.json({"error": str(exc)}, HTTPStatus.SERVICE_UNAVAILABLE)
    except Exception as exc:
        log.exception("HTTP %s %s failed", method, target)
        return Response.json({"error": f"{type(exc).__name__}: {exc}"},
                             HTTPStatus.INTERNAL_SERVER_ERROR)


def _naming(payload: bytes, node: str) -> bytes:
    """A JSON error answer with the node that gives it (`"node"`, as the server's own refusals
    carry it; every answer also has the X-Kvmesh-Node header)."""
    try:
        data = json.loads(payload)
    except ValueError:
        return payload
    if not isinstance(data, dict):
        return payload
    return Response.json({**data, "node": node}, 0).body


def is_console(path: str) -> bool:
    return path == "/ui" or path.startswith("/ui/")


def is_console_public(method: str, path: str) -> bool:
    """What the console serves without a credential: its login page and its assets."""
    return path == "/ui/login" or (method == "GET" and path.startswith("/ui/static/"))


def stream_handler(hub: Callable[[], StreamHub]) -> StreamHandler:
    """`GET /stream?prefix=P[&snapshot=1]`: the node's publications under P as Server-Sent
    Events (kvmesh.agent.sse), from the stream hub `hub()` gives."""

    async def serve(request: RestRequest, reader: asyncio.StreamReader,
                    writer: asyncio.StreamWriter) -> None:
        try:
            query = parse_query(request.target)
            check_params(query, ("prefix", "snapshot"))
            prefix, snapshot = query.get("prefix", ""), _bool_param(query, "snapshot")
        except BadRequest as exc:
            raise HttpError(HTTPStatus.BAD_REQUEST, str(exc)) from None
        await hub().serve(prefix, snapshot, reader, writer)

    return serve


class ConsoleView(Protocol):
    """The console (kvmesh.agent.ui.console.Console): pages for `/ui/...` requests."""

    def dispatch(self, request: RestRequest) -> Response: ...


# (backend, sessions, secure=, check_token=, follow=) -> the console: given by the agent, so
# this module does not import the console (which imports this one).
ConsoleFactory = Callable[..., ConsoleView]


class HttpApi:
    """Serves `dispatch` until `close()` (the server, with its TLS, tokens and limits, is
    `kvmesh.agent.http_server`); `/stream` from `hub` when given."""

    def __init__(self, api: ApiBackend, host: str, port: int, security: HttpSecurity,
                 limits: HttpLimits | None = None, *, node: str, kv_url: str | None = None,
                 max_streams: int | None = None,
                 console: ConsoleFactory | None = None) -> None:
        backend = api
        self.sessions = Sessions(session_key(c.token for c in security.access.credentials))
        # The console is made on its first request: an agent nobody browses never loads it
        # (its modules cost ~0.6 MiB of an idle agent's RSS; BENCHMARKS.md, issue 29).
        console_factory = console if kv_url is not None else None  # it reads the mesh
        made: list[ConsoleView] = []
        making = threading.Lock()

        def console_view() -> ConsoleView:
            with making:
                if not made:
                    assert console_factory is not None
                    made.append(console_factory(
                        api, self.sessions, secure=security.tls is not None,
                        check_token=lambda token: authorize(
                            security.access, f"Bearer {token}", True),
                        follow=self._follow))
                return made[0]

        def respond(request: RestRequest) -> tuple[int, bytes, str, dict[str, str]]:
            if console_factory is not None and is_console(_path(request.target)):
                resp = console_view().dispatch(request)
            else:
                resp = dispatch(backend, request.method, request.target, request.body,
                                request.who)
            payload = resp.body
            if resp.status >= 400 and resp.content_type == "application/json":
                payload = _naming(payload, node)
            if resp.status == 200 and _path(request.target) == "/metrics":
                # The server's own refusals and limits hit (kvmesh_agent_http_*_total).
                payload += render(flat_counters("kvmesh_agent_http", self.counters,
                                                help_prefix="REST server: ")).encode()
            return resp.status, payload, resp.content_type, resp.headers

        self.security = security
        # The stream hub (`GET /stream`, the console's status index) is made on first use, like
        # the console: an idle agent does not load it (max_streams None: the hub's default).
        self._kv_url = kv_url
        self._hub_options: dict[str, Any] = {} if max_streams is None else {
            "max_streams": max_streams}
        self._hub: StreamHub | None = None
        self._making_hub = threading.Lock()
        streams = {} if kv_url is None else {("GET", "/stream"): stream_handler(self.stream_hub)}
        self._server = AgentHttpServer((host, port), respond, security, limits or HttpLimits(),
                                       frozenset(m for m, _path in ALL_ROUTES), is_read, node,
                                       streams, self.sessions if console_factory else None,
                                       is_console_public)
        if kv_url is not None:
            self._server.shutdown_hooks.append(self._close_hub)

    @property
    def hub(self) -> StreamHub | None:
        """The stream hub, once a stream or the console made it."""
        return self._hub

    def stream_hub(self) -> StreamHub:
        """The stream hub, made now if no stream or console made it yet."""
        with self._making_hub:
            if self._hub is None:
                from kvmesh.agent.stream_hub import StreamHub

                assert self._kv_url is not None
                self._hub = StreamHub(self._kv_url, count=self.count, **self._hub_options)
            return self._hub

    async def _close_hub(self) -> None:
        if self._hub is not None:
            await self._hub.close()

    def count(self, what: str) -> None:
        self._server.count(what)

    def _follow(self, prefix: str, sink: Sink) -> None:
        """`sink` fed from the stream hub (the console's status index); a failure to start
        reaches it as a `dropped` event."""
        future = self._server.submit(self.stream_hub().follow(prefix, sink))

        def failed(done: concurrent.futures.Future[None]) -> None:
            if done.exception() is not None:
                sink([("dropped", {"reason": str(done.exception())})])

        future.add_done_callback(failed)

    @property
    def address(self) -> tuple[str, int]:
        return self._server.address

    @property
    def counters(self) -> dict[str, int]:
        """Refusals and limits hit (auth_refused, request_timeouts, evicted_slow,
        rejected_busy, tls_failures, status_N)."""
        return self._server.counters

    def close(self) -> None:
        self._server.close()

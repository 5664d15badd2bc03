"""The console at `/ui/` (docs/console.md): server-rendered pages over the agent's own REST
backend and the mesh; a view, not a second backend.

Logins (`kvmesh.agent.ui_session`): `POST /ui/ticket` (bearer token: `kvmesh ui`) gives a
one-time ticket; `GET /ui/login?ticket=T` or the login form (a pasted token) opens a session
cookie. The REST server authorises every request, the console's and the API's alike, from that
cookie (and, for a change, the CSRF token the page sends): the page's buttons call the REST API
itself (`POST /revisions/confirm`, `/revisions/rollback`, `/scheduler/downstream-resync`).

Every page is whole HTML on the first request (first paint with the data in it) and, with
`fragment=1`, just its `<main>` content, which console.js fetches again whenever the stream
(`GET /stream`) shows a change. Paging and filtering happen here, on the server.
"""

from __future__ import annotations

import importlib.resources
import urllib.parse
from collections.abc import Callable
from http import HTTPStatus
from typing import Any, Protocol

from kvmesh.agent.http_api import BadRequest, Response, parse_query, render_svg
from kvmesh.agent.http_auth import Granted
from kvmesh.agent.http_server import RestRequest
from kvmesh.agent.http_wire import HttpError
from kvmesh.agent.jsonable import to_jsonable
from kvmesh.agent.keys import config_prefix, status_prefix
from kvmesh.agent.sse import decode_value
from kvmesh.agent.stream_hub import Sink
from kvmesh.agent.ui import views
from kvmesh.agent.ui.cluster_view import (
    STATE_ORDER,
    NodeRow,
    build_nodes,
    map_dot,
    natural,
    states_in_order,
)
from kvmesh.agent.ui.status_index import StatusIndex
from kvmesh.agent.ui_session import Sessions, cookie_from, set_cookie
from kvstore import TTL_INFINITY, KvStoreClient, KvStoreError, Value

PAGE_SIZE = 100
INDEX_WAIT_S = 10.0  # longest the Cluster view waits for the status index's first snapshot
HISTORY_SHOWN = 20
STATIC = {"console.js": "application/javascript; charset=utf-8",
          "console.css": "text/css; charset=utf-8"}
SECURITY_HEADERS = {
    # Same origin only, no inline script, no framing: the page runs console.js and nothing else.
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; "
                               "style-src 'self' 'unsafe-inline'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


class ConsoleBackend(Protocol):
    """What the console reads (kvmesh.agent.rest_backend.RestBackend)."""

    node: str

    def mesh_call(self, action: Callable[[KvStoreClient], Any]) -> Any: ...

    def txn_history(self, seq: int | None, since: float | None, until: float | None
                    ) -> list[Any]: ...

    def dump(self, descriptor: str | None, key_prefix: str | None, view: str,
             state: str | None = None) -> Any: ...

    def recon_services(self) -> Any: ...


def html(text: str, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(status, text.encode(), "text/html; charset=utf-8",
                    {**SECURITY_HEADERS, **(headers or {})})


def redirect(location: str, headers: dict[str, str] | None = None) -> Response:
    return Response(HTTPStatus.SEE_OTHER, b"", "text/plain; charset=utf-8",
                    {"Location": location, **(headers or {})})


def _page_number(query: dict[str, str]) -> int:
    raw = query.get("page") or "0"
    if not raw.isdigit():
        raise BadRequest(f"parameter 'page': expected a number, got {raw!r}")
    return int(raw)


class Console:
    def __init__(self, backend: Any, sessions: Sessions, secure: bool,
                 check_token: Callable[[str], Granted],
                 follow: Callable[[str, Sink], None] | None = None) -> None:
        self.backend: ConsoleBackend = backend
        self.sessions = sessions
        self.secure = secure  # Secure cookies (the agent serves TLS)
        self.check_token = check_token
        self._static: dict[str, bytes] = {}
        self._map_cache: tuple[str, str] | None = None  # (DOT, its SVG)
        self._follow = follow  # feeds the status index from the stream hub
        self.index = StatusIndex()

    # -- routing --------------------------------------------------------------------------------

    def dispatch(self, request: RestRequest) -> Response:
        path = urllib.parse.urlsplit(request.target).path.rstrip("/") or "/"
        self._start_index()
        try:
            query = parse_query(request.target)
            if path.startswith("/ui/static/"):
                return self._asset(path.removeprefix("/ui/static/"))
            if path == "/ui/login":
                return self._login(request, query)
            if request.method == "POST" and path == "/ui/logout":
                return self._logout(request)
            if request.method == "POST" and path == "/ui/ticket":
                return self._ticket(request)
            pages = {"/ui": self._cluster, "/ui/node": self._node, "/ui/keys": self._keys,
                     "/ui/revisions": self._revisions}
            page = pages.get(path)
            if page is None or request.method != "GET":
                return html(views.login_page() if page is None else "", HTTPStatus.NOT_FOUND)
            viewer = self._viewer(request)
            active, title, body, stream = page(viewer, query)
            if query.get("fragment"):
                return html(body)
            css = self._asset_bytes("console.css").decode()
            return html(views.layout(title, active, body, viewer, stream, css))
        except BadRequest as exc:
            return Response.json({"error": str(exc)}, HTTPStatus.BAD_REQUEST)
        except KvStoreError as exc:
            return html(f"<p role=alert>The node's KvStore did not answer: {views.e(exc)}</p>",
                        HTTPStatus.SERVICE_UNAVAILABLE)

    def _start_index(self) -> None:
        """The status index starts with the console's first request (the login page
        included), not with the agent: an agent nobody looks at does not keep it."""
        if not self.index.started and self._follow is not None:
            self.index.started = True
            self._follow("status/", self.index.apply)

    def _viewer(self, request: RestRequest) -> views.Viewer:
        session = self.sessions.verify(cookie_from(request.headers.get("cookie")))
        csrf = self.sessions.csrf_token(session) if session is not None else ""
        return views.Viewer(request.granted.role, request.granted.identity, csrf,
                            self.backend.node)

    def _asset(self, name: str) -> Response:
        if name not in STATIC:
            return Response.json({"error": f"no asset {name!r}"}, HTTPStatus.NOT_FOUND)
        return Response(200, self._asset_bytes(name), STATIC[name],
                        {"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"})

    def _asset_bytes(self, name: str) -> bytes:
        if name not in self._static:
            self._static[name] = importlib.resources.files("kvmesh.agent.ui").joinpath(
                "static", name).read_bytes()
        return self._static[name]

    # -- logging in -----------------------------------------------------------------------------

    def _cookie(self, granted_role: str, credential: str, *, ticket: str | None = None
                ) -> Response:
        session = (self.sessions.redeem(ticket) if ticket is not None
                   else self.sessions.open(granted_role, credential))
        if session is None:
            return html(views.login_page("That login link is used or expired (60 s): run "
                                         "`kvmesh ui` again, or paste a token."),
                        HTTPStatus.UNAUTHORIZED)
        value = self.sessions.cookie_value(session)
        return redirect("/ui/", {"Set-Cookie": set_cookie(value, self.sessions.session_ttl_s,
                                                          self.secure)})

    def _login(self, request: RestRequest, query: dict[str, str]) -> Response:
        if request.method == "GET":
            if query.get("ticket"):
                return self._cookie("", "", ticket=query["ticket"])
            return html(views.login_page())
        form = urllib.parse.parse_qs(request.body.decode("utf-8", errors="replace"))
        token = (form.get("token") or [""])[0].strip()
        try:
            granted = self.check_token(token)
        except HttpError:
            return html(views.login_page("That token is not one of this agent's."),
                        HTTPStatus.UNAUTHORIZED)
        return self._cookie(granted.role, f"{granted.identity}, pasted in the login form")

    def _logout(self, request: RestRequest) -> Response:
        session = self.sessions.verify(cookie_from(request.headers.get("cookie")))
        if session is not None:
            self.sessions.close(session)
        return redirect("/ui/login", {"Set-Cookie": set_cookie("", 0, self.secure)})

    def _ticket(self, request: RestRequest) -> Response:
        """A one-time login for the role of the bearer token that asks (`kvmesh ui`)."""
        if "authorization" not in request.headers or request.granted.credential is None:
            return Response.json({"error": "a login ticket is given for a bearer token"},
                                 HTTPStatus.UNAUTHORIZED)
        try:
            ticket = self.sessions.issue_ticket(request.granted.role,
                                                request.granted.credential)
        except OverflowError as exc:
            return Response.json({"error": str(exc)}, HTTPStatus.TOO_MANY_REQUESTS)
        return Response.json({"ticket": ticket, "role": request.granted.role,
                              "path": "/ui/login?" + urllib.parse.urlencode({"ticket": ticket}),
                              "expires_in_s": 60})

    # -- views ----------------------------------------------------------------------------------

    def _dump(self, prefix: str) -> dict[str, Value]:
        found: dict[str, Value] = self.backend.mesh_call(lambda c: c.dump(prefix))
        return found

    def _node_names(self) -> list[str]:
        names = {key.split("/")[1] for key in self._dump("node/")}
        names |= {key.split("/", 1)[1] for key in self._dump("member/")}
        return sorted(names | {self.backend.node}, key=natural)

    def _cluster(self, viewer: views.Viewer, query: dict[str, str]
                 ) -> tuple[str, str, str, str]:
        self._start_index()
        # Its first snapshot is being read: waiting costs less than reading it twice.
        summary = self.index.summary() if self.index.wait_ready(INDEX_WAIT_S) else None
        # Without the index (not synced yet, or its stream lost), the mesh itself: slower.
        statuses = self._dump("status/") if summary is None else {}
        rows = build_nodes(self._dump("member/"), self._dump("node/"), statuses)
        for node, (counts, oldest_failed) in (summary or {}).items():
            row = rows.setdefault(node, NodeRow(node))
            row.counts, row.oldest_failed = counts, oldest_failed
        rows = dict(sorted(rows.items(), key=lambda item: natural(item[0])))
        rows.setdefault(viewer.local, NodeRow(viewer.local))
        return "cluster", "Cluster", views.cluster_body(rows, self._map(rows, viewer), viewer), ""

    def _map(self, rows: dict[str, NodeRow], viewer: views.Viewer) -> str:
        """The map as inline SVG; Graphviz runs only when the drawing changed (a page
        refreshed for a value's change draws the same map)."""
        dot = map_dot(rows, viewer.local)
        cached = self._map_cache
        if cached is not None and cached[0] == dot:
            return cached[1]
        svg = render_svg(dot).decode()
        svg = svg[svg.find("<svg"):]  # inline: without the XML prolog and doctype
        self._map_cache = (dot, svg)
        return svg

    def _node(self, viewer: views.Viewer, query: dict[str, str]) -> tuple[str, str, str, str]:
        name = query.get("name") or viewer.local
        local = name == viewer.local
        state_filter = query.get("state", "")
        prefix = query.get("prefix", "")
        statuses = []
        for key, value in self._dump(status_prefix(name)).items():
            record = decode_value(value.value) if value.value else None
            if isinstance(record, dict) and "b64" not in record:
                statuses.append({**record, "key": key[len(status_prefix(name)):]})
        states = states_in_order({str(s.get("state")) for s in statuses} | set(STATE_ORDER))
        shown = sorted((s for s in statuses
                        if (not state_filter or s.get("state") == state_filter)
                        and s["key"].startswith(prefix)), key=lambda s: s["key"])
        page = views.Page(_page_number(query), PAGE_SIZE, len(shown))
        body = [views.node_picker(self._node_names(), name, "/ui/node"),
                f"<h2>Node {views.e(name)}"
                + (" (this agent)" if local else
                   " <span class=muted>(statuses from the mesh; its history, graph and "
                   "devices are in its own agent's console)</span>") + "</h2>",
                views.node_values(name, shown, page, state_filter, prefix, states,
                                  query.get("key", ""))]
        if query.get("key"):
            body.append(self._detail(name, query["key"], statuses, local))
        if local:
            history = [to_jsonable(r) for r in self.backend.txn_history(None, None, None)]
            history = history[::-1][:HISTORY_SHOWN]
            txn = query.get("txn")
            body.append("<h3>Transactions</h3>" + views.history_table(
                history, name, int(txn) if txn and txn.isdigit() else None))
            body.append("<h3>Reconciliation</h3>"
                        + views.recon_table(to_jsonable(self.backend.recon_services())))
        return "node", f"Node {name}", "".join(body), f"status/{name}/"

    def _detail(self, name: str, key: str, statuses: list[dict[str, Any]], local: bool) -> str:
        status = next((s for s in statuses if s["key"] == key), None)
        desired_raw = self._dump(config_prefix(name) + key).get(config_prefix(name) + key)
        desired = decode_value(desired_raw.value) if desired_raw and desired_raw.value else None
        actual = None
        if local:
            try:
                found = to_jsonable(self.backend.dump(None, key, "SB"))
            except (KeyError, ValueError):
                found = []
            actual = next((item.get("value") for item in found
                           if isinstance(item, dict) and item.get("key") == key), None)
        return views.value_detail(name, key, status, desired, actual, local)

    def _keys(self, viewer: views.Viewer, query: dict[str, str]) -> tuple[str, str, str, str]:
        prefix = query.get("prefix", "")
        dump = self._dump(prefix)
        keys = sorted(dump)
        page = views.Page(_page_number(query), PAGE_SIZE, len(keys))
        rows = []
        for key in page.slice(keys):
            value = dump[key]
            raw = value.value or b""
            ttl = "infinite" if value.ttl_ms == TTL_INFINITY else f"{value.ttl_ms / 1000:.0f} s"
            rows.append({"key": key, "version": value.version,
                         "originator": value.originator_id, "ttl": ttl, "size": len(raw),
                         "value": decode_value(raw) if raw else "(empty: deleted)"})
        return "keys", "Keys", views.keys_body(prefix, rows, page), prefix

    def _revisions(self, viewer: views.Viewer, query: dict[str, str]
                   ) -> tuple[str, str, str, str]:
        nodes = sorted({key.split("/")[1] for key in self._dump("revision/")
                        if key.count("/") >= 2})
        name = query.get("name") or (viewer.local if viewer.local in nodes or not nodes
                                     else nodes[0])
        rows: list[dict[str, Any]] = self.backend.mesh_call(
            lambda c: _revision_rows(c, name))
        return ("revisions", "Revisions", views.revisions_body(nodes, name, rows, viewer),
                f"revision/{name}/")


def _revision_rows(client: KvStoreClient, node: str) -> list[dict[str, Any]]:
    from kvmesh.agent.revision_actions import revision_rows

    return revision_rows(client, node)


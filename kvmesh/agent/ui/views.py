"""The console's HTML, rendered on the server (I/O-free: data in, text out).

Every value from the mesh is escaped (`e`); state is always written as a word, its colour only
repeats it; tables have captions and header cells; links and buttons are ordinary elements,
reachable with the keyboard.
"""

from __future__ import annotations

import html
import json
import time
import urllib.parse
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kvmesh.agent.ui.cluster_view import NodeRow, states_in_order

VIEWS = (("cluster", "/ui/", "Cluster"), ("node", "/ui/node", "Node"),
         ("keys", "/ui/keys", "Keys"), ("revisions", "/ui/revisions", "Revisions"))


def e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def url(path: str, **params: Any) -> str:
    query = urllib.parse.urlencode({k: v for k, v in params.items() if v not in (None, "")})
    return e(path + (f"?{query}" if query else ""))


def when(epoch: Any) -> str:
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(epoch)))
    except (TypeError, ValueError):
        return "?"


def state(word: Any) -> str:
    return f'<span class="state state-{e(word)}">{e(word)}</span>'


def compact(value: Any, limit: int = 400) -> str:
    text = json.dumps(value, sort_keys=True) if not isinstance(value, str) else value
    return text if len(text) <= limit else text[:limit] + f"… ({len(text)} characters)"


@dataclass(frozen=True)
class Viewer:
    """Who looks: what the page may offer them."""

    role: str
    who: str
    csrf: str
    local: str  # the node whose agent serves this console

    @property
    def may_act(self) -> bool:
        return self.role == "operator"


def layout(title: str, active: str, body: str, viewer: Viewer, stream: str, css: str) -> str:
    """The whole page; the stylesheet inline (no request to wait for before the first paint:
    the CSP allows inline styles, never inline scripts), the script deferred."""
    nav = "".join(
        f'<li><a href="{e(href)}"{" aria-current=page" if key == active else ""}>{e(label)}'
        f"</a></li>" for key, href, label in VIEWS)
    return f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="csrf-token" content="{e(viewer.csrf)}">
<title>{e(title)} — kvmesh console ({e(viewer.local)})</title>
<style>{css}</style>
</head>
<body data-role="{e(viewer.role)}">
<header>
<h1>kvmesh console — agent of {e(viewer.local)}</h1>
<nav aria-label="Views"><ul>{nav}</ul></nav>
<p class="muted">Signed in as {e(viewer.role)} ({e(viewer.who)})</p>
<form method="post" action="/ui/logout"><button type="submit">Log out</button></form>
</header>
<p id="connection" role="alert" hidden>The agent is not reachable: reconnecting…</p>
<p id="notice" role="status" aria-live="polite"></p>
<main id="main" data-stream="{e(stream)}" tabindex="-1">
{body}
</main>
<script src="/ui/static/console.js" defer></script>
</body>
</html>
"""


def login_page(message: str = "", status_text: str = "") -> str:
    note = f'<p role="alert" class="state state-FAILED">{e(message)}</p>' if message else ""
    return f"""<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><title>kvmesh console: log in</title>
<link rel="stylesheet" href="/ui/static/console.css"></head>
<body><main class="login">
<h1>kvmesh console</h1>
{note}
<p>Run <code>kvmesh ui --open</code> on a machine with the cluster's token, or paste a token
(an operator's may act; a reader's sees everything and changes nothing).</p>
<form method="post" action="/ui/login">
<label for="token">Bearer token</label>
<input id="token" name="token" type="password" autocomplete="off" required autofocus>
<p><button type="submit">Log in</button></p>
</form>
<p class="muted">{e(status_text)}</p>
</main></body></html>
"""


def table(caption: str, headers: Sequence[str], rows: Iterable[Sequence[str]],
          empty: str = "nothing") -> str:
    """Cells are HTML already (escape on the way in)."""
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>"
                   for row in rows)
    if not body:
        body = f'<tr><td colspan="{len(headers)}" class="muted">{e(empty)}</td></tr>'
    head = "".join(f'<th scope="col">{e(h)}</th>' for h in headers)
    return (f"<table><caption>{e(caption)}</caption><thead><tr>{head}</tr></thead>"
            f"<tbody>{body}</tbody></table>")


# -- cluster -----------------------------------------------------------------------------------


def cluster_body(rows: Mapping[str, NodeRow], map_svg: str, viewer: Viewer) -> str:
    states = states_in_order({s for row in rows.values() for s in row.counts})
    out = []
    for name, row in rows.items():
        devices = ", ".join(f"{e(d)}: {state(s)}" for d, s in sorted(row.devices.items())) \
            or '<span class="muted">none</span>'
        counts = ", ".join(f"{state(s)} {row.counts[s]}" for s in states if row.counts[s]) \
            or '<span class="muted">no values</span>'
        failed = "—"
        if row.oldest_failed is not None:
            key, error, since = row.oldest_failed
            failed = f"<code>{e(key)}</code> since {e(when(since))}: {e(error)}"
        agent = (f'{state("ok")} <a href="{"https" if row.tls else "http"}://{e(row.agent)}/ui/"'
                 f">{e(row.agent)}</a>" if row.agent else state("down"))
        out.append([f'<a href="{url("/ui/node", name=name)}">{e(name)}</a>'
                    + (" (this agent)" if name == viewer.local else ""),
                    state(row.health), e(row.role)
                    + (f" / {e(row.member_role)}" if row.member_role else ""),
                    e(row.version), agent, devices, counts, failed])
    nodes_table = table(f"Nodes ({len(rows)})", ["Node", "Health", "Role", "Version",
                                                 "Agent", "Devices", "Values by state",
                                                 "Oldest FAILED"], out, "no node found")
    return (f"<h2>Cluster</h2>{nodes_table}<h2 id=map-title>Map of the mesh</h2>"
            f'<figure class="map" aria-labelledby="map-title">{map_svg}'
            f"<figcaption>Each box a node (its health in words), each line a peering with "
            f"its state (INITIALIZED solid, SYNCING/IDLE dashed, ? not reported); leaves are "
            f"drawn inside their core node's frame. Select a node to open it.</figcaption>"
            f"</figure>")


# -- node --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Page:
    number: int
    size: int
    total: int

    @property
    def last(self) -> int:
        return max(0, (self.total - 1) // self.size)

    def slice(self, items: Sequence[Any]) -> Sequence[Any]:
        start = self.number * self.size
        return items[start:start + self.size]


def pager(page: Page, path: str, **params: Any) -> str:
    links = []
    if page.number > 0:
        links.append(f'<a href="{url(path, **params, page=page.number - 1)}" rel="prev">'
                     f"Previous page</a>")
    links.append(f"<span>page {page.number + 1} of {page.last + 1} ({page.total} in all)"
                 f"</span>")
    if page.number < page.last:
        links.append(f'<a href="{url(path, **params, page=page.number + 1)}" rel="next">'
                     f"Next page</a>")
    return f'<nav class="pager" aria-label="Pages">{"".join(links)}</nav>'


def node_picker(nodes: Sequence[str], current: str, path: str) -> str:
    options = "".join(f'<option{" selected" if n == current else ""}>{e(n)}</option>'
                      for n in nodes)
    return (f'<form class="filters" method="get" action="{e(path)}">'
            f'<label>Node<select name="name" id="node-select">{options}</select></label>'
            f'<button type="submit">Show</button></form>')


def node_values(node: str, values: Sequence[Mapping[str, Any]], page: Page, state_filter: str,
                prefix: str, states: Sequence[str], selected: str) -> str:
    options = "".join(f'<option{" selected" if s == state_filter else ""}>{e(s)}</option>'
                      for s in ["", *states])
    filters = (f'<form class="filters" method="get" action="/ui/node">'
               f'<input type="hidden" name="name" value="{e(node)}">'
               f'<label>State<select name="state" id="state-filter">{options}</select></label>'
               f'<label>Key prefix<input name="prefix" id="prefix-filter" value="{e(prefix)}">'
               f'</label><button type="submit">Filter</button></form>')
    rows = []
    for v in page.slice(values):
        details = "; ".join(str(d) for d in v.get("details") or ())
        rows.append([f'<a href="{url("/ui/node", name=node, key=v["key"])}"><code>'
                     f'{e(v["key"])}</code></a>', state(v.get("state", "?")),
                     e(v.get("origin", "")), e(v.get("last_op", "")), e(v.get("error") or ""),
                     e(details), e(when(v.get("time")))])
    caption = f"Values of {node}" + (f" in state {state_filter}" if state_filter else "") + \
        (f" under {prefix}" if prefix else "")
    return (f"<h3>Values</h3>{filters}" + table(caption, ["Key", "State", "Origin", "Last op",
                                                          "Error", "Details", "Since"], rows,
                                                "no value matches")
            + pager(page, "/ui/node", name=node, state=state_filter, prefix=prefix,
                    key=selected))


def value_detail(node: str, key: str, status: Mapping[str, Any] | None, desired: Any,
                 actual: Any, local: bool) -> str:
    actual_text = (compact(actual, 4000) if actual is not None else "not present") if local \
        else f"only {node}'s own agent reads its devices: open its console"
    return (f'<section aria-labelledby="detail-title"><h3 id="detail-title">Value '
            f"<code>{e(key)}</code></h3>"
            + table("Desired and actual", ["", "Value"], [
                ["State", state((status or {}).get("state", "none")) + " "
                 + e((status or {}).get("error") or "")],
                ["Desired (config in the mesh)", f"<pre>{e(compact(desired, 4000))}</pre>"
                 if desired is not None else "none"],
                ["Actual (the device, as the agent reads it)", f"<pre>{e(actual_text)}</pre>"],
            ]) + "</section>")


def history_table(records: Sequence[Mapping[str, Any]], node: str, txn: int | None) -> str:
    rows = []
    for r in records:
        ops = "<br>".join(
            e(f"{op.get('operation', '?')} {op.get('key', '?')}"
              + (f" → {op.get('new_state')}" if op.get("new_state") else "")
              + (f" ({op.get('error')})" if op.get("error") else ""))
            for op in (r.get("executed") or r.get("operations") or [])[:20])
        seq = r.get("seq")
        rows.append([f'<a href="{url("/ui/node", name=node, txn=seq)}">{e(seq)}</a>',
                     e(when(r.get("start"))), e(r.get("type", "")),
                     e(r.get("description", "")), ops or '<span class="muted">none</span>'])
    graph = ""
    if records:
        seqs = [r.get("seq") for r in records]
        shown = txn if txn in seqs else seqs[0]
        i = seqs.index(shown)
        older = f'<a href="{url("/ui/node", name=node, txn=seqs[i + 1])}">older</a>' \
            if i + 1 < len(seqs) else ""
        newer = f'<a href="{url("/ui/node", name=node, txn=seqs[i - 1])}">newer</a>' \
            if i > 0 else ""
        graph = (f'<h3 id="graph-title">Scheduler graph after transaction {e(shown)}</h3>'
                 f'<nav class="pager" aria-label="Transactions">{older} {newer}</nav>'
                 f'<p class="graph"><img src="{url("/scheduler/graph", txn=shown)}" '
                 f'alt="The scheduler graph of {e(node)} right after transaction {e(shown)}: '
                 f'values and their dependencies, the ones it touched highlighted"></p>')
    return table("Transactions (newest first)", ["Seq", "Started", "Type", "Description",
                                                 "Operations"], rows, "none yet") + graph


def recon_table(view: Mapping[str, Any]) -> str:
    services = view.get("services") or []
    rows = [[e(s.get("name", "?")), e(s.get("priority", "")), e(s.get("intent", ""))]
            for s in services if isinstance(s, Mapping)]
    devices = view.get("devices") or {}
    dev_rows = [[e(d), state(s if isinstance(s, str) else s.get("state", "?"))]
                for d, s in sorted(devices.items())]
    held = [[e(d), e(reason)] for d, reason in sorted((view.get("held") or {}).items())]
    return (table("Reconciliation services", ["Service", "Priority", "Intent"],
                  rows, "none registered")
            + table("Devices held out of KNOWN", ["Device", "Why"], held, "none")
            + table("Devices", ["Device", "State"], dev_rows, "none"))


# -- keys --------------------------------------------------------------------------------------


def keys_body(prefix: str, rows: Sequence[Mapping[str, Any]], page: Page) -> str:
    """`rows`: the page's keys only (the store is read once, and only a page decoded)."""
    cells = [[f"<code>{e(r['key'])}</code>", f'<span class="num">{e(r["version"])}</span>',
              e(r["originator"]), e(r["ttl"]), f'<span class="num">{e(r["size"])}</span>',
              f"<pre>{e(compact(r['value']))}</pre>"] for r in rows]
    form = (f'<form class="filters" method="get" action="/ui/keys"><label>Key prefix'
            f'<input name="prefix" id="key-prefix" value="{e(prefix)}"></label>'
            f'<button type="submit">Browse</button></form>')
    return (f"<h2>Keys of this node's store</h2>{form}"
            + table(f"Keys under {prefix!r}", ["Key", "Version", "Originator", "TTL left",
                                               "Size (bytes)", "Value"], cells, "no key")
            + pager(page, "/ui/keys", prefix=prefix))


# -- revisions ---------------------------------------------------------------------------------


def revisions_body(nodes: Sequence[str], node: str, rows: Sequence[Mapping[str, Any]],
                   viewer: Viewer) -> str:
    picker = node_picker(nodes, node, "/ui/revisions") if nodes else ""
    cells = []
    for r in rows:
        diff = "<br>".join(
            f"<code>{e(key)}</code>: {e(compact(c.get('before'), 200))} → "
            f"{e(compact(c.get('after'), 200))}" for key, c in sorted(r["changes"].items()))
        actions = ""
        if viewer.may_act and r["state"] == "pending":
            q = {"node": node, "rev": r["rev"]}
            actions = (f'<button type="button" data-post="{url("/revisions/confirm", **q)}" '
                       f'data-done="Revision {e(r["rev"])} of {e(node)} confirmed">Confirm'
                       f'</button> <button type="button" '
                       f'data-post="{url("/revisions/rollback", **q)}" data-confirm="Roll back '
                       f'revision {e(r["rev"])} of {e(node)} now?" data-done="Revision '
                       f'{e(r["rev"])} of {e(node)} rolled back">Roll back</button>')
        cells.append([e(r["rev"]), e(when(r["time"])), e(r["who"]), e(r["description"]),
                      state(r["state"]), diff, actions])
    headers = ["Rev", "When", "Who", "What", "State", "Changes (before → after)"]
    if viewer.may_act:
        headers.append("Actions")
    else:
        cells = [c[:-1] for c in cells]
    resync = ""
    if viewer.may_act:
        resync = (f'<p><button type="button" data-post="/scheduler/downstream-resync" '
                  f'data-done="Downstream resync of {e(viewer.local)} done">Resync '
                  f'{e(viewer.local)}</button> <span class="muted">(reads the devices of '
                  f"{e(viewer.local)} and repairs drift; another node's resync is in its own "
                  f"console)</span></p>")
    return (f"<h2>Revisions of {e(node or '—')}</h2>{picker}{resync}"
            + table(f"Revisions of {node} (newest first)", headers, cells,
                    "no revision recorded"))

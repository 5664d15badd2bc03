"""The cluster as the console shows it, built from what the mesh holds (I/O-free).

Every node is found in the mesh: its membership record (`member/<N>`), its agent's record
(`node/<N>/agent`: REST address, software version), its devices (`node/<N>/device/<dev>`), its
peers as its agent last saw them (`node/<N>/peers`), and its values' statuses
(`status/<N>/...`). A node is listed when any of these names it.
"""

from __future__ import annotations

import re
import urllib.parse
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kvmesh.agent.sse import decode_value
from kvstore import Value

STATE_ORDER = ("FAILED", "INVALID", "RETRYING", "PENDING", "CONFIGURED", "OBTAINED",
               "UNIMPLEMENTED", "REMOVED", "NONEXISTENT")
BAD_STATES = frozenset({"FAILED", "INVALID"})


@dataclass
class NodeRow:
    name: str
    role: str = "?"  # full | leaf | ? (not known: no agent ever said)
    member_role: str | None = None  # peer | operator | reader, from member/<N>
    version: str = "?"
    agent: str | None = None  # the agent's REST address while its record lives
    tls: bool = False
    devices: dict[str, str] = field(default_factory=dict)  # device -> state
    counts: Counter[str] = field(default_factory=Counter)  # value state -> how many
    oldest_failed: tuple[str, str, float] | None = None  # (model key, error, time)
    peers: dict[str, str] = field(default_factory=dict)  # peer -> state ("?" unknown)

    @property
    def health(self) -> str:
        """One word, said in text wherever a colour says it too."""
        if self.agent is None:
            return "down"
        if any(self.counts[s] for s in BAD_STATES) or any(
                d != "KNOWN" for d in self.devices.values()):
            return "degraded"
        return "ok"


def _record(value: Value | None) -> dict[str, Any] | None:
    if value is None or not value.value:
        return None
    decoded = decode_value(value.value)
    return decoded if isinstance(decoded, dict) and "b64" not in decoded else None


def build_nodes(members: Mapping[str, Value], node_keys: Mapping[str, Value],
                statuses: Mapping[str, Value]) -> dict[str, NodeRow]:
    """Rows by node name from dumps of `member/`, `node/` and `status/`."""
    rows: dict[str, NodeRow] = {}

    def row(name: str) -> NodeRow:
        return rows.setdefault(name, NodeRow(name))

    for key, value in members.items():
        record = _record(value)
        name = key.split("/", 1)[1] if "/" in key else ""
        if not name or record is None or record.get("state") == "removed":
            continue
        node = row(name)
        node.member_role = str(record.get("role") or "") or None
        for peer in record.get("peers") or ():
            node.peers.setdefault(str(peer), "?")
    for key, value in node_keys.items():
        parts = key.split("/")
        if len(parts) < 3:
            continue
        node = row(parts[1])  # listed even when its record is withdrawn: shown down
        record = _record(value)
        if record is None:
            continue
        if parts[2] == "agent":
            node.agent = str(record.get("http") or "") or None
            node.tls = bool(record.get("tls"))
            node.version = str(record.get("version") or "?")
        elif parts[2] == "device" and len(parts) == 4:
            node.devices[parts[3]] = str(record.get("state", "?"))
        elif parts[2] == "peers":
            node.role = "leaf" if record.get("leaf") else "full"
            for peer, state in (record.get("peers") or {}).items():
                node.peers[str(peer)] = str(state)
    for key, value in statuses.items():
        parts = key.split("/", 2)
        record = _record(value)
        if len(parts) < 3 or record is None:
            continue
        node = row(parts[1])
        state = str(record.get("state", "?"))
        node.counts[state] += 1
        if state == "FAILED":
            when = float(record.get("time") or 0.0)
            if node.oldest_failed is None or when < node.oldest_failed[2]:
                node.oldest_failed = (parts[2], str(record.get("error") or ""), when)
    return dict(sorted(rows.items(), key=lambda item: natural(item[0])))


def natural(name: str) -> tuple[tuple[int, str, int], ...]:
    """Sort key: n2 before n10."""
    return tuple((0, part, 0) if not part.isdigit() else (1, "", int(part))
                 for part in re.split(r"(\d+)", name) if part)


def edges(rows: Mapping[str, NodeRow]) -> dict[tuple[str, str], str]:
    """Each peering once, (a, b) with a < b -> its state: the best either side reports
    (a side that has not reported says "?")."""
    rank = {"INITIALIZED": 3, "SYNCING": 2, "IDLE": 1, "?": 0}
    out: dict[tuple[str, str], str] = {}
    for name, row in rows.items():
        for peer, state in row.peers.items():
            pair = (min(name, peer), max(name, peer))
            if rank.get(state, 0) >= rank.get(out.get(pair, "?"), 0):
                out[pair] = state
    return out


HEALTH_COLOURS = {"ok": "#d8f0d8", "degraded": "#ffe0a0", "down": "#f4b8b8"}
EDGE_STYLES = {"INITIALIZED": 'color="#2a7a2a"', "SYNCING": 'color="#b07000" style=dashed',
               "IDLE": 'color="#b02020" style=dashed', "?": 'color="#808080" style=dotted'}


def _dot_id(text: str) -> str:
    """A quoted DOT string (a newline in `text` becomes a line break of the label)."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def map_dot(rows: Mapping[str, NodeRow], local: str) -> str:
    """The mesh for Graphviz: a box per node (health in its colour AND its label), a line per
    peering (state as label and style); each leaf drawn inside its core node's cluster."""
    lines = ["graph mesh {", '  graph [rankdir=LR fontname="sans-serif" fontsize=10];',
             '  node [shape=box style="rounded,filled" fontname="sans-serif" fontsize=10];',
             '  edge [fontname="sans-serif" fontsize=8];']
    cores: dict[str, list[str]] = {}
    for name, row in rows.items():
        if row.role == "leaf" and row.peers:
            cores.setdefault(sorted(row.peers)[0], []).append(name)

    def box(name: str) -> str:
        row = rows[name]
        bad = sum(row.counts[s] for s in BAD_STATES)
        label = f"{name}{' (this agent)' if name == local else ''}\n{row.role} · {row.health}"
        if bad:
            label += f"\n{bad} failed/invalid"
        url = "/ui/node?name=" + urllib.parse.quote(name)
        return (f"  {_dot_id(name)} [label={_dot_id(label)} "
                f"fillcolor=\"{HEALTH_COLOURS[row.health]}\" URL={_dot_id(url)} "
                f"tooltip={_dot_id(f'{name}: {row.health}')}];")

    grouped = {leaf for leaves in cores.values() for leaf in leaves}
    for core, leaves in sorted(cores.items()):
        lines.append(f"  subgraph {_dot_id('cluster_' + core)} {{")
        lines.append(f'    label="{core} and its leaves"; style=dashed; color="#a0a0a0";')
        lines += ["  " + box(n) for n in [core, *sorted(leaves)] if n in rows]
        lines.append("  }")
    lines += [box(name) for name in rows if name not in grouped and name not in cores]
    for (a, b), state in sorted(edges(rows).items()):
        if a in rows and b in rows:
            lines.append(f"  {_dot_id(a)} -- {_dot_id(b)} [label=\"{state}\" "
                         f"{EDGE_STYLES.get(state, EDGE_STYLES['?'])}];")
    lines.append("}")
    return "\n".join(lines) + "\n"


def states_in_order(states: Iterable[str]) -> list[str]:
    known = [s for s in STATE_ORDER if s in set(states)]
    return known + sorted(set(states) - set(known))

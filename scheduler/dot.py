"""Graphviz DOT export of the value graph (clusters per descriptor, colours per state)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any, Protocol

from scheduler.api import Dependency, Key, ValueState
from scheduler.graph import Graph
from scheduler.history import NodeRevision
from scheduler.readiness import candidate_keys

_FILL = {
    ValueState.NONEXISTENT: "black",
    ValueState.REMOVED: "black",
    ValueState.MISSING: "dimgray",
    ValueState.UNIMPLEMENTED: "darkkhaki",
    ValueState.CONFIGURED: "white",
    ValueState.OBTAINED: "lightcyan",
    ValueState.DISCOVERED: "lime",
    ValueState.PENDING: "pink",
    ValueState.INVALID: "maroon",
    ValueState.FAILED: "orangered",
    ValueState.RETRYING: "deeppink",
}
_DASHED = {ValueState.MISSING, ValueState.UNIMPLEMENTED, ValueState.PENDING}


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


class _View(Protocol):
    """What the renderer needs of a value: a graph Node or a history NodeRevision."""

    key: Key
    label: str
    state: ValueState
    details: tuple[str, ...]
    derived_from: Key | None
    descriptor: Any


Targets = Callable[[Dependency], list[Key]]

_HIGHLIGHT = ', penwidth=3, color=blue'


def graph_to_dot(graph: Graph, highlight: Collection[Key] = ()) -> str:
    """The live graph; values in ``highlight`` drawn with a thick blue border."""
    nodes = {key: graph.nodes[key] for key in graph.keys}
    return _render(
        nodes,
        lambda key: graph.nodes[key].deps,
        lambda key: [derived for derived, _ in graph.nodes[key].derived],
        lambda dep: list(candidate_keys(graph, dep)),
        lambda key: graph.nodes[key].available,
        set(highlight),
    )


def revisions_to_dot(revisions: Iterable[NodeRevision], highlight: Collection[Key] = ()) -> str:
    """The graph as a history snapshot recorded it (e.g. right after one transaction)."""
    nodes = {revision.key: revision for revision in revisions}

    def targets(dep: Dependency) -> list[Key]:
        if dep.key is not None:
            return [dep.key] if dep.key in nodes else []
        return [key for key in nodes if dep.any_of is not None and dep.any_of(key)
                and nodes[key].available]

    return _render(
        nodes,
        lambda key: nodes[key]._deps,
        lambda key: list(nodes[key].derived),
        targets,
        lambda key: nodes[key].available,
        set(highlight),
    )


def _render(nodes: Mapping[Key, _View], deps_of: Callable[[Key], Iterable[Dependency]],
            derived_of: Callable[[Key], Iterable[Key]], targets_of: Targets,
            available: Callable[[Key], bool], highlight: set[Key]) -> str:
    lines = ["digraph kvscheduler {", "  rankdir=LR;", '  node [shape=box, style="filled"];']
    clusters: dict[str, list[str]] = {}
    for key, node in nodes.items():
        owner = node.descriptor.name if node.descriptor is not None else "(no descriptor)"
        style = ["filled"]
        if node.state in _DASHED:
            style.append("dashed")
        if node.derived_from is not None:
            style.append("rounded")
        fill = _FILL[node.state]
        if node.derived_from is not None and node.state is ValueState.CONFIGURED:
            fill = "lightyellow"
        font = "white" if fill in ("black", "maroon", "dimgray") else "black"
        tooltip = f"{key}\\nstate: {node.state.name}"
        if node.details:
            tooltip += "\\nmissing: " + ", ".join(node.details)
        clusters.setdefault(owner, []).append(
            f"    {_quote(key)} [label={_quote(node.label + chr(10) + node.state.name)}, "
            f'fillcolor={fill}, fontcolor={font}, style="{",".join(style)}", '
            f"tooltip={_quote(tooltip)}{_HIGHLIGHT if key in highlight else ''}];"
        )
    for n, (owner, members) in enumerate(sorted(clusters.items())):
        lines.append(f"  subgraph cluster_{n} {{")
        lines.append(f"    label={_quote(owner)};")
        lines.extend(members)
        lines.append("  }")
    for key in nodes:
        for derived_key in derived_of(key):
            if derived_key in nodes:
                lines.append(
                    f'  {_quote(key)} -> {_quote(derived_key)} [style=bold, label="derives"];'
                )
        for dep in deps_of(key):
            targets = targets_of(dep)
            if targets:
                for target in targets:
                    color = "black" if available(target) else "red"
                    lines.append(
                        f"  {_quote(key)} -> {_quote(target)} "
                        f"[label={_quote(dep.label)}, color={color}];"
                    )
            else:
                missing = dep.key if dep.key is not None else f"? {dep.label} ?"
                lines.append(f'  {_quote(missing)} [style="dashed", color=red, fillcolor=white];')
                lines.append(
                    f"  {_quote(key)} -> {_quote(missing)} [label={_quote(dep.label)}, color=red];"
                )
    lines.append("}")
    return "\n".join(lines) + "\n"

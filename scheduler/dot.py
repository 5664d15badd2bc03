"""Graphviz DOT export of the value graph (clusters per descriptor, colours per state)."""

from __future__ import annotations

from scheduler.api import ValueState
from scheduler.graph import Graph
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


def graph_to_dot(graph: Graph) -> str:
    lines = ["digraph kvscheduler {", "  rankdir=LR;", '  node [shape=box, style="filled"];']
    clusters: dict[str, list[str]] = {}
    for key in graph.keys:
        node = graph.nodes[key]
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
            f"tooltip={_quote(tooltip)}];"
        )
    for n, (owner, members) in enumerate(sorted(clusters.items())):
        lines.append(f"  subgraph cluster_{n} {{")
        lines.append(f"    label={_quote(owner)};")
        lines.extend(members)
        lines.append("  }")
    for key in graph.keys:
        node = graph.nodes[key]
        for derived_key, _ in node.derived:
            if derived_key in graph.nodes:
                lines.append(
                    f'  {_quote(key)} -> {_quote(derived_key)} [style=bold, label="derives"];'
                )
        for dep in node.deps:
            targets = list(candidate_keys(graph, dep))
            if targets:
                for target in targets:
                    color = "black" if graph.nodes[target].available else "red"
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

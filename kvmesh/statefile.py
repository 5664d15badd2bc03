"""Declared node state as a file, and its difference with the mesh's desired state.

I/O-free: ``parse_state`` reads the text of a state file (YAML or JSON)::

    nodes:
      n2:
        linux/interface/veth0: {type: veth, veth: {peer: veth1}}
        linux/route/main/10.9.0.0/24/veth0: {dst: 10.9.0.0/24, dev: veth0}

and ``diff_state`` compares it with what the mesh holds (a pure function), node by node: values
added, changed (with a field-by-field diff) and, with ``replace``, removed. ``export_state``
is the inverse of ``parse_state`` for what the mesh holds, so export -> apply is a no-op.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from kvmesh.agent.keys import validate_node_name

# libyaml's loader when PyYAML was built with it (several times faster), else the pure one.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)

NodeValues = dict[str, dict[str, Any]]  # model key -> value
State = dict[str, NodeValues]  # node -> its values


class StateFileError(ValueError):
    """The file is not a state file (syntax or shape); says where."""


def parse_state(text: str, source: str = "state file") -> State:
    """The ``nodes`` of a state file (YAML, which includes JSON)."""
    try:
        data = json.loads(text)  # JSON is YAML, but the JSON parser is far faster
    except ValueError:
        try:
            data = yaml.load(text, Loader=_LOADER)  # a safe loader (C or pure)
        except yaml.YAMLError as exc:
            raise StateFileError(f"{source}: not valid YAML/JSON: {exc}") from None
    if not isinstance(data, dict) or set(data) != {"nodes"}:
        raise StateFileError(f"{source}: expected a mapping with one key 'nodes' "
                             "({nodes: {<node>: {<model key>: <value>}}})")
    nodes = data["nodes"] or {}
    if not isinstance(nodes, dict):
        raise StateFileError(f"{source}: 'nodes' must map node names to their values")
    state: State = {}
    for node, values in nodes.items():
        try:
            validate_node_name(str(node))
        except ValueError as exc:
            raise StateFileError(f"{source}: {exc}") from None
        values = values or {}
        if not isinstance(values, dict):
            raise StateFileError(f"{source}: nodes.{node} must map model keys to values")
        for model_key, value in values.items():
            if not isinstance(model_key, str) or not model_key:
                raise StateFileError(f"{source}: nodes.{node}: model keys must be strings")
            if not isinstance(value, dict):
                raise StateFileError(f"{source}: nodes.{node}.{model_key}: the value must be a "
                                     f"mapping (got {type(value).__name__})")
        state[str(node)] = {str(k): v for k, v in values.items()}
    return state


def export_state(state: State, fmt: str = "yaml") -> str:
    """The text of a state file holding ``state`` (keys sorted, so exports compare)."""
    data = {"nodes": {node: dict(sorted(values.items())) for node, values in
                      sorted(state.items())}}
    if fmt == "json":
        return json.dumps(data, indent=2, sort_keys=True) + "\n"
    return str(yaml.dump(data, Dumper=_DUMPER, sort_keys=True, default_flow_style=False))


@dataclass(frozen=True)
class FieldChange:
    path: str
    old: Any
    new: Any


@dataclass
class NodeDiff:
    """What applying the file changes in one node's desired state."""

    node: str
    added: dict[str, dict[str, Any]] = field(default_factory=dict)
    changed: dict[str, tuple[dict[str, Any], dict[str, Any], list[FieldChange]]] = field(
        default_factory=dict)
    removed: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not (self.added or self.changed or self.removed)

    def writes(self) -> dict[str, dict[str, Any] | None]:
        """The batch to write: model key -> new value (None deletes)."""
        out: dict[str, dict[str, Any] | None] = {}
        out.update(self.added)
        out.update({key: new for key, (_old, new, _f) in self.changed.items()})
        out.update(dict.fromkeys(self.removed))
        return out

    def previous(self) -> dict[str, dict[str, Any] | None]:
        """What the written keys held before (None: absent)."""
        out: dict[str, dict[str, Any] | None] = dict.fromkeys(self.added)
        out.update({key: old for key, (old, _new, _f) in self.changed.items()})
        out.update(self.removed)
        return out


def diff_state(current: Mapping[str, Mapping[str, Any]], wanted: State,
               replace: bool = False) -> dict[str, NodeDiff]:
    """Per node of ``wanted``: its changes against ``current`` (node -> model key -> value).
    ``replace`` removes what the node has and the file does not name."""
    result: dict[str, NodeDiff] = {}
    for node, values in wanted.items():
        have = current.get(node, {})
        diff = NodeDiff(node)
        for key, value in sorted(values.items()):
            old = have.get(key)
            if old is None:
                diff.added[key] = value
            elif old != value:
                diff.changed[key] = (dict(old), value, field_changes(old, value))
        if replace:
            for key in sorted(set(have) - set(values)):
                diff.removed[key] = dict(have[key])
        result[node] = diff
    return result


def field_changes(old: Any, new: Any, path: str = "") -> list[FieldChange]:
    """Leaf-level differences of two values (maps are walked, anything else compared whole)."""
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        out: list[FieldChange] = []
        for name in sorted(set(old) | set(new), key=str):
            sub = f"{path}.{name}" if path else str(name)
            if name not in new:
                out.append(FieldChange(sub, old[name], None))
            elif name not in old:
                out.append(FieldChange(sub, None, new[name]))
            else:
                out.extend(field_changes(old[name], new[name], sub))
        return out
    return [] if old == new else [FieldChange(path or "(value)", old, new)]

"""docs/models.md, generated from the models' JSON Schema (`python -m kvmesh.agent.models_doc >
docs/models.md`), and the README's table of model keys (`python -m kvmesh.agent.models_doc
--readme` rewrites it between its markers); a test fails when either is stale."""

from __future__ import annotations

import json
from typing import Any

from kvmesh.agent.models import MODELS, json_schema

HEADER = """# Configuration models reference

Generated from the model registries (`southbound/linux/registry.py`, `southbound/vpp/registry.py`;
one module per model under `southbound/<plane>/models/`) by
`python -m kvmesh.agent.models_doc > docs/models.md`; do not edit by hand. The same content as
JSON Schema: `kvmesh model schema [MODEL]` or the agent's `GET /info/configuration/jsonschema`.
Conventions (strict types, unknown fields refused, `null` = absent) and the workflow:
[operator.md](operator.md).
"""


def _type_of(prop: dict[str, Any], defs: dict[str, Any]) -> str:
    if "$ref" in prop:
        return f"object ({prop['$ref'].rsplit('/', 1)[1]})"
    if "anyOf" in prop:
        kinds = [_type_of(p, defs) for p in prop["anyOf"] if p.get("type") != "null"]
        return " or ".join(kinds) + (" or null" if len(kinds) < len(prop["anyOf"]) else "")
    if "oneOf" in prop:
        return " or ".join(_type_of(p, defs) for p in prop["oneOf"])
    if "enum" in prop:
        return "one of " + ", ".join(f"`{v}`" for v in prop["enum"])
    if "const" in prop:
        return f"`{prop['const']}`"
    kind = str(prop.get("type", "any"))
    if kind == "array":
        return f"list of {_type_of(prop.get('items', {}), defs)}"
    limits = []
    if "minimum" in prop or "maximum" in prop:
        limits.append(f"{prop.get('minimum', '')}..{prop.get('maximum', '')}")
    if "maxLength" in prop:
        limits.append(f"{prop.get('minLength', 0)}..{prop['maxLength']} chars")
    return kind + (f" ({', '.join(limits)})" if limits else "")


def _table(schema: dict[str, Any], defs: dict[str, Any]) -> list[str]:
    required = set(schema.get("required", ()))
    if not schema.get("properties"):
        return ["(no fields: `{}`)"]
    rows = ["| field | type | default | description |", "|---|---|---|---|"]
    for name, prop in schema.get("properties", {}).items():
        if name in required:
            default = "required"
        elif "default" in prop:
            default = f"`{json.dumps(prop['default'])}`"
        else:
            default = "`[]`" if prop.get("type") == "array" else "`null`"
        kind = _type_of(prop, defs).replace("|", "\\|")
        rows.append(f"| `{name}` | {kind} | {default} | {prop.get('description', '')} |")
    return rows


def reference() -> str:
    out = [HEADER]
    for model in MODELS:
        schema = json_schema(model.name)
        defs = schema.get("$defs", {})
        about = model.description[:1].upper() + model.description[1:]
        out += [f"## {model.name}", "", f"Key: `{model.shape}`. {about}", ""]
        out += _table(schema, defs)
        for name, sub in sorted(defs.items()):
            about = " ".join(str(sub.get("description", "")).split()).replace("``", "`")
            out += ["", f"### {name}", "", about, ""]
            out += _table(sub, defs)
        out.append("")
    return "\n".join(out)


README_BEGIN = ("<!-- model keys: generated from the model registries by "
                "`python -m kvmesh.agent.models_doc --readme`; do not edit by hand -->")
README_END = "<!-- end of model keys -->"


def _field_summary(name: str, prop: dict[str, Any]) -> str:
    """`"name"`, with the choices of an enumerated field: `"type": "veth"|"bridge"`."""
    choices = prop.get("enum")
    if choices is None and "anyOf" in prop:
        choices = next((p["enum"] for p in prop["anyOf"] if "enum" in p), None)
    if choices and all(isinstance(c, str) for c in choices):
        return f'"{name}": ' + "|".join(f'"{c}"' for c in choices)
    return f'"{name}"'


def readme_table() -> str:
    """The README's model-key table: one row per model of every plane, in registry order."""
    rows = [README_BEGIN, "", "| model key | value (JSON) | docs |", "|---|---|---|"]
    for model in MODELS:
        properties = json_schema(model.name).get("properties", {})
        fields = ", ".join(_field_summary(n, p) for n, p in properties.items())
        plane = model.name.split("/", 1)[0]
        value = f"`{{{fields}}}`".replace("|", "\\|")
        shape = model.shape.replace("|", "\\|")
        rows.append(f"| `{shape}` | {value} | [docs/{plane}.md](docs/{plane}.md) |")
    rows += ["", README_END]
    return "\n".join(rows)


def with_readme_table(readme: str) -> str:
    """`readme` with the text between the markers replaced by `readme_table()`."""
    head, begin, rest = readme.partition(README_BEGIN)
    _old, end, tail = rest.partition(README_END)
    if not begin or not end:
        raise ValueError(f"README.md has no {README_BEGIN!r} ... {README_END!r} block")
    return head + readme_table() + tail


if __name__ == "__main__":
    import sys
    from pathlib import Path

    if sys.argv[1:] == ["--readme"]:
        readme = Path(__file__).resolve().parents[2] / "README.md"
        readme.write_text(with_readme_table(readme.read_text()))
    else:
        print(reference(), end="")

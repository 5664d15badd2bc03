"""docs/models.md, generated from the models' JSON Schema (`python -m kvmesh.agent.models_doc >
docs/models.md`; a test fails when the file is stale)."""

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


if __name__ == "__main__":
    print(reference(), end="")

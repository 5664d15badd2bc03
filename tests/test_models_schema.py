"""The models as one source of truth: `kvmesh model`, the JSON Schema, the REST validation, and
the documented examples (good ones pass the schema and the models, documented bad ones fail)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest
from click.testing import CliRunner

from kvmesh.agent.http_api import dispatch
from kvmesh.agent.models import MODELS, ModelError, json_schema, model_for, validate_model
from kvmesh.cli import main
from kvmesh.statefile import parse_state

ROOT = Path(__file__).resolve().parent.parent
CONFIG_SET = re.compile(r"kvmesh config set \S+ (\S+) '(\{.*\})'")
BAD_EXAMPLE = re.compile(r"```yaml bad\n(.*?)```", re.S)
GOOD_STATE = re.compile(r"```yaml\n(nodes:.*?)```", re.S)


def documented_examples() -> list[tuple[str, dict]]:
    found = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = doc.read_text()
        found += [(key, json.loads(raw)) for key, raw in CONFIG_SET.findall(text)]
        for block in GOOD_STATE.findall(text):
            for values in parse_state(block).values():
                found += list(values.items())
    for example in sorted((ROOT / "docs" / "examples").glob("*.yaml")):  # whole state files
        for values in parse_state(example.read_text(), str(example)).values():
            found += list(values.items())
    return found


def documented_bad_examples() -> list[tuple[str, dict]]:
    text = (ROOT / "docs" / "operator.md").read_text()
    return [item for block in BAD_EXAMPLE.findall(text)
            for values in parse_state(block).values() for item in values.items()]


def schema_for(model_key: str) -> dict:
    return json_schema(model_for(model_key).name)


def test_every_documented_example_passes_schema_and_model() -> None:
    examples = documented_examples()
    assert len(examples) >= 6
    for key, value in examples:
        jsonschema.validate(value, schema_for(key))
        validate_model(key, value)


def test_documented_bad_examples_are_refused_by_schema_and_model() -> None:
    bad = documented_bad_examples()
    assert len(bad) >= 3
    for key, value in bad:
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(value, schema_for(key))
        with pytest.raises(ModelError):
            validate_model(key, value)


def test_schema_carries_types_ranges_defaults_and_docs() -> None:
    mtu = json_schema("linux/interface")["properties"]["mtu"]
    assert {"minimum": 68, "maximum": 65535}.items() <= mtu["anyOf"][0].items()
    assert mtu["description"]
    bd = json_schema("vpp/bd")
    assert bd["properties"]["arp_term"]["default"] is False
    assert bd["required"] == ["bd_id"] and bd["additionalProperties"] is False
    assert set(json_schema()["models"]) == {m.name for m in MODELS}


def test_model_cli() -> None:
    runner = CliRunner()
    listed = runner.invoke(main, ["--json", "model", "list"])
    assert listed.exit_code == 0, listed.output
    assert [row["model"] for row in json.loads(listed.output)] == [m.name for m in MODELS]
    schema = runner.invoke(main, ["model", "schema", "vpp/route"])
    assert json.loads(schema.output)["x-kvmesh-key"] == "vpp/route/<vrf>/<dst cidr>/<next hop>"
    unknown = runner.invoke(main, ["model", "schema", "vpp/ipsec"])
    assert unknown.exit_code == 2 and "unknown model" in unknown.output


def test_rest_schema_and_validate() -> None:
    api = object()
    resp = dispatch(api, "GET", "/info/configuration/jsonschema")  # type: ignore[arg-type]
    assert resp.status == 200 and set(json.loads(resp.body)["models"]) == {m.name for m in MODELS}
    body = json.dumps({"values": {
        "linux/interface/v0": {"type": "bridge", "mtu": 9},
        "linux/interface/v1": {"type": "bridge"},
        "vpp/ipsec/x": {}}}).encode()
    resp = dispatch(api, "POST", "/configuration/validate", body)  # type: ignore[arg-type]
    result = json.loads(resp.body)
    assert resp.status == 200 and result["valid"] is False
    assert set(result["errors"]) == {"linux/interface/v0", "vpp/ipsec/x"}
    assert "68..65535" in result["errors"]["linux/interface/v0"]["fields"]["mtu"]
    good = json.dumps({"values": {"linux/interface/v1": {"type": "bridge"}}}).encode()
    assert json.loads(dispatch(api, "POST", "/configuration/validate",  # type: ignore[arg-type]
                               good).body) == {"valid": True, "errors": {}}
    bad = dispatch(api, "POST", "/configuration/validate", b"[1")  # type: ignore[arg-type]
    assert bad.status == 400 and "JSON" in json.loads(bad.body)["error"]


def test_models_reference_is_generated_from_the_models() -> None:
    from kvmesh.agent.models_doc import reference

    assert (ROOT / "docs" / "models.md").read_text() == reference(), (
        "docs/models.md is stale: python -m kvmesh.agent.models_doc > docs/models.md")
    assert "| `mtu` | integer (68..65535) or null |" in reference()


def test_readmes_model_key_table_is_generated_from_the_registries() -> None:
    """It listed only the first three VPP models (vpp/interface types 'loopback, tap,
    af_packet') long after the others landed."""
    from kvmesh.agent.models import MODELS
    from kvmesh.agent.models_doc import readme_table, with_readme_table

    readme = (ROOT / "README.md").read_text()
    assert with_readme_table(readme) == readme, (
        "README.md's model-key table is stale: python -m kvmesh.agent.models_doc --readme")
    assert all(f"| `{m.shape.replace('|', chr(92) + '|')}` |" in readme_table() for m in MODELS)

"""The state file core (pure): parsing, export round trip, and the desired-state diff."""

from __future__ import annotations

import pytest

from kvmesh.statefile import (
    FieldChange,
    State,
    StateFileError,
    diff_state,
    export_state,
    field_changes,
    parse_state,
)


@pytest.mark.parametrize(("text", "fragment"), [
    ("[1, 2]", "one key 'nodes'"),
    ("nodes: [a]", "map node names"),
    ("nodes: {'a/b': {}}", "invalid node name"),
    ("nodes: {n2: [x]}", "must map model keys"),
    ("nodes: {n2: {linux/interface/v0: 3}}", "must be a mapping"),
    ("nodes: {n2: {linux/interface/v0: {type: [}}", "not valid YAML"),
])
def test_bad_files_say_what_is_wrong(text: str, fragment: str) -> None:
    with pytest.raises(StateFileError, match=fragment):
        parse_state(text, "f.yaml")


def test_export_parses_back_in_both_formats() -> None:
    state: State = {"n3": {"vpp/bd/b1": {"bd_id": 1}},
                    "n2": {"linux/interface/v0": {"type": "tap"}}}
    for fmt in ("yaml", "json"):
        assert parse_state(export_state(state, fmt)) == state
    assert parse_state("nodes: {n2: }") == {"n2": {}}


def test_diff_adds_changes_and_removes_only_with_replace() -> None:
    current: State = {"n2": {"a": {"x": 1, "s": {"p": 1}}, "b": {"y": 1}, "c": {"z": 1}}}
    wanted: State = {"n2": {"a": {"x": 2, "s": {"p": 1, "q": 2}}, "b": {"y": 1}, "d": {"w": 1}},
              "n4": {}}
    diff = diff_state(current, wanted)
    assert diff["n2"].added == {"d": {"w": 1}} and not diff["n2"].removed
    assert diff["n2"].changed["a"][2] == [FieldChange("s.q", None, 2), FieldChange("x", 1, 2)]
    assert diff["n4"].empty
    replaced = diff_state(current, wanted, replace=True)["n2"]
    assert replaced.removed == {"c": {"z": 1}}
    assert replaced.writes() == {"d": {"w": 1}, "a": wanted["n2"]["a"], "c": None}
    assert replaced.previous() == {"d": None, "a": current["n2"]["a"], "c": {"z": 1}}
    assert current == {"n2": {"a": {"x": 1, "s": {"p": 1}}, "b": {"y": 1}, "c": {"z": 1}}}
    assert diff_state(current, {"n2": current["n2"]})["n2"].empty


def test_field_changes_compare_lists_whole() -> None:
    assert field_changes({"l": [1, 2]}, {"l": [2, 1]}) == [FieldChange("l", [1, 2], [2, 1])]
    assert field_changes(1, 2) == [FieldChange("(value)", 1, 2)]


def test_an_unchanged_state_of_the_new_route_kinds_plans_to_nothing() -> None:
    text = """
nodes:
  n2:
    linux/route/main/203.0.113.0/24/-: {type: blackhole}
    linux/route/100/0.0.0.0/0/-:
      nexthops: [{gateway: 10.0.0.2, dev: a0, weight: 2}, {gateway: 10.1.0.2, dev: b0}]
    linux/route/main/fd90::/64/a0: {gateway: "fd00:a::2", src: "fd00:7::7"}
"""
    state = parse_state(text, "router.yaml")
    from kvmesh.agent.models import invalid_values

    assert not invalid_values(state["n2"])
    assert parse_state(export_state(state, "yaml")) == state
    assert diff_state(state, parse_state(text))["n2"].empty

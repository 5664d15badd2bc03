"""`southbound.vpp.models.model_descriptor`: the descriptor wiring every VPP model shares,
from its normaliser: validate, the value comparator (with `agree`), dependencies over the
canonical value, the key selector."""

from __future__ import annotations

import re
from typing import Any

import pytest

from scheduler import Dependency, InvalidValueError
from southbound.vpp.models import interface_dependency, memoized, model_descriptor

KEY_RE = re.compile(r"vpp/thing/([^/]+)")


@memoized
def normalize_thing(key: str, value: Any) -> dict[str, Any]:
    if not isinstance(value.get("size", 0), int):
        raise InvalidValueError(f"{key}: size must be an integer", ["size"])
    return {"on": value.get("on", "lo1"), "size": value.get("size", 0),
            "label": value.get("label")}


def thing(**extra: Any) -> Any:
    return model_descriptor("thing", normalize_thing, KEY_RE,
                            depends_on=lambda v: (interface_dependency(v["on"]),), **extra)


def test_validate_and_key_selector() -> None:
    d = thing()
    assert d.name == "thing"
    assert d.key_selector("vpp/thing/a") and not d.key_selector("vpp/thing/a/b")
    assert d.validate is not None
    d.validate("vpp/thing/a", {"size": 1})
    with pytest.raises(InvalidValueError, match="size must be an integer"):
        d.validate("vpp/thing/a", {"size": "big"})


def test_comparator_compares_canonical_forms_or_what_agree_says() -> None:
    plain = thing().value_comparator
    assert plain is not None
    assert plain("vpp/thing/a", {}, {"on": "lo1", "size": 0})  # defaults filled in
    assert not plain("vpp/thing/a", {"label": "x"}, {"label": "y"})
    assert not plain("vpp/thing/a", {"size": "big"}, {"size": "huge"})  # invalid: as written
    loose = thing(agree=lambda x, y: x["size"] == y["size"]).value_comparator
    assert loose is not None and loose("vpp/thing/a", {"label": "x"}, {"label": "y"})


def test_dependencies_over_the_canonical_value_none_when_invalid() -> None:
    d = thing()
    assert d.dependencies is not None
    assert d.dependencies("vpp/thing/a", {"on": "eth0"}) == (
        Dependency(label="interface eth0", key="vpp/interface/eth0"),)
    assert d.dependencies("vpp/thing/a", {"size": "big"}) == ()
    assert model_descriptor("thing", normalize_thing, KEY_RE).dependencies is None


def test_the_rest_of_the_descriptor_passes_through_and_one_dependencies_only() -> None:
    def create(key: str, value: Any) -> None:
        return None

    d = thing(create=create, with_metadata=True, key_label=lambda key: key[10:])
    assert d.create is create and d.with_metadata and d.label_of("vpp/thing/a") == "a"
    with pytest.raises(TypeError, match="depends_on or dependencies"):
        thing(dependencies=lambda key, value: ())
    by_key = model_descriptor("thing", normalize_thing, lambda key: key.startswith("t/"),
                              dependencies=lambda key, value: ())
    assert by_key.key_selector("t/x") and by_key.dependencies is not None

"""The seam for configuration models: one module per model, registered once per plane.

A model module (e.g. ``southbound/linux/models/neighbor.py``) defines, in one place:

* its pydantic model (fields, types, ranges, defaults, documentation: the JSON Schema and
  ``docs/models.md`` are generated from it),
* its key shape and parser (``linux/neighbor/<dev>/<ip>``),
* ``check(model_key, value)``: validate a value against the key and return the canonical spec
  the descriptor works with (raises ``FieldsInvalidError``),
* ``descriptors(context)``: the scheduler descriptors that apply it, with their dependencies,
* optionally ``provides(model_key, value)``: the keys of what the value makes that another
  plane reports (a Linux-CP pair makes the Linux link ``linux/interface/host/<name>`` that the
  Linux southbound then finds): values of that plane that wait for those keys wait for this
  value, not for something missing (``kvmesh plan``, ``kvmesh apply --wait``),
* optionally ``conflicts(values)``: values that are each valid but that the plane would refuse
  together (two sub-interfaces with one VLAN on one parent), found in a node's whole desired
  state before anything is applied,

and exposes them as one ``MODEL = ModelSpec(...)``. Each plane lists its model modules once in a
``ModelRegistry`` (``southbound.linux.registry``, ``southbound.vpp.registry``); the plugin
registers ``registry.descriptors(context)`` on the scheduler, and the agent, the CLI's validation,
``kvmesh model schema``, ``docs/models.md`` and the state-file tooling read the same registries.
Adding a model is one new module, one registry line and its tests.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from pydantic import BaseModel

from scheduler import Descriptor

ContextT = TypeVar("ContextT")


@dataclass(frozen=True)
class ModelSpec(Generic[ContextT]):
    """One configurable model of one plane.

    ``descriptors`` is None for a model whose values another model's descriptors apply (a
    model may own several descriptors, e.g. derived values); ``internal_descriptors`` are
    registered with the model but have no northbound model of their own."""

    name: str  # "linux/neighbor"
    shape: str  # "linux/neighbor/<dev>/<ip>"
    pattern: re.Pattern[str]  # full match on a model key: is this value of this model?
    schema: type[BaseModel]
    check: Callable[[str, Any], object]  # (model key, value) -> canonical spec
    descriptors: Callable[[ContextT], Sequence[Descriptor]] | None = None
    examples: Sequence[tuple[str, Any]] = field(default_factory=tuple)  # (model key, value)
    # (a node's desired values: model key -> value) -> {model key: why it conflicts}
    conflicts: Callable[[Mapping[str, Any]], dict[str, str]] | None = None
    # (model key, value) -> the keys of what the value makes that another plane reports (an
    # invalid value provides nothing)
    provides: Callable[[str, Any], Sequence[str]] | None = None

    @property
    def description(self) -> str:
        """The model's documentation without its key shape, on one line."""
        text = " ".join((self.schema.__doc__ or "").split()).replace("``", "`")
        return text.split(": ", 1)[1] if text.startswith("`") and ": " in text else text

    def matches(self, model_key: str) -> bool:
        return self.pattern.fullmatch(model_key) is not None


class ModelRegistry(Generic[ContextT]):
    """The models of one plane, in registration order (which is also descriptor order)."""

    def __init__(self, plane: str, models: Sequence[ModelSpec[ContextT]]) -> None:
        names = [model.name for model in models]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"{plane}: models registered twice: {', '.join(duplicates)}")
        stray = [name for name in names if not name.startswith(f"{plane}/")]
        if stray:
            raise ValueError(f"{plane}: models outside the plane: {', '.join(stray)}")
        self.plane = plane
        self.models: tuple[ModelSpec[ContextT], ...] = tuple(models)

    def __iter__(self) -> Iterator[ModelSpec[ContextT]]:
        return iter(self.models)

    def model_for(self, model_key: str) -> ModelSpec[ContextT] | None:
        for model in self.models:
            if model.matches(model_key):
                return model
        return None

    def conflicts(self, values: Mapping[str, Any]) -> dict[str, str]:
        """Values of a node's desired state that the plane would refuse together."""
        found: dict[str, str] = {}
        for model in self.models:
            if model.conflicts is not None:
                mine = {k: v for k, v in values.items() if model.matches(k)}
                if mine:
                    found.update(model.conflicts(mine))
        return found

    def provided(self, values: Mapping[str, Any]) -> dict[str, str]:
        """What values of a node's desired state make for another plane: provided key -> the
        model key of the value that makes it (``ModelSpec.provides``)."""
        found: dict[str, str] = {}
        for model_key, value in values.items():
            model = self.model_for(model_key)
            if model is not None and model.provides is not None:
                found.update(dict.fromkeys(model.provides(model_key, value), model_key))
        return found

    def descriptors(self, context: ContextT) -> list[Descriptor]:
        """Every descriptor of every model, in registration order."""
        result: list[Descriptor] = []
        for model in self.models:
            if model.descriptors is not None:
                result.extend(model.descriptors(context))
        return result

"""The configurable models of every plane: name, key shape, pydantic model, validator.

Each southbound lists its models once (``southbound.linux.registry``,
``southbound.vpp.registry``; one module per model, see ``southbound.modelspec``) and validates
through them; this module finds the model for a model key, so the CLI refuses a bad value on the
operator's terminal (instead of it turning INVALID on a remote node later), the agent's REST API
validates and publishes the JSON Schema, and ``kvmesh model`` lists them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from southbound.linux.registry import REGISTRY as LINUX_MODELS
from southbound.modelspec import ModelSpec
from southbound.validation import FieldsInvalidError
from southbound.vpp.registry import REGISTRY as VPP_MODELS


class ModelError(ValueError):
    """The model key is unknown or the value does not validate. ``problems`` maps each bad
    field to what is wrong (empty for an unknown model key)."""

    def __init__(self, message: str, problems: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.problems = dict(problems or {})


Model = ModelSpec[Any]
MODELS: tuple[Model, ...] = (*LINUX_MODELS, *VPP_MODELS)
REGISTRIES = (LINUX_MODELS, VPP_MODELS)
BY_NAME = {model.name: model for model in MODELS}


def model_for(model_key: str) -> Model:
    for model in MODELS:
        if model.pattern.fullmatch(model_key):
            return model
    shapes = ", ".join(model.shape for model in MODELS)
    raise ModelError(f"unknown model key {model_key!r}; configurable models: {shapes}",
                     {"(key)": "unknown model"})


def validate_model(model_key: str, value: Any) -> None:
    """Raise ModelError with a field-level message unless `value` is valid for `model_key`."""
    model = model_for(model_key)
    try:
        model.check(model_key, value)
    except FieldsInvalidError as exc:
        raise ModelError(str(exc), exc.problems) from exc


def invalid_values(values: Mapping[str, Any]) -> dict[str, ModelError]:
    """Every model key of `values` (one node's desired state) whose value does not validate,
    or that conflicts with another value of it as the plane would refuse, with its error."""
    errors: dict[str, ModelError] = {}
    for model_key, value in values.items():
        try:
            validate_model(model_key, value)
        except ModelError as exc:
            errors[model_key] = exc
    for registry in REGISTRIES:
        for model_key, why in registry.conflicts(values).items():
            errors.setdefault(model_key, ModelError(f"{model_key}: {why}", {"(value)": why}))
    return errors


def provided_by(values: Mapping[str, Any]) -> dict[str, str]:
    """What values of a node's desired state make that another plane reports: made key -> the
    model key of the value that makes it (``ModelSpec.provides``; ``kvmesh.provided``)."""
    found: dict[str, str] = {}
    for registry in REGISTRIES:
        found.update(registry.provided(values))
    return found


def json_schema(name: str | None = None) -> dict[str, Any]:
    """The JSON Schema of one model (by name), or of all: ``{"models": {name: schema}}``."""
    if name is not None:
        model = BY_NAME.get(name)
        if model is None:
            raise ModelError(f"unknown model {name!r}; models: {', '.join(BY_NAME)}")
        return _schema_of(model)
    return {"models": {model.name: _schema_of(model) for model in MODELS}}


def _schema_of(model: Model) -> dict[str, Any]:
    schema = model.schema.model_json_schema()
    schema["x-kvmesh-key"] = model.shape
    return schema

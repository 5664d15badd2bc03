"""Validating model values with pydantic, reported field by field.

Every configuration model (``southbound.linux.models``, ``southbound.vpp.models``) is a pydantic
model: field types, ranges, defaults and documentation live there once, and the JSON Schema is
generated from them. This module turns pydantic's errors into kvmesh's wording — one message per
field, all fields at once::

    linux/interface/veth0: field 'mtu': must be an integer 68..65535, got 1

Conventions shared by the models:

* ``extra="forbid"`` and ``strict=True`` (no "1500" for 1500, no ``true`` for 1);
* ``null`` means "absent" (the field's default applies): ``NullMeansAbsent`` drops null fields;
* checks that involve several fields or the key raise ``FieldProblems`` from a validator, naming
  the fields; the key's own problems are reported under ``(key)``, a non-object under ``(value)``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar, Union, get_args, get_origin

import annotated_types
from pydantic import BaseModel, ConfigDict, ValidationError, model_validator
from pydantic.fields import FieldInfo

import scheduler

KEY_FIELD = "(key)"
VALUE_FIELD = "(value)"

M = TypeVar("M", bound="StrictModel")


class FieldsInvalidError(scheduler.InvalidValueError, ValueError):
    """A value that breaks its model: ``problems`` maps each bad field to what is wrong; the
    scheduler's ``fields`` (shown as the INVALID status details) names them."""

    def __init__(self, key: str, problems: Mapping[str, str]) -> None:
        self.key = key
        self.problems = dict(problems)
        detail = "; ".join(f"field '{name}': {text}" for name, text in self.problems.items())
        scheduler.InvalidValueError.__init__(self, f"{key}: {detail}", tuple(self.problems))


class FieldProblems(ValueError):
    """Raised by a model validator to put problems on named fields (relative to the model)."""

    def __init__(self, problems: Mapping[str, str]) -> None:
        super().__init__("; ".join(f"{f}: {p}" for f, p in problems.items()))
        self.problems = dict(problems)


class StrictModel(BaseModel):
    """Base of every model and section: strict types, unknown fields refused, null = absent.

    ``defer_build``: a model's validator is built when it first validates a value, not when its
    module is imported; an agent pays (in memory: ~3.5 MiB for the Linux models) only for the
    models it is given values of, and the CLI only for the model it checks."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, defer_build=True)

    @classmethod
    def section_problems(cls, value: Mapping[str, Any]) -> dict[str, str]:
        """Problems between fields worth reporting even when some field is bad (the after
        validators, which also check them, run only on otherwise valid values)."""
        return {}

    @model_validator(mode="before")
    @classmethod
    def _null_means_absent(cls, data: Any) -> Any:
        if isinstance(data, dict) and None in data.values():
            return {name: value for name, value in data.items() if value is not None}
        return data


ErrorFactory = Callable[[str, dict[str, str]], Exception]


def validate(model: type[M], key: str, value: object, *,
             key_problems: Mapping[str, str] | None = None,
             context: Mapping[str, Any] | None = None,
             error: ErrorFactory = FieldsInvalidError) -> M:
    """``value`` validated as ``model``; raises ``error(key, problems)`` naming every bad field
    (``key_problems``, found by the caller in the key, come first)."""
    problems: dict[str, str] = dict(key_problems or {})
    if not isinstance(value, Mapping):
        problems.setdefault(VALUE_FIELD, f"must be a JSON object (got {type(value).__name__})")
        raise error(key, problems)
    try:
        result = model.model_validate(value, context=dict(context or {}))
    except ValidationError as exc:
        found = {**field_problems(model, exc), **model.section_problems(value)}
        problems.update((field, text) for field, text in found.items() if field not in problems)
        raise error(key, problems) from None
    if problems:
        raise error(key, problems)
    return result


def field_problems(model: type[BaseModel], exc: ValidationError) -> dict[str, str]:
    """pydantic's errors as ``{field path: problem}``: unknown fields first, then model order."""
    unknown: dict[str, str] = {}
    other: dict[str, str] = {}
    for error in exc.errors():
        loc = tuple(error["loc"])
        ctx = error.get("ctx") or {}
        cause = ctx.get("error")
        if isinstance(cause, FieldProblems):
            for field, text in cause.problems.items():
                other.setdefault(_join(_path(loc), field), text)
            continue
        target = unknown if error["type"] == "extra_forbidden" else other
        target.setdefault(_path(loc) or VALUE_FIELD, _message(model, loc, error))
    return {**unknown, **other}


def _path(loc: tuple[Any, ...]) -> str:
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text


def _join(base: str, field: str) -> str:
    if not base or not field:
        return base or field
    return base + field if field.startswith("[") else f"{base}.{field}"


def _message(model: type[BaseModel], loc: tuple[Any, ...], error: Any) -> str:
    kind = error["type"]
    got = f", got {error['input']!r}"
    ctx = error.get("ctx") or {}
    if kind == "missing":
        return "is required"
    if kind == "extra_forbidden":
        parent = _model_at(model, loc[:-1])
        allowed = ", ".join(sorted(parent.model_fields)) if parent is not None else ""
        return f"unknown field (allowed: {allowed or 'none'})"
    if kind.startswith("int_") or kind in ("greater_than_equal", "less_than_equal"):
        low, high = _bounds(_field_at(model, loc))
        return f"must be an integer {low}..{high}{got}" if low is not None else \
            f"must be an integer{got}"
    if kind.startswith("bool_"):
        return f"must be true or false{got}"
    if kind == "literal_error":
        return f"must be one of {str(ctx.get('expected', '')).replace(' or ', ', ')}{got}"
    if kind.startswith("string_"):
        if isinstance(error["input"], int) and not isinstance(error["input"], bool):
            # What a YAML file gives for an unquoted MAC (YAML 1.1 reads 12:34:56:00:01:02 as
            # a base-60 integer) or an unquoted number meant as text.
            return (f"must be a string{got} (quote it in YAML: unquoted, 12:34:56:00:01:02 "
                    f"reads as a number)")
        return f"must be a string{got}"
    if kind.startswith("list_"):
        return f"must be a list{got}"
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        return f"must be a JSON object{got}"
    if kind == "value_error" and "error" in ctx:
        return str(ctx["error"])
    return str(error["msg"])


def _bounds(info: FieldInfo | None) -> tuple[int | None, int | None]:
    low = high = None
    for item in info.metadata if info is not None else ():
        if isinstance(item, annotated_types.Ge):
            low = item.ge
        elif isinstance(item, annotated_types.Le):
            high = item.le
    return low, high  # type: ignore[return-value]


def _submodel(annotation: Any) -> type[BaseModel] | None:
    """The model inside ``X | None``, ``list[X]``, ``Annotated[...]`` (or None)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if get_origin(annotation) in (Union, list) or get_args(annotation):
        for arg in get_args(annotation):
            found = _submodel(arg)
            if found is not None:
                return found
    return None


def _walk(model: type[BaseModel], loc: tuple[Any, ...]) -> tuple[type[BaseModel] | None,
                                                                  FieldInfo | None]:
    current: type[BaseModel] | None = model
    info: FieldInfo | None = None
    for part in loc:
        if isinstance(part, int):
            continue
        if current is None:
            return None, None
        info = current.model_fields.get(part)
        if info is None:
            return None, None
        current = _submodel(info.annotation)
    return current, info


def _model_at(model: type[BaseModel], loc: tuple[Any, ...]) -> type[BaseModel] | None:
    return _walk(model, loc)[0]


def _field_at(model: type[BaseModel], loc: tuple[Any, ...]) -> FieldInfo | None:
    return _walk(model, loc)[1]

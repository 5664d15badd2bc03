"""Turn scheduler/agent objects into JSON-compatible data for the REST API and the CLI."""

from __future__ import annotations

import base64
import dataclasses
import enum
from collections.abc import Mapping
from typing import Any


def to_jsonable(obj: Any) -> Any:
    """Recursively convert dataclasses, enums, sets, bytes and mappings to JSON data."""
    if obj is None or isinstance(obj, bool | int | float | str):
        return obj
    if isinstance(obj, enum.Enum):
        return obj.name
    if isinstance(obj, bytes):
        try:
            return obj.decode("utf-8")
        except UnicodeDecodeError:
            return {"b64": base64.b64encode(obj).decode("ascii")}
    if isinstance(obj, BaseException):
        return f"{type(obj).__name__}: {obj}"
    # An object's own serialisation wins over generic field walking.
    for method in ("as_dict", "to_dict"):
        fn = getattr(obj, method, None)
        if callable(fn):
            return to_jsonable(fn())
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, tuple) and hasattr(obj, "_asdict"):  # NamedTuple: keep field names
        return {k: to_jsonable(v) for k, v in obj._asdict().items()}
    if isinstance(obj, Mapping):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple | set | frozenset):
        items = [to_jsonable(v) for v in obj]
        return sorted(items, key=repr) if isinstance(obj, set | frozenset) else items
    if hasattr(obj, "__slots__"):
        return {name: to_jsonable(getattr(obj, name, None)) for name in _slot_names(obj)}
    if hasattr(obj, "__dict__"):
        return {k: to_jsonable(v) for k, v in vars(obj).items() if not k.startswith("_")}
    return repr(obj)


def _slot_names(obj: Any) -> list[str]:
    names: list[str] = []
    for cls in type(obj).__mro__:
        slots = getattr(cls, "__slots__", ())
        names.extend([slots] if isinstance(slots, str) else slots)
    return [n for n in names if not n.startswith("_")]

"""Validation of desired values before they enter the mesh (used by `kvmesh config set`).

Each southbound owns its models and their field-level validation; this module only finds the
validator for a model key, so a bad value is refused on the operator's terminal instead of
turning INVALID on a remote node later.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any


class ModelError(ValueError):
    """The model key is unknown or the value does not validate."""


def _linux_interface(key: str, value: Any) -> None:
    from southbound.linux.interface_model import parse_interface

    parse_interface(key, value)


def _linux_route(key: str, value: Any) -> None:
    from southbound.linux.route_model import parse_route

    parse_route(key, value)


def _vpp_interface(key: str, value: Any) -> None:
    from southbound.vpp.models import normalize_interface

    normalize_interface(key, value)


def _vpp_bd(key: str, value: Any) -> None:
    from southbound.vpp.models import normalize_bd

    normalize_bd(key, value)


def _vpp_route(key: str, value: Any) -> None:
    from southbound.vpp.models import normalize_route

    normalize_route(key, value)


MODELS: tuple[tuple[str, re.Pattern[str], Callable[[str, Any], None]], ...] = (
    ("linux/interface/<name>", re.compile(r"linux/interface/(?!host/)[^/]+"), _linux_interface),
    ("linux/route/<table>/<dst cidr>/<dev>", re.compile(r"linux/route/.+"), _linux_route),
    ("vpp/interface/<name>", re.compile(r"vpp/interface/[^/]+"), _vpp_interface),
    ("vpp/bd/<name>", re.compile(r"vpp/bd/[^/]+"), _vpp_bd),
    ("vpp/route/<vrf>/<dst cidr>/<next hop>", re.compile(r"vpp/route/.+"), _vpp_route),
)


def validate_model(model_key: str, value: Any) -> None:
    """Raise ModelError with a field-level message unless `value` is valid for `model_key`."""
    for _shape, pattern, validate in MODELS:
        if pattern.fullmatch(model_key):
            try:
                validate(model_key, value)
            except Exception as exc:  # each southbound has its own error types
                raise ModelError(str(exc)) from exc
            return
    shapes = ", ".join(shape for shape, _p, _v in MODELS)
    raise ModelError(f"unknown model key {model_key!r}; configurable models: {shapes}")

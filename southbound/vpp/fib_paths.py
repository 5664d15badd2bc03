"""The forwarding paths of the models that forward on paths of their own (L3XC, ABF), in the
models' form: fib_types.api's `fib_path` of type normal."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, Field, model_validator

from southbound.validation import FieldProblems, StrictModel
from southbound.vpp.models import MAX_VRF, VppName, _ip

MAX_PATHS = 255  # n_paths is a u8


class FibPathSpec(StrictModel):
    """Where traffic goes: a next hop, an interface, or both; a next hop without an interface
    is resolved in `table`."""

    next_hop: Annotated[str, AfterValidator(_ip)] | None = Field(
        None, description="the next hop")
    interface: VppName | None = Field(None, description="the vpp/interface to send out of")
    table: int = Field(0, ge=0, le=MAX_VRF,
                       description="where a next hop without interface is resolved")
    weight: int = Field(1, ge=1, le=255, description="share of the traffic (ECMP weight)")
    preference: int = Field(0, ge=0, le=255, description="lower is preferred")

    @model_validator(mode="after")
    def _where(self) -> FibPathSpec:
        if self.next_hop is None and self.interface is None:
            raise FieldProblems({"": "give a next_hop, an interface or both"})
        if self.interface is not None and self.table:
            raise FieldProblems({"table": "only for a path without interface"})
        return self


def place(path: FibPathSpec | dict[str, Any]) -> tuple[str, str, int]:
    """What VPP calls a path (fib_path_cmp): where it goes, not its weight or preference."""
    p = path if isinstance(path, dict) else path.model_dump()
    return (p["next_hop"] or "", p["interface"] or "", p["table"])


def distinct_paths(paths: list[Any]) -> list[Any]:
    """Paths in canonical order; one listed twice (the same place) is an error."""
    seen: set[tuple[str, str, int]] = set()
    for position, path in enumerate(paths):
        if place(path) in seen:
            raise FieldProblems({f"[{position}]": "the same path is listed twice"})
        seen.add(place(path))
    return sorted(paths, key=place)

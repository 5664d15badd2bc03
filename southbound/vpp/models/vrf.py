"""`vpp/vrf/<ipv4|ipv6>/<id>`: a VRF (FIB) table, `ip_table_add_del`, read back by `ip_table_dump`.

Interfaces with `"vrf": N` and routes in VRF N depend on their family's table
(`vrf_dependencies`); table 0 is VPP's own: it always exists, so nothing depends on it, and
Retrieve reports it as OBTAINED (never deleted). Tables kvmesh did not create are reported with an
unknown origin, so the scheduler keeps them OBTAINED unless NB configured them. VPP never renames
an existing table, so a new `name` re-creates the table (its interfaces and routes are re-pended
and restored around it).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any, Literal

from pydantic import Field, ValidationInfo, model_validator

from scheduler import Dependency, Descriptor, ValueOrigin
from southbound.modelspec import ModelSpec
from southbound.validation import KEY_FIELD, FieldProblems, StrictModel, validate
from southbound.vpp import keys
from southbound.vpp.context import VRF_DESCRIPTOR, Context
from southbound.vpp.models import MAX_VRF, canonical_comparator, memoized, model_descriptor

TABLE_NAME_MAX = 63  # string[64]


class VppVrf(StrictModel):
    """`vpp/vrf/<ipv4|ipv6>/<id>`: a VRF (FIB) table. `id` and `protocol` may be left out (they
    are taken from the key); if given they must match it. `name` unset: VPP's (`ipv4-VRF:<id>`)."""

    id: int | None = Field(None, ge=0, le=MAX_VRF, description="table id (as in the key)")
    protocol: Literal["ipv4", "ipv6"] | None = Field(None, description="as in the key")
    name: str | None = Field(None, max_length=TABLE_NAME_MAX, description="table name")

    @model_validator(mode="after")
    def _agrees_with_key(self, info: ValidationInfo) -> VppVrf:
        context = info.context or {}
        problems = {}
        if self.id is not None and context.get("id") is not None and self.id != context["id"]:
            problems["id"] = f"{self.id} does not match the key's {context['id']}"
        if self.protocol is not None and self.protocol != context.get("protocol"):
            problems["protocol"] = f"{self.protocol} does not match the key's " \
                                   f"{context.get('protocol')!r}"
        if problems:
            raise FieldProblems(problems)
        return self


@memoized
def normalize_vrf(key: str, value: Any) -> dict[str, Any]:
    """The canonical table value: {"id", "protocol", "name"} (name None: VPP's)."""
    parsed = keys.parse_vrf_key(key)
    problems: dict[str, str] = {}
    protocol, table_id = (parsed if parsed is not None else ("", ""))
    key_id = int(table_id) if table_id.isdigit() and int(table_id) <= MAX_VRF else None
    if parsed is None:
        problems[KEY_FIELD] = "malformed key (vpp/vrf/<ipv4|ipv6>/<id>)"
    elif protocol not in keys.VRF_PROTOCOLS:
        problems[KEY_FIELD] = f"protocol {protocol!r} is not ipv4 or ipv6"
    elif key_id is None:
        problems[KEY_FIELD] = f"table id {table_id!r} is not an integer 0..{MAX_VRF}"
    model = validate(VppVrf, key, value, key_problems=problems,
                     context={"id": key_id, "protocol": protocol})
    return {"id": key_id, "protocol": protocol, "name": model.name or None}


def vrf_dependencies(vrf: int, families: Iterable[bool]) -> Sequence[Dependency]:
    """What a value in VRF `vrf` needs for each family (is_ip6): its table, unless it is 0."""
    if vrf == 0:
        return ()
    return tuple(
        Dependency(label=f"VRF table {keys.vrf_protocol(is_ip6)}/{vrf}",
                   key=keys.vrf_key(keys.vrf_protocol(is_ip6), vrf))
        for is_ip6 in families
    )


def names_agree(x: dict[str, Any], y: dict[str, Any]) -> bool:
    """A name left unset matches whatever name VPP gave the table."""
    return x["name"] is None or y["name"] is None or x["name"] == y["name"]


same_table = canonical_comparator(normalize_vrf, names_agree)


class VrfDescriptor:
    def __init__(self, ctx: Context) -> None:
        self.api = ctx.api

    def descriptor(self) -> Descriptor:
        return model_descriptor(
            VRF_DESCRIPTOR, normalize_vrf, lambda key: keys.parse_vrf_key(key) is not None,
            agree=names_agree,
            create=self.create,
            delete=self.delete,
            update_with_recreate=self.renamed,
            retrieve=self.retrieve,
        )

    def _apply(self, key: str, value: Any, is_add: bool) -> None:
        v = normalize_vrf(key, value)
        if v["id"] != 0:  # VPP's own table: never added or deleted through the API
            self.api.table_add_del(v["id"], v["protocol"] == "ipv6", v["name"] or "", is_add)

    def create(self, key: str, value: Any) -> None:
        self._apply(key, value, True)

    def delete(self, key: str, value: Any, metadata: Any) -> None:
        # Deleting a table that is not there is accepted by VPP.
        self._apply(key, value, False)

    def renamed(self, key: str, old: Any, new: Any, metadata: Any) -> bool:
        return not same_table(key, old, new)

    def retrieve(self, correlate: list[tuple[str, Any, Any]]) -> list[tuple[str, Any, Any, Any]]:
        result = []
        for table_id, is_ip6, name in self.api.named_tables():
            protocol = keys.vrf_protocol(is_ip6)
            value = {"id": table_id, "protocol": protocol, "name": name}
            origin = ValueOrigin.FROM_SB if table_id == 0 else ValueOrigin.UNKNOWN
            result.append((keys.vrf_key(protocol, table_id), value, None, origin))
        return result


def descriptors(ctx: Context) -> list[Descriptor]:
    return [VrfDescriptor(ctx).descriptor()]


MODEL: ModelSpec[Context] = ModelSpec(
    "vpp/vrf", "vpp/vrf/<ipv4|ipv6>/<id>", re.compile(r"vpp/vrf/[^/]+/[^/]+"),
    VppVrf, normalize_vrf, descriptors,
    examples=(("vpp/vrf/ipv4/10", {"id": 10, "protocol": "ipv4", "name": "red"}),),
)

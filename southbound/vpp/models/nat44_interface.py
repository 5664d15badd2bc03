"""`vpp/nat44/interface/<name>`: the NAT44 roles of a VPP interface.

    {"inside": true, "outside": false}

`nat44_interface_add_del_feature` once per role; an update adds the new roles before it removes
the old ones (VPP drops the whole interface when its only role is removed). Depends on the
interface and on NAT44 being enabled. Read back by `nat44_interface_dump`; interfaces kvmesh does
not own are not reported.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from pydantic import Field, model_validator

from scheduler import Dependency, Descriptor, ValueOrigin
from southbound.modelspec import ModelSpec
from southbound.validation import KEY_FIELD, FieldProblems, StrictModel, validate
from southbound.vpp.context import INTERFACE_DESCRIPTOR, Context
from southbound.vpp.errors import (
    INVALID_SW_IF_INDEX,
    NO_SUCH_ENTRY,
    MissingInterfaceError,
    VppApiError,
)
from southbound.vpp.models import interface_dependency, memoized, model_descriptor, name_problem
from southbound.vpp.nat44_api import ENABLED, Nat44Api

PREFIX = "vpp/nat44/interface/"
DESCRIPTOR = "vpp-nat44-interface"
ROLES = ("inside", "outside")


class VppNat44Interface(StrictModel):
    """`vpp/nat44/interface/<name>`: NAT44 on a VPP interface, inside and/or outside."""

    inside: bool = Field(False, description="traffic from this side is translated")
    outside: bool = Field(False, description="the translated side")

    @model_validator(mode="after")
    def _some_role(self) -> VppNat44Interface:
        if not (self.inside or self.outside):
            raise FieldProblems({"": "at least one of inside, outside must be true"})
        return self


def interface_of(key: str) -> str | None:
    if not key.startswith(PREFIX) or key.count("/") != 3:
        return None
    return key[len(PREFIX):] or None


@memoized
def check_interface(key: str, value: Any) -> dict[str, Any]:
    name = interface_of(key)
    problem = name_problem(name, "interface name") if name is not None else "malformed key"
    model = validate(VppNat44Interface, key, value,
                     key_problems={KEY_FIELD: problem} if problem else {})
    return model.model_dump()


def descriptors(ctx: Context) -> list[Descriptor]:
    api = Nat44Api(ctx.api.conn)

    def apply(key: str, roles: Sequence[str], is_add: bool) -> None:
        name = str(interface_of(key))
        try:
            sw_if_index = ctx.sw_if_index(name)
            for role in roles:
                api.interface_role(sw_if_index, role == "inside", is_add)
        except MissingInterfaceError:
            if is_add:
                raise
        except VppApiError as exc:
            if is_add or exc.retval not in (NO_SUCH_ENTRY, INVALID_SW_IF_INDEX):
                raise

    def create(key: str, value: Any) -> None:
        v = check_interface(key, value)
        apply(key, [role for role in ROLES if v[role]], True)

    def delete(key: str, value: Any, metadata: Any) -> None:
        v = check_interface(key, value)
        apply(key, [role for role in ROLES if v[role]], False)

    def update(key: str, old: Any, new: Any, metadata: Any) -> None:
        o, n = check_interface(key, old), check_interface(key, new)
        apply(key, [role for role in ROLES if n[role] and not o[role]], True)
        apply(key, [role for role in ROLES if o[role] and not n[role]], False)

    def dependencies(key: str, value: Any) -> Sequence[Dependency]:
        name = str(interface_of(key))
        return (ENABLED, interface_dependency(name))


    def retrieve(correlate: list[tuple[str, Any, Any]]) -> list[tuple[str, Any, Any, Any]]:
        names = ctx.names_by_index  # refreshed: interfaces are retrieved first
        return [(f"{PREFIX}{names[idx]}", {"inside": inside, "outside": outside}, None,
                 ValueOrigin.FROM_NB)
                for idx, (inside, outside) in api.interfaces().items() if idx in names]

    return [model_descriptor(
        DESCRIPTOR, check_interface, lambda key: interface_of(key) is not None,
        create=create,
        update=update,
        delete=delete,
        dependencies=dependencies,  # of the key alone
        retrieve=retrieve,
        retrieve_dependencies=(INTERFACE_DESCRIPTOR,),
    )]


MODEL: ModelSpec[Context] = ModelSpec(
    "vpp/nat44/interface", "vpp/nat44/interface/<name>",
    re.compile(r"vpp/nat44/interface/[^/]+"), VppNat44Interface, check_interface, descriptors,
    examples=(("vpp/nat44/interface/uplink", {"outside": True}),),
)

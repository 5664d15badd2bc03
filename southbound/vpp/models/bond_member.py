"""`vpp/bond/<bond>/member/<interface>`: an interface made a member of a bond,
`bond_add_member` / `bond_detach_member`, read back by `sw_member_interface_dump`.

Depends on the bond (a `vpp/interface/<bond>` of type bond) and on the member interface. VPP
refuses an interface that is a member already (`VALUE_EXIST`), a bond as a member and a bond
that is none (`INVALID_INTERFACE`): such values fail with VPP's error. A changed `passive` or
`long_timeout` detaches and adds the member again. Deleting the bond detaches its members in
VPP; the scheduler removes them first anyway, and a member already detached counts as removed.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import Field

from scheduler import Dependency, Descriptor, ValueOrigin
from southbound.modelspec import ModelSpec
from southbound.validation import KEY_FIELD, StrictModel, validate
from southbound.vpp import keys
from southbound.vpp.context import INTERFACE_DESCRIPTOR, Context
from southbound.vpp.errors import (
    INVALID_INTERFACE,
    INVALID_SW_IF_INDEX,
    MissingInterfaceError,
    VppApiError,
)
from southbound.vpp.models import (
    interface_dependency,
    memoized,
    model_descriptor,
    name_problem,
)

DESCRIPTOR = "vpp-bond-member"
KEY_RE = re.compile(r"vpp/bond/([^/]+)/member/([^/]+)")


def member_key(bond: str, interface: str) -> str:
    return f"vpp/bond/{bond}/member/{interface}"


def parse_key(key: str) -> tuple[str, str] | None:
    match = KEY_RE.fullmatch(key)
    return (match.group(1), match.group(2)) if match else None


class VppBondMember(StrictModel):
    """`vpp/bond/<bond>/member/<interface>`: the interface is a member of the bond."""

    passive: bool = Field(False, description="LACP: wait for the partner to speak first")
    long_timeout: bool = Field(False, description="LACP: the slow (30 s) rate of LACP frames")


@memoized
def normalize_member(key: str, value: Any) -> dict[str, Any]:
    parts = parse_key(key)
    problems: dict[str, str] = {}
    if parts is None:
        problems[KEY_FIELD] = "malformed key (vpp/bond/<bond>/member/<interface>)"
    else:
        for what, name in (("bond", parts[0]), ("interface", parts[1])):
            problem = name_problem(name, f"{what} name")
            if problem:
                problems[KEY_FIELD] = problem
        if parts[0] == parts[1]:
            problems[KEY_FIELD] = "a bond cannot be its own member"
    model = validate(VppBondMember, key, value, key_problems=problems)
    assert parts is not None  # validate raised otherwise
    return {"bond": parts[0], "interface": parts[1], **model.model_dump()}


class BondMemberDescriptor:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.api = ctx.api

    def descriptor(self) -> Descriptor:
        return model_descriptor(
            DESCRIPTOR, normalize_member, KEY_RE,
            depends_on=lambda v: (
                Dependency(label=f"bond {v['bond']}", key=keys.interface_key(v["bond"])),
                interface_dependency(v["interface"])),
            create=self.create,
            update=self.update,
            delete=self.delete,
            retrieve=self.retrieve,
            retrieve_dependencies=(INTERFACE_DESCRIPTOR,),
        )

    def create(self, key: str, value: Any) -> None:
        v = normalize_member(key, value)
        self.api.bond_add_member(self.ctx.sw_if_index(v["interface"]),
                                 self.ctx.sw_if_index(v["bond"]), v["passive"],
                                 v["long_timeout"])

    def update(self, key: str, old: Any, new: Any, metadata: Any) -> None:
        self.delete(key, old, metadata)
        self.create(key, new)

    def delete(self, key: str, value: Any, metadata: Any) -> None:
        v = normalize_member(key, value)
        try:
            self.api.bond_detach_member(self.ctx.sw_if_index(v["interface"]))
        except MissingInterfaceError:
            return
        except VppApiError as exc:
            # Already detached (its bond deleted) or the interface gone: removed.
            if exc.retval not in (INVALID_INTERFACE, INVALID_SW_IF_INDEX):
                raise

    def retrieve(self, correlate: list[tuple[str, Any, Any]]) -> list[tuple[str, Any, Any, Any]]:
        # Interfaces are retrieved first (retrieve_dependencies): their names are current.
        names = self.ctx.names_by_index
        result = []
        for name, meta in self.ctx.interfaces.items():
            if meta.type != "bond":
                continue
            for member_index, member in self.api.bond_members(meta.sw_if_index).items():
                interface = names.get(member_index)
                if interface is None:
                    continue  # an interface kvmesh does not own: no value of ours
                value = {"passive": member.passive, "long_timeout": member.long_timeout}
                result.append((member_key(name, interface), value, None, ValueOrigin.UNKNOWN))
        return result


def descriptors(ctx: Context) -> list[Descriptor]:
    return [BondMemberDescriptor(ctx).descriptor()]


MODEL: ModelSpec[Context] = ModelSpec(
    "vpp/bond", "vpp/bond/<bond>/member/<interface>", KEY_RE, VppBondMember, normalize_member,
    descriptors,
    examples=(("vpp/bond/bond0/member/uplink1", {}),
              ("vpp/bond/bond0/member/uplink2", {"passive": True})),
)

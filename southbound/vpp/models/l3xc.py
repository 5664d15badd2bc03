"""`vpp/l3xc/<interface>/<ipv4|ipv6>`: an L3 cross-connect: all IPv4 (or IPv6) traffic arriving
on the interface is sent to the given paths, without a FIB lookup.

    {"paths": [{"next_hop": "10.0.0.2", "interface": "uplink", "weight": 1, "preference": 0}]}

`l3xc_update` (it creates the cross-connect or replaces its paths in place, so any change is an
update), `l3xc_del`, read back by `l3xc_dump` (VPP leaves its `is_ip6` unset: the family is the
paths'). A path goes through an interface (to its next hop, or attached without one) or, without
an interface, to a next hop resolved in table `table`. Depends on the input interface, on each
path's interface and on the table of a path without one. Cross-connects on interfaces kvmesh does
not own are not reported.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from typing import Annotated, Any

from pydantic import AfterValidator, Field, ValidationInfo, model_validator

from scheduler import Dependency, Descriptor, InvalidValueError, ValueOrigin
from southbound.modelspec import ModelSpec
from southbound.validation import KEY_FIELD, FieldProblems, StrictModel, validate
from southbound.vpp.binapi import ANY_INDEX, PATH_NORMAL
from southbound.vpp.context import INTERFACE_DESCRIPTOR, Context
from southbound.vpp.errors import (
    INVALID_SW_IF_INDEX,
    INVALID_VALUE,
    MissingInterfaceError,
    VppApiError,
)
from southbound.vpp.fib_paths import MAX_PATHS, FibPathSpec, distinct_paths, place
from southbound.vpp.l3_api import L3Api
from southbound.vpp.models import interface_dependency, memoized, model_descriptor, name_problem
from southbound.vpp.models.vrf import vrf_dependencies

PREFIX = "vpp/l3xc/"
DESCRIPTOR = "vpp-l3xc"
FAMILIES = ("ipv4", "ipv6")


class VppL3xc(StrictModel):
    """`vpp/l3xc/<interface>/<ipv4|ipv6>`: an L3 cross-connect of all traffic of one family
    arriving on the interface to `paths` (no FIB lookup)."""

    paths: Annotated[list[FibPathSpec], AfterValidator(distinct_paths)] = Field(
        min_length=1, max_length=MAX_PATHS, description="where the traffic goes")

    @model_validator(mode="after")
    def _family(self, info: ValidationInfo) -> VppL3xc:
        context = info.context or {}
        is_ip6 = context.get("family") == "ipv6"
        problems = {}
        for position, path in enumerate(self.paths):
            if path.next_hop is not None and (":" in path.next_hop) != is_ip6:
                problems[f"paths[{position}].next_hop"] = \
                    f"not {context.get('family')} (the key's family)"
            if path.interface is not None and path.interface == context.get("interface"):
                problems[f"paths[{position}].interface"] = "the input interface itself"
        if problems:
            raise FieldProblems(problems)
        return self


def parse_key(key: str) -> tuple[str, str] | None:
    if not key.startswith(PREFIX):
        return None
    parts = key[len(PREFIX):].split("/")
    return (parts[0], parts[1]) if len(parts) == 2 and all(parts) else None


def l3xc_key(interface: str, is_ip6: bool) -> str:
    return f"{PREFIX}{interface}/{FAMILIES[is_ip6]}"


@memoized
def check_l3xc(key: str, value: Any) -> dict[str, Any]:
    """The canonical value: {"interface", "family", "paths": [...]} (paths sorted)."""
    parsed = parse_key(key)
    interface, family = parsed if parsed is not None else ("", "")
    problem = "malformed key (vpp/l3xc/<interface>/<ipv4|ipv6>)" if parsed is None else \
        name_problem(interface, "interface name") or \
        (None if family in FAMILIES else f"the key's family {family!r} is not ipv4 or ipv6")
    model = validate(VppL3xc, key, value, key_problems={KEY_FIELD: problem} if problem else {},
                     context={"interface": interface, "family": family})
    return {"interface": interface, "family": family, **model.model_dump()}


def descriptors(ctx: Context) -> list[Descriptor]:
    api = L3Api(ctx.api.conn)

    def apply(key: str, value: Any) -> None:
        v = check_l3xc(key, value)
        is_ip6 = v["family"] == "ipv6"
        unspecified = "::" if is_ip6 else "0.0.0.0"
        paths = [{"next_hop": p["next_hop"] or unspecified,
                  "sw_if_index": ctx.sw_if_index(p["interface"]) if p["interface"] else ANY_INDEX,
                  "table": p["table"], "weight": p["weight"], "preference": p["preference"]}
                 for p in v["paths"]]
        api.l3xc_update(ctx.sw_if_index(v["interface"]), is_ip6, paths)

    def create(key: str, value: Any) -> None:
        apply(key, value)

    def update(key: str, old: Any, new: Any, metadata: Any) -> None:
        apply(key, new)  # VPP replaces the paths of the existing cross-connect

    def delete(key: str, value: Any, metadata: Any) -> None:
        v = check_l3xc(key, value)
        try:
            api.l3xc_del(ctx.sw_if_index(v["interface"]), v["family"] == "ipv6")
        except MissingInterfaceError:
            return  # the input interface is gone
        except VppApiError as exc:
            # Not there, or its interface gone (VPP can no longer name it to remove it).
            if exc.retval not in (INVALID_VALUE, INVALID_SW_IF_INDEX):
                raise

    def dependencies(key: str, value: Any) -> Sequence[Dependency]:
        try:
            v = check_l3xc(key, value)
        except InvalidValueError:
            return ()
        names = [v["interface"], *sorted({p["interface"] for p in v["paths"] if p["interface"]})]
        deps = [interface_dependency(name)
                for name in names]
        for table in sorted({p["table"] for p in v["paths"] if not p["interface"]}):
            deps += vrf_dependencies(table, (v["family"] == "ipv6",))
        return deps

    def retrieve(correlate: list[tuple[str, Any, Any]]) -> list[tuple[str, Any, Any, Any]]:
        names = ctx.names_by_index  # refreshed: interfaces are retrieved first
        result = []
        for xc in api.l3xcs():
            interface = names.get(xc.sw_if_index)
            if interface is None:
                continue  # on an interface kvmesh does not own
            paths = []
            for p in xc.paths:
                if p.path_type != PATH_NORMAL:
                    continue  # not a kind of path this model makes
                hop = None if ipaddress.ip_address(p.next_hop).is_unspecified else p.next_hop
                via = None if p.sw_if_index == ANY_INDEX else \
                    names.get(p.sw_if_index, f"sw_if_index-{p.sw_if_index}")
                paths.append({"next_hop": hop, "interface": via,
                              "table": p.table_id if via is None else 0,
                              "weight": p.weight, "preference": p.preference})
            value = {"paths": sorted(paths, key=place)}
            result.append((l3xc_key(interface, xc.is_ip6), value, None, ValueOrigin.UNKNOWN))
        return result

    return [model_descriptor(
        DESCRIPTOR, check_l3xc, lambda key: parse_key(key) is not None,
        create=create,
        update=update,
        delete=delete,
        dependencies=dependencies,
        retrieve=retrieve,
        retrieve_dependencies=(INTERFACE_DESCRIPTOR,),
    )]


MODEL: ModelSpec[Context] = ModelSpec(
    "vpp/l3xc", "vpp/l3xc/<interface>/<ipv4|ipv6>", re.compile(r"vpp/l3xc/[^/]+/[^/]+"),
    VppL3xc, check_l3xc, descriptors,
    examples=(("vpp/l3xc/lan/ipv4", {"paths": [{"next_hop": "10.0.0.2",
                                                 "interface": "uplink"}]}),),
)

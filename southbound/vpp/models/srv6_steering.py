"""`vpp/srv6/steering/<name>`: traffic steered into an SRv6 policy.

    {"bsid": "fc00:b::1", "prefix": "10.2.0.0/16", "table": 0}      # L3: a prefix of a table
    {"bsid": "fc00:b::1", "interface": "uplink"}                      # L2: all of an interface

`sr_steering_add_del`; a new `bsid` re-points it in place (VPP updates an existing steering), any
other change re-creates it. Depends on `vpp/srv6/policy/<bsid>` (VPP refuses an unknown BSID),
on the interface (L2) and on the VRF table (`table` > 0). VPP steers L2 and IPv4 traffic only
into encapsulating policies. Read back by `sr_steering_pol_dump`: VPP knows no names, so
steerings match the desired ones by what they steer; others are reported OBTAINED as
`vpp/srv6/steering/vpp-<table>-<prefix>` or `vpp-l2-<sw_if_index>` (names starting `vpp-` are
reserved) and never changed or deleted.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from typing import Annotated, Any

from pydantic import AfterValidator, Field, model_validator

from scheduler import Dependency, Descriptor, InvalidValueError, ValueOrigin
from southbound.modelspec import ModelSpec
from southbound.validation import KEY_FIELD, FieldProblems, StrictModel, validate
from southbound.vpp.context import INTERFACE_DESCRIPTOR, Context
from southbound.vpp.errors import MissingInterfaceError, VppApiError
from southbound.vpp.models import (
    MAX_VRF,
    VppName,
    interface_dependency,
    memoized,
    model_descriptor,
    name_problem,
)
from southbound.vpp.models.srv6_policy import PREFIX as POLICY_PREFIX
from southbound.vpp.models.srv6_policy import IPv6
from southbound.vpp.models.vrf import vrf_dependencies
from southbound.vpp.srv6_api import Srv6Api

PREFIX = "vpp/srv6/steering/"
DESCRIPTOR = "vpp-srv6-steering"
FOREIGN = "vpp-"
NO_SUCH_STEERING = -4  # sr_steering_policy's own code


def _network(text: str) -> str:
    try:
        return str(ipaddress.ip_network(text))
    except ValueError as exc:
        raise ValueError(f"must be a network like 10.2.0.0/16 (no host bits): {exc}") from None


class VppSrv6Steering(StrictModel):
    """`vpp/srv6/steering/<name>`: steer a prefix (L3) or an interface's traffic (L2) into
    the SRv6 policy `bsid`. Exactly one of `prefix`, `interface`."""

    bsid: IPv6 = Field(description="the vpp/srv6/policy BSID")
    prefix: Annotated[str, AfterValidator(_network)] | None = Field(
        None, description="an IPv4 or IPv6 network (L3)")
    table: int = Field(0, ge=0, le=MAX_VRF, description="the prefix's table (L3)")
    interface: VppName | None = Field(None, description="a vpp/interface (L2)")

    @model_validator(mode="after")
    def _consistent(self) -> VppSrv6Steering:
        if (self.prefix is None) == (self.interface is None):
            raise FieldProblems({"prefix": "give exactly one of prefix, interface"})
        if self.interface is not None and self.table:
            raise FieldProblems({"table": "only with prefix"})
        return self


def steering_name(key: str) -> str | None:
    if not key.startswith(PREFIX) or "/" in key[len(PREFIX):]:
        return None
    return key[len(PREFIX):] or None


@memoized
def check_steering(key: str, value: Any) -> dict[str, Any]:
    name = steering_name(key)
    problem = name_problem(name, "steering name") if name is not None else "malformed key"
    if problem is None and str(name).startswith(FOREIGN):
        problem = "names vpp-... are reserved for steerings kvmesh did not create"
    return validate(VppSrv6Steering, key, value,
                    key_problems={KEY_FIELD: problem} if problem else {}).model_dump()


def what(value: dict[str, Any]) -> tuple[Any, ...]:
    """What a steering steers (VPP's key for it)."""
    return (value["prefix"], value["table"], value["interface"])


def _dependencies(v: dict[str, Any]) -> Sequence[Dependency]:
    deps = [Dependency(label=f"SRv6 policy {v['bsid']}", key=f"{POLICY_PREFIX}{v['bsid']}")]
    if v["interface"] is not None:
        deps.append(interface_dependency(v["interface"]))
    else:
        deps += vrf_dependencies(v["table"], (":" in str(v["prefix"]),))
    return deps


def descriptors(ctx: Context) -> list[Descriptor]:
    api = Srv6Api(ctx.api.conn)

    def apply(key: str, value: Any, is_del: bool) -> None:
        v = check_steering(key, value)
        sw_if_index = ctx.sw_if_index(v["interface"]) if v["interface"] is not None else 0
        api.steer(v, sw_if_index, is_del)

    def create(key: str, value: Any) -> None:
        apply(key, value, False)

    def update(key: str, old: Any, new: Any, metadata: Any) -> None:
        apply(key, new, False)  # the same thing steered: VPP re-points it

    def recreate(key: str, old: Any, new: Any, metadata: Any) -> bool:
        try:
            return what(check_steering(key, old)) != what(check_steering(key, new))
        except InvalidValueError:
            return True

    def delete(key: str, value: Any, metadata: Any) -> None:
        try:
            apply(key, value, True)
        except MissingInterfaceError:
            return  # the interface is gone, and its steering with it
        except VppApiError as exc:
            if exc.retval != NO_SUCH_STEERING:
                raise

    def retrieve(correlate: list[tuple[str, Any, Any]]) -> list[tuple[str, Any, Any, Any]]:
        names_by_what: dict[tuple[Any, ...], str] = {}
        for key, value, _ in correlate:
            try:
                names_by_what[what(check_steering(key, value))] = str(steering_name(key))
            except InvalidValueError:
                continue
        names = ctx.names_by_index  # refreshed: interfaces are retrieved first
        result = []
        for bsid, prefix, table, sw_if_index in api.steerings():
            interface = None if sw_if_index is None else \
                names.get(sw_if_index, f"sw_if_index-{sw_if_index}")
            value = {"bsid": bsid, "prefix": prefix, "table": table, "interface": interface}
            name = names_by_what.get(what(value))
            if name is not None:
                result.append((f"{PREFIX}{name}", value, None, ValueOrigin.FROM_NB))
                continue
            foreign = f"vpp-l2-{sw_if_index}" if prefix is None else \
                f"vpp-{table}-{str(prefix).replace('/', '_')}"
            result.append((f"{PREFIX}{foreign}", value, None, ValueOrigin.FROM_SB))
        return result

    return [model_descriptor(
        DESCRIPTOR, check_steering, lambda key: steering_name(key) is not None,
        depends_on=_dependencies,
        create=create,
        update=update,
        update_with_recreate=recreate,
        delete=delete,
        retrieve=retrieve,
        retrieve_dependencies=(INTERFACE_DESCRIPTOR,),
    )]


MODEL: ModelSpec[Context] = ModelSpec(
    "vpp/srv6/steering", "vpp/srv6/steering/<name>", re.compile(r"vpp/srv6/steering/[^/]+"),
    VppSrv6Steering, check_steering, descriptors,
    examples=(("vpp/srv6/steering/to-dc2", {"bsid": "fc00:b::1", "prefix": "10.2.0.0/16"}),),
)

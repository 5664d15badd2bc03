"""`vpp/srv6/localsid/<sid>`: an SRv6 local SID (the behavior VPP applies to packets to it).

    {"behavior": "end.dt4", "table": 10}
    {"behavior": "end.x", "interface": "uplink", "next_hop": "fe80::1"}
    {"behavior": "end", "end_psp": true, "fib_table": 0}

`sr_localsid_add_del`; any change re-creates it. `interface` (End.X, End.DX2/DX4/DX6) depends on
`vpp/interface/<name>`; `table` (End.T, End.DT4/DT6: the table the decapsulated packet is looked
up in) and `fib_table` (> 0: the IPv6 table the SID is installed in) on their VRF tables.
Read back by `sr_localsids_dump`, which does not show the lookup table of End.T/DT4/DT6 (VPP
reports 0): kvmesh takes it from the desired value for a SID it configured. Local SIDs carry no
tag: those the desired state does not name are reported with an unknown origin (OBTAINED, never
changed or deleted).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, model_validator

from scheduler import Dependency, Descriptor, InvalidValueError, ValueOrigin
from southbound.modelspec import ModelSpec
from southbound.validation import KEY_FIELD, FieldProblems, StrictModel, validate
from southbound.vpp import keys
from southbound.vpp.context import INTERFACE_DESCRIPTOR, Context
from southbound.vpp.errors import VppApiError
from southbound.vpp.models import (
    MAX_U32,
    MAX_VRF,
    VppName,
    _ip,
    interface_dependency,
    memoized,
    model_descriptor,
)
from southbound.vpp.models.vrf import vrf_dependencies
from southbound.vpp.srv6_api import Srv6Api

PREFIX = "vpp/srv6/localsid/"
DESCRIPTOR = "vpp-srv6-localsid"
WITH_INTERFACE = ("end.x", "end.dx2", "end.dx4", "end.dx6")
WITH_TABLE = {"end.t": True, "end.dt4": False, "end.dt6": True}  # behavior -> is_ip6
ANY = 0xFFFFFFFF
NO_SUCH_LOCALSID = -2  # sr_cli_localsid's own code for deleting a missing SID


class VppSrv6LocalSid(StrictModel):
    """`vpp/srv6/localsid/<sid>`: an SRv6 local SID (an IPv6 address). `interface` and
    `next_hop` go with end.x (IPv6 next hop), end.dx4 (IPv4), end.dx6 (IPv6), `interface` and
    `vlan` with end.dx2, `table` with end.t, end.dt4 and end.dt6."""

    behavior: Literal["end", "end.x", "end.t", "end.dx2", "end.dx4", "end.dx6", "end.dt4",
                      "end.dt6"] = Field(description="what VPP does with packets to the SID")
    end_psp: bool = Field(False, description="penultimate segment pop")
    fib_table: int = Field(0, ge=0, le=MAX_VRF, description="IPv6 table the SID is in")
    interface: VppName | None = Field(None, description="the vpp/interface (end.x, end.dx*)")
    next_hop: Annotated[str, AfterValidator(_ip)] | None = Field(
        None, description="next hop (end.x, end.dx4, end.dx6)")
    vlan: int = Field(0, ge=0, le=MAX_U32, description="VLAN index (end.dx2)")
    table: int = Field(0, ge=0, le=MAX_VRF, description="lookup table (end.t, end.dt4/dt6)")

    @model_validator(mode="after")
    def _consistent(self) -> VppSrv6LocalSid:
        problems = {}
        with_interface = self.behavior in WITH_INTERFACE
        if with_interface != (self.interface is not None):
            problems["interface"] = f"required with {', '.join(WITH_INTERFACE)}, only with them"
        wants_hop = self.behavior in ("end.x", "end.dx4", "end.dx6")
        if wants_hop != (self.next_hop is not None):
            problems["next_hop"] = "required with end.x, end.dx4, end.dx6, only with them"
        elif self.next_hop is not None:
            family = 4 if self.behavior == "end.dx4" else 6
            if ipaddress.ip_address(self.next_hop).version != family:
                problems["next_hop"] = f"must be an IPv{family} address for {self.behavior}"
        if self.vlan and self.behavior != "end.dx2":
            problems["vlan"] = "only with end.dx2"
        if self.table and self.behavior not in WITH_TABLE:
            problems["table"] = "only with end.t, end.dt4, end.dt6"
        if problems:
            raise FieldProblems(problems)
        return self


def localsid_address(key: str) -> str | None:
    """The SID of the key (None unless an IPv6 address written canonically)."""
    return keys.ip6_key_tail(key, PREFIX)


@memoized
def check_localsid(key: str, value: Any) -> dict[str, Any]:
    problems = {} if localsid_address(key) is not None else \
        {KEY_FIELD: "malformed key (vpp/srv6/localsid/<IPv6 address, canonical form>)"}
    return validate(VppSrv6LocalSid, key, value, key_problems=problems).model_dump()


def _dependencies(v: dict[str, Any]) -> Sequence[Dependency]:
    deps = list(vrf_dependencies(v["fib_table"], (True,)))
    if v["behavior"] in WITH_TABLE:
        deps += vrf_dependencies(v["table"], (WITH_TABLE[v["behavior"]],))
    if v["interface"] is not None:
        deps.append(interface_dependency(v["interface"]))
    return deps


def descriptors(ctx: Context) -> list[Descriptor]:
    api = Srv6Api(ctx.api.conn)

    def create(key: str, value: Any) -> None:
        v = check_localsid(key, value)
        target = ctx.sw_if_index(v["interface"]) if v["interface"] is not None else (
            v["table"] if v["behavior"] in WITH_TABLE else ANY)
        api.localsid(str(localsid_address(key)), v, target, False)

    def delete(key: str, value: Any, metadata: Any) -> None:
        """VPP finds the SID by its address; sent as End, so that an interface already gone
        (VPP validates the interface of End.X/DX* first) does not keep the SID."""
        v = {**check_localsid(key, value), "behavior": "end", "next_hop": None}
        try:
            api.localsid(str(localsid_address(key)), v, ANY, True)
        except VppApiError as exc:
            if exc.retval != NO_SUCH_LOCALSID:
                raise

    def retrieve(correlate: list[tuple[str, Any, Any]]) -> list[tuple[str, Any, Any, Any]]:
        desired = {key: value for key, value, _ in correlate}
        names = ctx.names_by_index  # refreshed: interfaces are retrieved first
        result = []
        for d in api.localsids():
            key = f"{PREFIX}{d['sid']}"
            behavior = d["behavior"]
            table = 0
            if behavior in WITH_TABLE and key in desired:
                try:  # VPP does not show it: the desired value says it
                    table = check_localsid(key, desired[key])["table"]
                except InvalidValueError:
                    table = 0
            interface = names.get(d["xconnect"], f"sw_if_index-{d['xconnect']}") \
                if behavior in WITH_INTERFACE else None
            value = {"behavior": behavior, "end_psp": d["end_psp"],
                     "fib_table": d["fib_table"], "interface": interface,
                     "next_hop": d["next_hop"] if behavior in ("end.x", "end.dx4", "end.dx6")
                     else None,
                     "vlan": d["vlan"] if behavior == "end.dx2" else 0, "table": table}
            result.append((key, value, None, ValueOrigin.UNKNOWN))
        return result

    return [model_descriptor(
        DESCRIPTOR, check_localsid,
        lambda key: key.startswith(PREFIX) and "/" not in key[len(PREFIX):],
        depends_on=_dependencies,
        create=create,
        delete=delete,
        retrieve=retrieve,
        retrieve_dependencies=(INTERFACE_DESCRIPTOR,),
    )]


MODEL: ModelSpec[Context] = ModelSpec(
    "vpp/srv6/localsid", "vpp/srv6/localsid/<sid>", re.compile(r"vpp/srv6/localsid/[^/]+"),
    VppSrv6LocalSid, check_localsid, descriptors,
    examples=(("vpp/srv6/localsid/fc00::10", {"behavior": "end.dt4", "table": 10}),),
)

"""`vpp/neighbor/<interface>/<ip>`: an IP neighbor (ARP / ND entry), `ip_neighbor_add_del`,
read back by `ip_neighbor_dump`.

Depends on its interface. A new MAC is applied in place (VPP updates an existing entry); a change
of `static` or `no_fib_entry` re-creates the entry (VPP never turns a static entry dynamic and
keeps the flags of an existing entry). Retrieve reports the static entries on kvmesh interfaces,
plus any entry the scheduler asks about (a dynamic one configured through kvmesh).
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import AfterValidator, Field, ValidationInfo, model_validator

from scheduler import Descriptor, ValueOrigin
from southbound.modelspec import ModelSpec
from southbound.validation import KEY_FIELD, FieldProblems, StrictModel, validate
from southbound.vpp import keys
from southbound.vpp.binapi import NEIGHBOR_NO_FIB_ENTRY, NEIGHBOR_STATIC
from southbound.vpp.context import INTERFACE_DESCRIPTOR, NEIGHBOR_DESCRIPTOR, Context
from southbound.vpp.errors import (
    INVALID_SW_IF_INDEX,
    NO_SUCH_ENTRY,
    MissingInterfaceError,
    VppApiError,
)
from southbound.vpp.models import (
    Mac,
    VppName,
    _ip,
    interface_dependency,
    memoized,
    model_descriptor,
    name_problem,
)


class VppNeighbor(StrictModel):
    """`vpp/neighbor/<interface>/<ip>`: a static IP neighbor. `interface` and `ip` may be left
    out (they are taken from the key); if given they must match it."""

    interface: VppName | None = Field(None, description="a vpp/interface name (as in the key)")
    ip: Annotated[str, AfterValidator(_ip)] | None = Field(
        None, description="the neighbor's IPv4 or IPv6 address (as in the key)")
    mac: Mac = Field(description="the neighbor's MAC address")
    static: bool = Field(True, description="a static entry (never aged out)")
    no_fib_entry: bool = Field(False, description="do not install a host route for it")

    @model_validator(mode="after")
    def _agrees_with_key(self, info: ValidationInfo) -> VppNeighbor:
        context = info.context or {}
        problems = {}
        if self.interface is not None and self.interface != context.get("interface"):
            problems["interface"] = f"{self.interface} does not match the key's " \
                                    f"{context.get('interface')!r}"
        if self.ip is not None and self.ip != context.get("ip"):
            problems["ip"] = f"{self.ip} does not match the key's {context.get('ip')!r}"
        if problems:
            raise FieldProblems(problems)
        return self


@memoized
def normalize_neighbor(key: str, value: Any) -> dict[str, Any]:
    parsed = keys.parse_neighbor_key(key)
    problems: dict[str, str] = {}
    interface, ip = parsed if parsed is not None else ("", "")
    if parsed is None:
        problems[KEY_FIELD] = "malformed key (vpp/neighbor/<interface>/<ip>)"
    elif (problem := name_problem(interface, "interface name")) is not None:
        problems[KEY_FIELD] = problem
    else:
        try:
            ip = _ip(ip)
        except ValueError as exc:
            problems[KEY_FIELD] = f"the key's ip: {exc}"
    model = validate(VppNeighbor, key, value, key_problems=problems,
                     context={"interface": interface, "ip": ip})
    return {"interface": interface, "ip": ip, "mac": model.mac, "static": model.static,
            "no_fib_entry": model.no_fib_entry}


def _flags(v: dict[str, Any]) -> int:
    return (NEIGHBOR_STATIC if v["static"] else 0) | \
        (NEIGHBOR_NO_FIB_ENTRY if v["no_fib_entry"] else 0)


class NeighborDescriptor:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.api = ctx.api

    def descriptor(self) -> Descriptor:
        return model_descriptor(
            NEIGHBOR_DESCRIPTOR, normalize_neighbor,
            lambda key: keys.parse_neighbor_key(key) is not None,
            depends_on=lambda v: (interface_dependency(v["interface"]),),
            create=self.create,
            update=self.update,
            delete=self.delete,
            update_with_recreate=self.flags_changed,
            retrieve=self.retrieve,
            retrieve_dependencies=(INTERFACE_DESCRIPTOR,),
        )

    def _add(self, key: str, value: Any) -> None:
        v = normalize_neighbor(key, value)
        self.api.neighbor_add_del(self.ctx.sw_if_index(v["interface"]), v["ip"], v["mac"],
                                  _flags(v), True)

    def create(self, key: str, value: Any) -> None:
        self._add(key, value)

    def update(self, key: str, old: Any, new: Any, metadata: Any) -> None:
        self._add(key, new)  # a new MAC: VPP updates the entry in place

    def delete(self, key: str, value: Any, metadata: Any) -> None:
        v = normalize_neighbor(key, value)
        try:
            self.api.neighbor_add_del(self.ctx.sw_if_index(v["interface"]), v["ip"], v["mac"],
                                      _flags(v), False)
        except MissingInterfaceError:
            return  # the interface is gone, its neighbors with it
        except VppApiError as exc:
            if exc.retval not in (NO_SUCH_ENTRY, INVALID_SW_IF_INDEX):
                raise

    def flags_changed(self, key: str, old: Any, new: Any, metadata: Any) -> bool:
        o, n = normalize_neighbor(key, old), normalize_neighbor(key, new)
        return bool(_flags(o) != _flags(n))

    def retrieve(self, correlate: list[tuple[str, Any, Any]]) -> list[tuple[str, Any, Any, Any]]:
        wanted = {key for key, _value, _meta in correlate}
        # Interfaces are retrieved first (retrieve_dependencies), which refreshes this map.
        names = self.ctx.names_by_index
        result = []
        for n in self.api.neighbors():
            interface = names.get(n.sw_if_index)
            if interface is None:
                continue  # on an interface kvmesh does not own
            key = keys.neighbor_key(interface, n.ip)
            static = bool(n.flags & NEIGHBOR_STATIC)
            if not static and key not in wanted:
                continue  # learnt by VPP
            value = {"interface": interface, "ip": n.ip, "mac": n.mac, "static": static,
                     "no_fib_entry": bool(n.flags & NEIGHBOR_NO_FIB_ENTRY)}
            result.append((key, value, None, ValueOrigin.UNKNOWN))
        return result


def descriptors(ctx: Context) -> list[Descriptor]:
    return [NeighborDescriptor(ctx).descriptor()]


MODEL: ModelSpec[Context] = ModelSpec(
    "vpp/neighbor", "vpp/neighbor/<interface>/<ip>", re.compile(r"vpp/neighbor/[^/]+/[^/]+"),
    VppNeighbor, normalize_neighbor, descriptors,
    examples=(("vpp/neighbor/lo1/10.0.0.2", {"mac": "02:00:00:00:00:02"}),),
)

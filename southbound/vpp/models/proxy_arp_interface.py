"""`vpp/proxy-arp/interface/<interface>`: proxy ARP enabled on an interface (VPP then answers
ARP requests arriving there for the `vpp/proxy-arp/<vrf>/<low>-<high>` ranges of the
interface's table).

`proxy_arp_intfc_enable_disable`, read back by `proxy_arp_intfc_dump`; the value is `{}`. Depends
on the interface. Retrieve reports the kvmesh interfaces VPP has it enabled on (VPP keeps the
flag of a deleted interface's index: those are not reported).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from pydantic import Field, ValidationInfo, model_validator

from scheduler import Dependency, Descriptor, InvalidValueError, ValueOrigin
from southbound.modelspec import ModelSpec
from southbound.validation import KEY_FIELD, FieldProblems, StrictModel, validate
from southbound.vpp import keys
from southbound.vpp.context import INTERFACE_DESCRIPTOR, Context
from southbound.vpp.errors import (
    INVALID_SW_IF_INDEX,
    MissingInterfaceError,
    VppApiError,
)
from southbound.vpp.l3_api import L3Api
from southbound.vpp.models import (
    VppName,
    interface_dependency,
    memoized,
    model_descriptor,
    name_problem,
)
from southbound.vpp.models.proxy_arp import INTERFACE
from southbound.vpp.models.proxy_arp import PREFIX as PROXY_ARP_PREFIX

PREFIX = f"{PROXY_ARP_PREFIX}{INTERFACE}/"
DESCRIPTOR = "vpp-proxy-arp-interface"


class VppProxyArpInterface(StrictModel):
    """`vpp/proxy-arp/interface/<interface>`: proxy ARP enabled on a VPP interface. `interface`
    may be left out (it is taken from the key)."""

    interface: VppName | None = Field(None, description="a vpp/interface name (as in the key)")

    @model_validator(mode="after")
    def _agrees_with_key(self, info: ValidationInfo) -> VppProxyArpInterface:
        name = (info.context or {}).get("interface")
        if self.interface is not None and self.interface != name:
            raise FieldProblems({"interface": f"{self.interface} does not match the key's "
                                              f"{name!r}"})
        return self


def interface_of(key: str) -> str | None:
    return keys.single_name(key, PREFIX)


@memoized
def check_proxy_arp_interface(key: str, value: Any) -> dict[str, Any]:
    """The canonical value: {"interface"}."""
    name = interface_of(key)
    problem = name_problem(name, "interface name") if name is not None else "malformed key"
    validate(VppProxyArpInterface, key, value,
             key_problems={KEY_FIELD: problem} if problem else {}, context={"interface": name})
    return {"interface": name}


def descriptors(ctx: Context) -> list[Descriptor]:
    api = L3Api(ctx.api.conn)

    def apply(key: str, value: Any, enable: bool) -> None:
        v = check_proxy_arp_interface(key, value)
        api.proxy_arp_interface(ctx.sw_if_index(v["interface"]), enable)

    def create(key: str, value: Any) -> None:
        apply(key, value, True)

    def delete(key: str, value: Any, metadata: Any) -> None:
        try:
            apply(key, value, False)
        except MissingInterfaceError:
            return  # the interface is gone
        except VppApiError as exc:
            if exc.retval != INVALID_SW_IF_INDEX:
                raise

    def dependencies(key: str, value: Any) -> Sequence[Dependency]:
        try:
            name = check_proxy_arp_interface(key, value)["interface"]
        except InvalidValueError:
            return ()
        return (interface_dependency(name),)

    def retrieve(correlate: list[tuple[str, Any, Any]]) -> list[tuple[str, Any, Any, Any]]:
        names = ctx.names_by_index  # refreshed: interfaces are retrieved first
        return [(f"{PREFIX}{names[index]}", {"interface": names[index]}, None,
                 ValueOrigin.UNKNOWN)
                for index in sorted(api.proxy_arp_interfaces()) if index in names]

    return [model_descriptor(
        DESCRIPTOR, check_proxy_arp_interface, lambda key: interface_of(key) is not None,
        create=create,
        delete=delete,
        dependencies=dependencies,
        retrieve=retrieve,
        retrieve_dependencies=(INTERFACE_DESCRIPTOR,),
    )]


MODEL: ModelSpec[Context] = ModelSpec(
    "vpp/proxy-arp/interface", "vpp/proxy-arp/interface/<interface>",
    re.compile(r"vpp/proxy-arp/interface/[^/]+"),
    VppProxyArpInterface, check_proxy_arp_interface, descriptors,
    examples=(("vpp/proxy-arp/interface/lan", {}),),
)

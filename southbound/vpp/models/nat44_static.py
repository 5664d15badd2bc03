"""`vpp/nat44/static/<name>`: a NAT44 static mapping (DNAT of an external address or port).

    {"protocol": "tcp", "local_ip": "10.0.0.5", "local_port": 80,
     "external_ip": "198.51.100.1", "external_port": 8080, "vrf": 0}
    {"local_ip": "10.0.0.6", "external_interface": "uplink"}        # address only

`nat44_add_del_static_mapping_v2` (tag `kvmesh:<name>`); any change re-creates. Without ports
(and protocol) the mapping is address-only. `external_interface` maps the first IPv4 address of
that interface. Depends on NAT44 being enabled and on the external interface. Read back by
`nat44_static_mapping_dump`; untagged mappings are not reported (never changed or deleted).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Annotated, Any

from pydantic import AfterValidator, Field, model_validator

from scheduler import Dependency, Descriptor, ValueOrigin
from southbound.modelspec import ModelSpec
from southbound.validation import KEY_FIELD, FieldProblems, StrictModel, validate
from southbound.vpp.context import INTERFACE_DESCRIPTOR, Context, owned_name, owner_tag
from southbound.vpp.errors import NO_SUCH_ENTRY, MissingInterfaceError, VppApiError
from southbound.vpp.models import (
    MAX_VRF,
    VppName,
    interface_dependency,
    memoized,
    model_descriptor,
    name_problem,
)
from southbound.vpp.nat44_api import ENABLED, PROTOCOLS, Nat44Api, ip4

PREFIX = "vpp/nat44/static/"
DESCRIPTOR = "vpp-nat44-static"



def _protocol(protocol: int | str) -> int | str:
    if (isinstance(protocol, str) and protocol not in PROTOCOLS) or \
            (isinstance(protocol, int) and not 1 <= protocol <= 255):
        raise ValueError(f"must be 1..255 or one of {', '.join(PROTOCOLS)}, got {protocol!r}")
    return protocol


IPv4 = Annotated[str, AfterValidator(ip4), Field(description="an IPv4 address")]
Port = Annotated[int, Field(ge=1, le=65535)]


class VppNat44Static(StrictModel):
    """`vpp/nat44/static/<name>`: a NAT44 static mapping of `local_ip[:local_port]` to
    `external_ip[:external_port]` (or the address of `external_interface`). Ports and protocol
    together, or none of them (address only)."""

    protocol: Annotated[int | str, AfterValidator(_protocol)] | None = Field(
        None, description="IP protocol (with ports): 1..255 or tcp, udp, icmp")
    local_ip: IPv4 = Field(description="the inside address")
    local_port: Port | None = Field(None, description="the inside port")
    external_ip: IPv4 | None = Field(None, description="the outside address")
    external_interface: VppName | None = Field(
        None, description="instead of external_ip: the first IPv4 address of this interface")
    external_port: Port | None = Field(None, description="the outside port")
    vrf: int = Field(0, ge=0, le=MAX_VRF, description="the inside table")

    @model_validator(mode="after")
    def _consistent(self) -> VppNat44Static:
        problems = {}
        if (self.external_ip is None) == (self.external_interface is None):
            problems["external_ip"] = "give exactly one of external_ip, external_interface"
        given = [self.protocol is not None, self.local_port is not None,
                 self.external_port is not None]
        if any(given) and not all(given):
            problems["protocol"] = \
                "protocol, local_port and external_port go together (none: address only)"
        if problems:
            raise FieldProblems(problems)
        return self


def mapping_name(key: str) -> str | None:
    if not key.startswith(PREFIX) or key.count("/") != 3:
        return None
    return key[len(PREFIX):] or None


@memoized
def check_static(key: str, value: Any) -> dict[str, Any]:
    name = mapping_name(key)
    problem = name_problem(name, "mapping name") if name is not None else "malformed key"
    model = validate(VppNat44Static, key, value,
                     key_problems={KEY_FIELD: problem} if problem else {})
    result = model.model_dump()
    if isinstance(model.protocol, str):
        result["protocol"] = PROTOCOLS[model.protocol]
    return result


def _dependencies(v: dict[str, Any]) -> Sequence[Dependency]:
    external_if = v["external_interface"]
    return (ENABLED,) if external_if is None else (ENABLED, interface_dependency(external_if))


def descriptors(ctx: Context) -> list[Descriptor]:
    api = Nat44Api(ctx.api.conn)

    def apply(key: str, value: Any, is_add: bool) -> None:
        v = check_static(key, value)
        external_if = v["external_interface"]
        api.static_mapping(
            is_add, owner_tag(str(mapping_name(key))), v["local_ip"], v["external_ip"],
            None if external_if is None else ctx.sw_if_index(external_if), v["protocol"],
            v["local_port"], v["external_port"], v["vrf"])

    def create(key: str, value: Any) -> None:
        apply(key, value, True)

    def delete(key: str, value: Any, metadata: Any) -> None:
        try:
            apply(key, value, False)
        except MissingInterfaceError:
            return
        except VppApiError as exc:
            if exc.retval != NO_SUCH_ENTRY:
                raise


    def retrieve(correlate: list[tuple[str, Any, Any]]) -> list[tuple[str, Any, Any, Any]]:
        names = ctx.names_by_index  # refreshed: interfaces are retrieved first
        found: dict[str, dict[str, Any]] = {}
        for d in api.static_mappings():
            name = owned_name(d.tag)
            if name is None:
                continue
            on_interface = d.external_sw_if_index is not None
            if name in found and not on_interface:
                continue  # the resolved twin of a mapping on an interface: the record says it
            found[name] = {
                "protocol": None if d.addr_only else d.protocol,
                "local_ip": d.local_ip,
                "local_port": None if d.addr_only else d.local_port,
                "external_ip": None if on_interface else d.external_ip,
                "external_interface": names.get(d.external_sw_if_index, f"sw_if_index-"
                                                f"{d.external_sw_if_index}")
                if d.external_sw_if_index is not None else None,
                "external_port": None if d.addr_only else d.external_port,
                "vrf": d.vrf,
            }
        return [(f"{PREFIX}{name}", value, None, ValueOrigin.FROM_NB)
                for name, value in found.items()]

    return [model_descriptor(
        DESCRIPTOR, check_static, lambda key: mapping_name(key) is not None,
        depends_on=_dependencies,
        create=create,
        delete=delete,
        retrieve=retrieve,
        retrieve_dependencies=(INTERFACE_DESCRIPTOR,),
    )]


MODEL: ModelSpec[Context] = ModelSpec(
    "vpp/nat44/static", "vpp/nat44/static/<name>", re.compile(r"vpp/nat44/static/[^/]+"),
    VppNat44Static, check_static, descriptors,
    examples=(("vpp/nat44/static/web", {
        "protocol": "tcp", "local_ip": "10.0.0.5", "local_port": 80,
        "external_ip": "198.51.100.1", "external_port": 8080}),),
)

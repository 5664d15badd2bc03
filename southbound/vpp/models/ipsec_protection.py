"""`vpp/ipsec/tunnel-protection/<interface>`: IPsec protecting all traffic of a tunnel interface.

    {"sa_out": 10, "sa_in": [20], "next_hop": null}

- `ipsec_tunnel_protect_update` creates it, and updates its SAs in place (VPP swaps them);
  a new `next_hop` re-creates it (`ipsec_tunnel_protect_del` + update). The interface must be a
  GRE or IPIP tunnel (VPP refuses others with INVALID_SW_IF_INDEX); `next_hop` is only for a
  multipoint tunnel (the peer the protection is for) and stays unset on a point-to-point one.
- Depends on `vpp/interface/<interface>` and on `vpp/ipsec/sa/<id>` of `sa_out` and of each of
  `sa_in` (at most 4, VPP's limit). A protection holds its SAs: VPP keeps an SA in use
  after its delete, so the scheduler removes the protection first.
- Read back by `ipsec_tunnel_protect_dump`; SA ids only (their keys are the SA model's and
  redacted there). Protections of interfaces kvmesh does not own are reported under
  `vpp/ipsec/tunnel-protection/sw_if_index-<n>`, with an unknown origin: OBTAINED, never changed
  or deleted. A multipoint tunnel with several protections shows its first.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from typing import Annotated, Any

from pydantic import AfterValidator, Field

from scheduler import Dependency, Descriptor, InvalidValueError, ValueOrigin
from southbound.modelspec import ModelSpec
from southbound.validation import KEY_FIELD, StrictModel, validate
from southbound.vpp.context import INTERFACE_DESCRIPTOR, Context
from southbound.vpp.errors import (
    INVALID_SW_IF_INDEX,
    NO_SUCH_ENTRY,
    MissingInterfaceError,
    VppApiError,
)
from southbound.vpp.ipsec_api import IpsecApi
from southbound.vpp.models import (
    MAX_U32,
    _ip,
    interface_dependency,
    listed_once,
    memoized,
    model_descriptor,
    name_problem,
)
from southbound.vpp.models.ipsec_sa import sa_key

PREFIX = "vpp/ipsec/tunnel-protection/"
DESCRIPTOR = "vpp-ipsec-tunnel-protection"
MAX_SA_IN = 4  # ITP_MAX_N_SA_IN

SaId = Annotated[int, Field(ge=0, le=MAX_U32)]


class VppIpsecTunnelProtection(StrictModel):
    """`vpp/ipsec/tunnel-protection/<interface>`: the SAs protecting a GRE/IPIP tunnel
    interface: one outbound, up to 4 inbound (VPP's limit), by `vpp/ipsec/sa` id."""

    sa_out: SaId = Field(description="the outbound vpp/ipsec/sa id")
    sa_in: Annotated[list[SaId], AfterValidator(listed_once)] = Field(
        default_factory=list, max_length=MAX_SA_IN,
        description=f"inbound vpp/ipsec/sa ids (at most {MAX_SA_IN})")
    next_hop: Annotated[str, AfterValidator(_ip)] | None = Field(
        None, description="the peer on a multipoint tunnel (unset: point-to-point)")


def protected_interface(key: str) -> str | None:
    if not key.startswith(PREFIX) or "/" in key[len(PREFIX):]:
        return None
    return key[len(PREFIX):] or None


def protection_key(interface: str) -> str:
    return f"{PREFIX}{interface}"


@memoized
def check_protection(key: str, value: Any) -> dict[str, Any]:
    name = protected_interface(key)
    problem = name_problem(name, "interface name") if name is not None else "malformed key"
    result = validate(VppIpsecTunnelProtection, key, value,
                      key_problems={KEY_FIELD: problem} if problem else {}).model_dump()
    if result["next_hop"] is not None and ipaddress.ip_address(result["next_hop"]).is_unspecified:
        result["next_hop"] = None  # VPP's own "none"
    return result


def descriptors(ctx: Context) -> list[Descriptor]:
    api = IpsecApi(ctx.api.conn)

    def create(key: str, value: Any) -> None:
        v = check_protection(key, value)
        api.protect(ctx.sw_if_index(str(protected_interface(key))), v["next_hop"], v["sa_out"],
                    v["sa_in"])

    def update(key: str, old: Any, new: Any, metadata: Any) -> None:
        create(key, new)  # the same protection: VPP swaps its SAs

    def recreate(key: str, old: Any, new: Any, metadata: Any) -> bool:
        try:
            return bool(check_protection(key, old)["next_hop"] !=
                        check_protection(key, new)["next_hop"])
        except InvalidValueError:
            return True

    def delete(key: str, value: Any, metadata: Any) -> None:
        try:
            api.unprotect(ctx.sw_if_index(str(protected_interface(key))),
                          check_protection(key, value)["next_hop"])
        except MissingInterfaceError:
            return  # kvmesh no longer has the interface; VPP refuses to name it
        except VppApiError as exc:
            if exc.retval not in (NO_SUCH_ENTRY, INVALID_SW_IF_INDEX):
                raise

    def dependencies(key: str, value: Any) -> Sequence[Dependency]:
        try:
            v = check_protection(key, value)
        except InvalidValueError:
            return ()
        iface = str(protected_interface(key))
        return [interface_dependency(iface),
                *(Dependency(label=f"IPsec SA {sa}", key=sa_key(sa))
                  for sa in dict.fromkeys((v["sa_out"], *v["sa_in"])))]

    def retrieve(correlate: list[tuple[str, Any, Any]]) -> list[tuple[str, Any, Any, Any]]:
        names = ctx.names_by_index  # refreshed: interfaces are retrieved first
        result: dict[str, tuple[str, Any, Any, Any]] = {}
        for sw_if_index, value in api.protections():
            key = protection_key(names.get(sw_if_index, f"sw_if_index-{sw_if_index}"))
            result.setdefault(key, (key, value, None, ValueOrigin.UNKNOWN))
        return list(result.values())

    return [model_descriptor(
        DESCRIPTOR, check_protection, lambda key: protected_interface(key) is not None,
        create=create,
        update=update,
        update_with_recreate=recreate,
        delete=delete,
        dependencies=dependencies,
        retrieve=retrieve,
        retrieve_dependencies=(INTERFACE_DESCRIPTOR,),
    )]


MODEL: ModelSpec[Context] = ModelSpec(
    "vpp/ipsec/tunnel-protection", "vpp/ipsec/tunnel-protection/<interface>",
    re.compile(r"vpp/ipsec/tunnel-protection/[^/]+"), VppIpsecTunnelProtection,
    check_protection, descriptors,
    examples=(("vpp/ipsec/tunnel-protection/gre1", {"sa_out": 10, "sa_in": [20]}),),
)

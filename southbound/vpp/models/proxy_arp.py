"""`vpp/proxy-arp/<vrf>/<low>-<high>`: VPP answers ARP requests for the IPv4 addresses `low` to
`high` of table `vrf` (on interfaces with proxy ARP: `vpp/proxy-arp/interface/<interface>`).

`proxy_arp_add_del`, read back by `proxy_arp_dump`. Everything is in the key, so a value is `{}`
(or repeats the key's fields). Depends on its VRF table (table 0 is VPP's own). VPP takes
reversed ranges (they answer nothing): kvmesh refuses them, and anything but IPv4 (proxy ARP is
IPv4's; IPv6 has ND proxy). Ranges kvmesh did not create are reported OBTAINED and never removed.
VPP reports a range's FIB index, not its table id: see `L3Api.proxy_arp_ranges` for how it is
mapped back.
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
from southbound.vpp.context import VRF_DESCRIPTOR, Context
from southbound.vpp.errors import NO_SUCH_ENTRY, NO_SUCH_FIB, VppApiError
from southbound.vpp.l3_api import L3Api
from southbound.vpp.models import MAX_VRF, memoized, model_descriptor
from southbound.vpp.models.vrf import vrf_dependencies

PREFIX = "vpp/proxy-arp/"
INTERFACE = "interface"  # vpp/proxy-arp/interface/<name> is the other model
DESCRIPTOR = "vpp-proxy-arp"


def _ipv4(text: str) -> str:
    try:
        return str(ipaddress.IPv4Address(text))
    except ValueError:
        raise ValueError(f"must be an IPv4 address (proxy ARP is IPv4 only), got {text!r}") \
            from None


IPv4 = Annotated[str, AfterValidator(_ipv4), Field(description="an IPv4 address")]


class VppProxyArp(StrictModel):
    """`vpp/proxy-arp/<vrf>/<low>-<high>`: answer ARP for the IPv4 addresses `low`..`high` of
    table `vrf` by proxy. The fields may be left out (they are taken from the key); if given
    they must match it."""

    vrf: int | None = Field(None, ge=0, le=MAX_VRF, description="IPv4 table (as in the key)")
    low: IPv4 | None = Field(None, description="first address (as in the key)")
    high: IPv4 | None = Field(None, description="last address (as in the key)")

    @model_validator(mode="after")
    def _agrees_with_key(self, info: ValidationInfo) -> VppProxyArp:
        context = info.context or {}
        problems = {field: f"{getattr(self, field)} does not match the key's "
                           f"{context.get(field)!r}"
                    for field in ("vrf", "low", "high")
                    if getattr(self, field) is not None and context.get(field) is not None
                    and getattr(self, field) != context[field]}
        if problems:
            raise FieldProblems(problems)
        return self


def range_key(vrf: int, low: str, high: str) -> str:
    return f"{PREFIX}{vrf}/{low}-{high}"


def _key_parts(key: str) -> tuple[str, str] | None:
    if not key.startswith(PREFIX):
        return None
    parts = key[len(PREFIX):].split("/")
    if len(parts) != 2 or parts[0] == INTERFACE or not all(parts):
        return None
    return parts[0], parts[1]


def _key_fields(key: str) -> tuple[dict[str, Any], str | None]:
    """The key's vrf, low and high (those that parse), and the key's problem if any."""
    parts = _key_parts(key)
    if parts is None:
        return {}, "malformed key (vpp/proxy-arp/<vrf>/<low>-<high>)"
    vrf_text, span = parts
    fields: dict[str, Any] = {}
    if vrf_text.isdigit() and int(vrf_text) <= MAX_VRF:
        fields["vrf"] = int(vrf_text)
    else:
        return fields, f"the key's vrf {vrf_text!r} is not an integer 0..{MAX_VRF}"
    low, _, high = span.partition("-")
    try:
        lo, hi = ipaddress.IPv4Address(low), ipaddress.IPv4Address(high)
    except ValueError:
        return fields, f"the key's range {span!r} is not <low>-<high> of IPv4 addresses " \
                       "(proxy ARP is IPv4 only)"
    if (str(lo), str(hi)) != (low, high):
        return fields, f"write the key's addresses canonically: {lo}-{hi}"
    fields.update(low=low, high=high)
    if lo > hi:
        return fields, f"the range {span} is reversed: {low} is above {high}"
    return fields, None


@memoized
def check_proxy_arp(key: str, value: Any) -> dict[str, Any]:
    """The canonical range: {"vrf", "low", "high"}."""
    fields, problem = _key_fields(key)
    validate(VppProxyArp, key, value, key_problems={KEY_FIELD: problem} if problem else {},
             context=fields)
    return fields


def descriptors(ctx: Context) -> list[Descriptor]:
    api = L3Api(ctx.api.conn)

    def apply(key: str, value: Any, is_add: bool) -> None:
        v = check_proxy_arp(key, value)
        api.proxy_arp_range(v["vrf"], v["low"], v["high"], is_add)

    def create(key: str, value: Any) -> None:
        apply(key, value, True)

    def delete(key: str, value: Any, metadata: Any) -> None:
        try:
            apply(key, value, False)
        except VppApiError as exc:
            # Not there, or its table is gone (VPP then cannot find the range to remove).
            if exc.retval not in (NO_SUCH_ENTRY, NO_SUCH_FIB):
                raise

    def dependencies(key: str, value: Any) -> Sequence[Dependency]:
        try:
            v = check_proxy_arp(key, value)
        except InvalidValueError:
            return ()
        return vrf_dependencies(v["vrf"], (False,))

    def retrieve(correlate: list[tuple[str, Any, Any]]) -> list[tuple[str, Any, Any, Any]]:
        # Unknown origin: a range kvmesh configured is its own, any other one OBTAINED.
        return [(range_key(vrf, low, high), {"vrf": vrf, "low": low, "high": high}, None,
                 ValueOrigin.UNKNOWN) for vrf, low, high in api.proxy_arp_ranges()]

    return [model_descriptor(
        DESCRIPTOR, check_proxy_arp, lambda key: _key_parts(key) is not None,
        create=create,
        delete=delete,
        dependencies=dependencies,
        retrieve=retrieve,
        retrieve_dependencies=(VRF_DESCRIPTOR,),
    )]


MODEL: ModelSpec[Context] = ModelSpec(
    "vpp/proxy-arp", "vpp/proxy-arp/<vrf>/<low>-<high>",
    re.compile(r"vpp/proxy-arp/(?!interface/)[^/]+/[^/]+"),
    VppProxyArp, check_proxy_arp, descriptors,
    examples=(("vpp/proxy-arp/0/10.0.0.10-10.0.0.20", {}),),
)

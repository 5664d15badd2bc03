"""`vpp/srv6/policy/<bsid>`: an SRv6 policy: its binding SID and weighted segment lists.

    {"segment_lists": [{"segments": ["fc00::a", "fc00::b"], "weight": 1}],
     "encap": true, "type": "default", "fib_table": 0, "encap_src": null}

`sr_policy_add_v2` with the first segment list, `sr_policy_mod_v2` (add) for each further one;
`sr_policy_del`. Any change re-creates it (the steering into it is removed first and put back).
`encap_src` unset is VPP's (set by `sr_set_encap_source`): what VPP reports for it is then not
compared. `fib_table` > 0 depends on `vpp/vrf/ipv6/<fib_table>`. Read back by
`sr_policies_v2_dump`; policies carry no tag: those the desired state does not name are
reported with an unknown origin (OBTAINED, never changed or deleted).
"""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, model_validator

from scheduler import Descriptor, ValueOrigin
from southbound.modelspec import ModelSpec
from southbound.validation import KEY_FIELD, FieldProblems, StrictModel, validate
from southbound.vpp import keys
from southbound.vpp.context import Context
from southbound.vpp.errors import VppApiError
from southbound.vpp.models import MAX_U32, MAX_VRF, memoized, model_descriptor
from southbound.vpp.models.vrf import vrf_dependencies
from southbound.vpp.srv6_api import MAX_SIDS, Srv6Api

PREFIX = "vpp/srv6/policy/"
DESCRIPTOR = "vpp-srv6-policy"
NO_SUCH_POLICY = -1  # sr_policy_del's own code


def _ip6(text: str) -> str:
    try:
        return str(ipaddress.IPv6Address(text))
    except ValueError:
        raise ValueError(f"must be an IPv6 address, got {text!r}") from None


IPv6 = Annotated[str, AfterValidator(_ip6), Field(description="an IPv6 address")]


class SegmentList(StrictModel):
    """One segment list: the SIDs in order, and its share of the traffic."""

    segments: list[IPv6] = Field(min_length=1, max_length=MAX_SIDS,
                                 description=f"1..{MAX_SIDS} SIDs, in order")
    weight: int = Field(1, ge=1, le=MAX_U32 - 1, description="weight among the lists")


class VppSrv6Policy(StrictModel):
    """`vpp/srv6/policy/<bsid>`: an SRv6 policy on a binding SID (an IPv6 address)."""

    segment_lists: list[SegmentList] = Field(min_length=1, description="at least one")
    encap: bool = Field(True, description="encapsulate (else insert an SRH)")
    type: Literal["default", "spray", "tef"] = Field("default", description="policy type")
    fib_table: int = Field(0, ge=0, le=MAX_VRF, description="IPv6 table of the BSID")
    encap_src: IPv6 | None = Field(None, description="outer source (unset: VPP's)")

    @model_validator(mode="after")
    def _consistent(self) -> VppSrv6Policy:
        if self.encap_src is not None and not self.encap:
            raise FieldProblems({"encap_src": "only with encap"})
        return self


def policy_bsid(key: str) -> str | None:
    """The BSID of the key (None unless an IPv6 address written canonically)."""
    return keys.ip6_key_tail(key, PREFIX)


@memoized
def check_policy(key: str, value: Any) -> dict[str, Any]:
    problems = {} if policy_bsid(key) is not None else \
        {KEY_FIELD: "malformed key (vpp/srv6/policy/<BSID, an IPv6 address, canonical form>)"}
    return validate(VppSrv6Policy, key, value, key_problems=problems).model_dump()


def agree(x: dict[str, Any], y: dict[str, Any]) -> bool:
    """Equal canonical forms; an unset `encap_src` (VPP's) matches whatever VPP reports."""
    if x["encap_src"] is None or y["encap_src"] is None:
        x, y = {**x, "encap_src": None}, {**y, "encap_src": None}
    return x == y


def descriptors(ctx: Context) -> list[Descriptor]:
    api = Srv6Api(ctx.api.conn)

    def create(key: str, value: Any) -> None:
        api.add_policy(str(policy_bsid(key)), check_policy(key, value))

    def delete(key: str, value: Any, metadata: Any) -> None:
        try:
            api.del_policy(str(policy_bsid(key)))
        except VppApiError as exc:
            if exc.retval != NO_SUCH_POLICY:
                raise

    def retrieve(correlate: list[tuple[str, Any, Any]]) -> list[tuple[str, Any, Any, Any]]:
        return [(f"{PREFIX}{bsid}", value, None, ValueOrigin.UNKNOWN)
                for bsid, value in api.policies().items()]

    return [model_descriptor(
        DESCRIPTOR, check_policy,
        lambda key: key.startswith(PREFIX) and "/" not in key[len(PREFIX):],
        depends_on=lambda v: vrf_dependencies(v["fib_table"], (True,)),
        agree=agree,
        create=create,
        delete=delete,
        retrieve=retrieve,
    )]


MODEL: ModelSpec[Context] = ModelSpec(
    "vpp/srv6/policy", "vpp/srv6/policy/<bsid>", re.compile(r"vpp/srv6/policy/[^/]+"),
    VppSrv6Policy, check_policy, descriptors,
    examples=(("vpp/srv6/policy/fc00:b::1", {
        "segment_lists": [{"segments": ["fc00::a", "fc00::b"]},
                          {"segments": ["fc00::c"], "weight": 2}]}),),
)

"""`vpp/ip6-nd/<interface>`: IPv6 router advertisements (RA) of an interface, and the prefixes
they advertise.

    {"managed": true, "max_interval": 60, "lifetime": 1800,
     "prefixes": [{"prefix": "2001:db8:1::/64", "autoconfig": false}]}

VPP keeps RA state on an interface's IPv6 link (an ethernet interface or a sub-interface of one,
with IPv6 enabled); the descriptor takes one hold on the link (`sw_interface_ip6_enable_disable`,
counted by VPP with the interface's IPv6 addresses) and releases it on removal. Settings are set
by `sw_interface_ip6nd_ra_config` (twice: VPP applies the flags given, so one call clears those
that must be off and one sets the rest), prefixes by `sw_interface_ip6nd_ra_prefix`, read back
by `sw_interface_ip6nd_ra_dump`. Removal restores VPP's defaults (and no RAs sent) before the
hold is released. Limits are VPP's: a minimum interval of 3 s to 0.75 x the maximum (unset:
0.75 x the maximum, as VPP computes it), a router lifetime of 0 (not a default router) or above
the maximum interval and at most 9000 s, at most 3 initial advertisements 16 s apart; a prefix
lifetime of 4294967295 is infinite, and VPP makes both infinite when one is. RA state on kvmesh
interfaces that differs from VPP's untouched defaults and that kvmesh did not configure is
reported OBTAINED (never changed).
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
from southbound.vpp import keys
from southbound.vpp.context import INTERFACE_DESCRIPTOR, Context
from southbound.vpp.errors import (
    INVALID_SW_IF_INDEX,
    INVALID_VALUE,
    IP6_NOT_ENABLED,
    MissingInterfaceError,
    VppApiError,
)
from southbound.vpp.l3_api import INFINITE, L3Api
from southbound.vpp.models import (
    MAX_U32,
    interface_dependency,
    memoized,
    model_descriptor,
    name_problem,
)

PREFIX = "vpp/ip6-nd/"
DESCRIPTOR = "vpp-ip6-nd"
# VPP's limits and defaults (src/vnet/ip6-nd/ip6_ra.c)
MIN_MIN_INTERVAL = 3
MAX_ROUTER_LIFETIME = 9000
MAX_INITIAL_COUNT = 3
MAX_INITIAL_INTERVAL = 16
DEFAULT_MAX_INTERVAL = 200
DEFAULT_LIFETIME = 600
DEFAULT_VALID_LIFETIME = 2592000
DEFAULT_PREFERRED_LIFETIME = 604800
FLAGS = ("managed", "other", "send_unicast", "cease")  # VPP's flags that default to off


def _ip6_network(text: str) -> str:
    try:
        network = ipaddress.IPv6Network(text)
    except ValueError as exc:
        raise ValueError(f"must be an IPv6 network like 2001:db8:1::/64: {exc}") from None
    return str(network)


class RaPrefix(StrictModel):
    """A prefix the router advertisements carry."""

    prefix: Annotated[str, AfterValidator(_ip6_network)] = Field(
        description="an IPv6 network (no host bits)")
    valid_lifetime: int = Field(DEFAULT_VALID_LIFETIME, ge=0, le=MAX_U32,
                                description="seconds (4294967295: infinite)")
    preferred_lifetime: int = Field(DEFAULT_PREFERRED_LIFETIME, ge=0, le=MAX_U32,
                                    description="seconds (4294967295: infinite)")
    advertise: bool = Field(True, description="include it in the advertisements")
    onlink: bool = Field(True, description="the L (on-link) flag")
    autoconfig: bool = Field(True, description="the A (autonomous address-configuration) flag")

    @model_validator(mode="after")
    def _lifetimes(self) -> RaPrefix:
        if (self.valid_lifetime == INFINITE) != (self.preferred_lifetime == INFINITE):
            raise FieldProblems({"preferred_lifetime": "VPP makes both lifetimes infinite when "
                                                       "one is: give 4294967295 for both"})
        return self


def _prefixes(prefixes: list[RaPrefix]) -> list[RaPrefix]:
    seen: set[str] = set()
    for position, p in enumerate(prefixes):
        # VPP keeps one prefix per network address, whatever its length.
        address = p.prefix.split("/")[0]
        if address in seen:
            raise FieldProblems({f"[{position}].prefix": f"{address} is listed twice"})
        seen.add(address)
    return sorted(prefixes, key=lambda p: ipaddress.IPv6Network(p.prefix))


class VppIp6Nd(StrictModel):
    """`vpp/ip6-nd/<interface>`: IPv6 router advertisements of an interface (IPv6 is enabled on
    it while this value exists)."""

    suppress: bool = Field(False, description="send no router advertisements")
    managed: bool = Field(False, description="the M flag: addresses from DHCPv6")
    other: bool = Field(False, description="the O flag: other configuration from DHCPv6")
    link_layer_address: bool = Field(True, description="send the source link-layer option")
    send_unicast: bool = Field(False, description="answer solicitations by unicast")
    cease: bool = Field(False, description="stop advertising (a last RA with lifetime 0)")
    max_interval: int = Field(DEFAULT_MAX_INTERVAL, ge=4, le=MAX_U32,
                              description="seconds between unsolicited advertisements, at most")
    min_interval: int | None = Field(None, ge=MIN_MIN_INTERVAL, le=MAX_U32,
                                     description="... at least (unset: 0.75 x max_interval)")
    lifetime: int = Field(DEFAULT_LIFETIME, ge=0, le=MAX_ROUTER_LIFETIME,
                          description="router lifetime in seconds (0: not a default router)")
    initial_count: int = Field(MAX_INITIAL_COUNT, ge=1, le=MAX_INITIAL_COUNT,
                               description="advertisements sent fast after a change")
    initial_interval: int = Field(MAX_INITIAL_INTERVAL, ge=1, le=MAX_INITIAL_INTERVAL,
                                  description="seconds between those")
    prefixes: Annotated[list[RaPrefix], AfterValidator(_prefixes)] = Field(
        default_factory=list, description="advertised prefixes")

    @model_validator(mode="after")
    def _intervals(self) -> VppIp6Nd:
        problems = {}
        if self.min_interval is not None and self.min_interval > 0.75 * self.max_interval:
            problems["min_interval"] = f"above 0.75 x max_interval ({0.75 * self.max_interval})"
        if self.lifetime and self.lifetime <= self.max_interval:
            problems["lifetime"] = "must be 0 or above max_interval"
        if problems:
            raise FieldProblems(problems)
        return self


def interface_of(key: str) -> str | None:
    return keys.single_name(key, PREFIX)


@memoized
def check_ip6_nd(key: str, value: Any) -> dict[str, Any]:
    """The canonical value (min_interval filled in, prefixes sorted)."""
    name = interface_of(key)
    problem = name_problem(name, "interface name") if name is not None else "malformed key"
    result = validate(VppIp6Nd, key, value,
                      key_problems={KEY_FIELD: problem} if problem else {}).model_dump()
    if result["min_interval"] is None:
        result["min_interval"] = int(0.75 * result["max_interval"])  # as VPP computes it
    return result


def untouched(ra: dict[str, Any]) -> bool:
    """Whether RA state is VPP's own, as an IPv6 link starts: nothing sent, nothing configured."""
    try:
        return check_ip6_nd(f"{PREFIX}x", ra) == check_ip6_nd(f"{PREFIX}x", {"suppress": True})
    except InvalidValueError:
        return False


def descriptors(ctx: Context) -> list[Descriptor]:
    api = L3Api(ctx.api.conn)

    def configure(sw_if_index: int, v: dict[str, Any], old: list[dict[str, Any]]) -> None:
        # Flags given with is_no restore their default: first clear what must be off...
        api.ra_config(sw_if_index, is_no=True, **{f: not v[f] for f in FLAGS},
                      ll_option=v["link_layer_address"])
        # ... then set the rest (any call but a suppressing one starts sending RAs).
        api.ra_config(sw_if_index, suppress=v["suppress"], **{f: v[f] for f in FLAGS},
                      ll_option=not v["link_layer_address"], default_router=True,
                      lifetime=v["lifetime"], max_interval=v["max_interval"],
                      min_interval=v["min_interval"], initial_count=v["initial_count"],
                      initial_interval=v["initial_interval"])
        for p in old:
            if p not in v["prefixes"]:
                api.ra_prefix(sw_if_index, p["prefix"], True)
        for p in v["prefixes"]:
            if p not in old:
                api.ra_prefix(sw_if_index, p["prefix"], False, p)

    def create(key: str, value: Any) -> None:
        v = check_ip6_nd(key, value)
        sw_if_index = ctx.sw_if_index(str(interface_of(key)))
        api.ip6_enable(sw_if_index, True)
        try:
            configure(sw_if_index, v, [])
        except VppApiError:
            api.ip6_enable(sw_if_index, False)  # a retry takes its own hold
            raise

    def update(key: str, old: Any, new: Any, metadata: Any) -> None:
        configure(ctx.sw_if_index(str(interface_of(key))), check_ip6_nd(key, new),
                  check_ip6_nd(key, old)["prefixes"])

    def delete(key: str, value: Any, metadata: Any) -> None:
        v = check_ip6_nd(key, value)
        try:
            sw_if_index = ctx.sw_if_index(str(interface_of(key)))
            for p in v["prefixes"]:
                try:
                    api.ra_prefix(sw_if_index, p["prefix"], True)
                except VppApiError as exc:
                    if exc.retval != INVALID_VALUE:  # not there
                        raise
            # VPP's defaults back (any non-zero interval restores its default), then quiet.
            api.ra_config(sw_if_index, is_no=True, **dict.fromkeys(FLAGS, True), ll_option=True,
                          default_router=True, max_interval=1, min_interval=1,
                          initial_count=1, initial_interval=1)
            api.ra_config(sw_if_index, suppress=True)
            api.ip6_enable(sw_if_index, False)
        except MissingInterfaceError:
            return  # the interface is gone, and its IPv6 link with it
        except VppApiError as exc:
            if exc.retval not in (IP6_NOT_ENABLED, INVALID_SW_IF_INDEX):
                raise

    def dependencies(key: str, value: Any) -> Sequence[Dependency]:
        name = interface_of(key)
        if name is None:
            return ()
        return (interface_dependency(name),)

    def retrieve(correlate: list[tuple[str, Any, Any]]) -> list[tuple[str, Any, Any, Any]]:
        wanted = {key for key, _value, _meta in correlate}
        names = ctx.names_by_index  # refreshed: interfaces are retrieved first
        result = []
        for sw_if_index, ra in sorted(api.ra_states().items()):
            name = names.get(sw_if_index)
            if name is None:
                continue  # an interface kvmesh does not own
            key = f"{PREFIX}{name}"
            if key in wanted or not untouched(ra):
                result.append((key, ra, None, ValueOrigin.UNKNOWN))
        return result

    return [model_descriptor(
        DESCRIPTOR, check_ip6_nd, lambda key: interface_of(key) is not None,
        create=create,
        update=update,
        delete=delete,
        dependencies=dependencies,
        retrieve=retrieve,
        retrieve_dependencies=(INTERFACE_DESCRIPTOR,),
    )]


MODEL: ModelSpec[Context] = ModelSpec(
    "vpp/ip6-nd", "vpp/ip6-nd/<interface>", re.compile(r"vpp/ip6-nd/[^/]+"),
    VppIp6Nd, check_ip6_nd, descriptors,
    examples=(("vpp/ip6-nd/lan", {"managed": True, "max_interval": 60, "lifetime": 1800,
                                   "prefixes": [{"prefix": "2001:db8:1::/64",
                                                 "autoconfig": False}]}),),
)

"""`vpp/lcp/<vpp interface>`: a Linux-CP pair, the VPP interface's twin in Linux
(`lcp_itf_pair_add_del_v2`, read back by `lcp_itf_pair_get_v2`).

VPP makes a tap whose Linux end is `host_if_name` in network namespace `netns` (VPP's own when
empty), with the VPP interface's MAC and MTU: what the kernel routes there, VPP forwards. The
Linux southbound sees that link appear as an OBTAINED host link, so Linux values can use it -
e.g. `linux/interface/<host_if_name>` of type `existing` with addresses, or routes through it -
and wait (PENDING) until it exists: one desired state across both planes, ordered by the
scheduler. A pair in the node's own namespace (`netns` empty) says so (`provides`: the host link
`linux/interface/host/<host_if_name>`), so `kvmesh plan` does not take those Linux values for
ones that would wait for ever, and `kvmesh apply --wait` follows them until the link appears; a
pair in another namespace makes a link the node's Linux southbound does not see. Depends on the
VPP interface. Any change of the pair makes a new one (VPP has no update). A pair kvmesh did not
make is never deleted.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field

from scheduler import Descriptor, InvalidValueError, ValueOrigin
from southbound.linux.keys import host_key
from southbound.modelspec import ModelSpec
from southbound.validation import KEY_FIELD, StrictModel, validate
from southbound.vpp.context import INTERFACE_DESCRIPTOR, Context
from southbound.vpp.errors import (
    INVALID_SW_IF_INDEX,
    MissingInterfaceError,
    VppApiError,
)
from southbound.vpp.models import (
    LinuxIfName,
    interface_dependency,
    memoized,
    model_descriptor,
    name_problem,
)

DESCRIPTOR = "vpp-lcp"
KEY_RE = re.compile(r"vpp/lcp/([^/]+)")
HOST_TYPES = ("tap", "tun")
NETNS_MAX = 31  # string netns[32]


def lcp_key(interface: str) -> str:
    return f"vpp/lcp/{interface}"


class VppLcpPair(StrictModel):
    """`vpp/lcp/<vpp interface>`: the VPP interface's twin in Linux (Linux-CP)."""

    host_if_name: LinuxIfName = Field(description="the Linux interface VPP makes")
    netns: str = Field("", max_length=NETNS_MAX, pattern=r"^[^/\s]*$",
                       description="the named network namespace it is made in (empty: VPP's)")
    type: Literal["tap", "tun"] = Field("tap", description="tap (ethernet) or tun (L3 only)")


@memoized
def normalize_lcp(key: str, value: Any) -> dict[str, Any]:
    match = KEY_RE.fullmatch(key)
    problem = name_problem(match.group(1), "interface name") if match else "malformed key"
    model = validate(VppLcpPair, key, value, key_problems={KEY_FIELD: problem} if problem else {})
    assert match is not None
    return {"interface": match.group(1), **model.model_dump()}


class LcpDescriptor:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.api = ctx.api

    def descriptor(self) -> Descriptor:
        return model_descriptor(
            DESCRIPTOR, normalize_lcp, KEY_RE,
            depends_on=lambda v: (interface_dependency(v["interface"]),),
            create=self.create,
            update=self.update,
            delete=self.delete,
            retrieve=self.retrieve,
            retrieve_dependencies=(INTERFACE_DESCRIPTOR,),
        )

    def create(self, key: str, value: Any) -> None:
        v = normalize_lcp(key, value)
        self.api.lcp_pair_add(self.ctx.sw_if_index(v["interface"]), v["host_if_name"],
                              HOST_TYPES.index(v["type"]), v["netns"])

    def update(self, key: str, old: Any, new: Any, metadata: Any) -> None:
        self.delete(key, old, metadata)
        self.create(key, new)

    def delete(self, key: str, value: Any, metadata: Any) -> None:
        v = normalize_lcp(key, value)
        try:
            self.api.lcp_pair_delete(self.ctx.sw_if_index(v["interface"]))
        except MissingInterfaceError:
            return  # the interface is gone, and VPP removed its pair with it
        except VppApiError as exc:
            if exc.retval != INVALID_SW_IF_INDEX:
                raise

    def retrieve(self, correlate: list[tuple[str, Any, Any]]) -> list[tuple[str, Any, Any, Any]]:
        names = self.ctx.names_by_index  # current: interfaces are retrieved first
        result = []
        for phy, pair in self.api.lcp_pairs().items():
            interface = names.get(phy)
            if interface is None:
                continue  # paired with an interface kvmesh does not own
            value = {"host_if_name": pair.host_if_name, "netns": pair.netns,
                     "type": HOST_TYPES[pair.host_type]}
            result.append((lcp_key(interface), value, None, ValueOrigin.UNKNOWN))
        return result


def provides(key: str, value: Any) -> tuple[str, ...]:
    """The Linux link the pair makes, when the node's Linux southbound will see it: in VPP's
    own namespace, which is the node's (the Linux southbound reports it by this key)."""
    try:
        v = normalize_lcp(key, value)
    except InvalidValueError:
        return ()
    return () if v["netns"] else (host_key(v["host_if_name"]),)


def descriptors(ctx: Context) -> list[Descriptor]:
    return [LcpDescriptor(ctx).descriptor()]


MODEL: ModelSpec[Context] = ModelSpec(
    "vpp/lcp", "vpp/lcp/<vpp interface>", KEY_RE, VppLcpPair, normalize_lcp, descriptors,
    examples=(("vpp/lcp/uplink", {"host_if_name": "uplink", "netns": "dataplane"}),),
    provides=provides,
)

"""Handlers of lcp.api (state in `kvmesh.vppemu.lcp`)."""

from __future__ import annotations

from typing import Any

from kvmesh.vppemu.handlers import Details, HandlerContext, Result, handles
from kvmesh.vppemu.lcp import INVALID_INDEX


@handles("lcp_itf_pair_add_del_v2")
def lcp_itf_pair_add_del_v2(ctx: HandlerContext, msg: Any) -> Result:
    lcp = ctx.dataplane.lcp
    ctx.dataplane.interface(msg.sw_if_index)  # VALIDATE_SW_IF_INDEX_END
    if msg.is_add:
        host = lcp.add(msg.sw_if_index, msg.host_if_name, int(msg.host_if_type), msg.netns)
        return {"host_sw_if_index": host}
    lcp.delete(msg.sw_if_index)
    return {"host_sw_if_index": INVALID_INDEX}


@handles("lcp_itf_pair_get_v2")
def lcp_itf_pair_get_v2(ctx: HandlerContext, msg: Any) -> Result:
    """Every pair (or the phy's, for a given sw_if_index) in one go: the server ends the
    details with the reply, cursor ~0."""
    result: Details = []
    for phy, pair in sorted(ctx.dataplane.lcp.pairs.items()):
        if msg.sw_if_index not in (INVALID_INDEX, phy):
            continue
        result.append(("lcp_itf_pair_details", {
            "context": ctx.context, "phy_sw_if_index": phy,
            "host_sw_if_index": pair.host_sw_if_index, "vif_index": pair.vif_index,
            "host_if_name": pair.host_if_name, "host_if_type": pair.host_type,
            "netns": pair.netns}))
    return result

"""Handlers of span.api (state in `kvmesh.vppemu.span`)."""

from __future__ import annotations

from typing import Any

from kvmesh.vppemu.handlers import HandlerContext, Result, handles


@handles("sw_interface_span_enable_disable")
def sw_interface_span_enable_disable(ctx: HandlerContext, msg: Any) -> Result:
    ctx.dataplane.span.enable_disable(msg.sw_if_index_from, msg.sw_if_index_to, int(msg.state),
                                      bool(msg.is_l2))
    return {}


@handles("sw_interface_span_dump")
def sw_interface_span_dump(ctx: HandlerContext, msg: Any) -> Result:
    return [("sw_interface_span_details", {
        "context": ctx.context, "sw_if_index_from": src, "sw_if_index_to": dst, "state": state,
        "is_l2": bool(msg.is_l2)}) for src, dst, state in ctx.dataplane.span.dump(bool(msg.is_l2))]

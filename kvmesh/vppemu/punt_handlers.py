"""Handlers of punt.api's socket registrations and reasons (state in `kvmesh.vppemu.punt`).
`set_punt` is not kept: it answers as an unimplemented change."""

from __future__ import annotations

from typing import Any

from kvmesh.vppemu.errors import ApiError, Unanswered
from kvmesh.vppemu.handlers import HandlerContext, Result, handles
from kvmesh.vppemu.punt import EXCEPTION, IP_PROTO, L4, REASONS, SERVER_SOCKET, Punt, decode


def _decode(raw: Any) -> Punt:
    union = raw.punt
    return decode(int(raw.type), int(union.l4.af), int(union.l4.protocol), union.l4.port,
                  union.exception.id)


def _fields(punt: Punt) -> dict[str, Any]:
    if punt.type == L4:
        arm: dict[str, Any] = {"l4": {"af": punt.af, "protocol": punt.protocol,
                                      "port": punt.port}}
    elif punt.type == IP_PROTO:
        arm = {"ip_proto": {"af": punt.af, "protocol": punt.protocol}}
    else:
        arm = {"exception": {"id": punt.reason}}
    return {"type": punt.type, "punt": arm}


@handles("punt_socket_register")
def punt_socket_register(ctx: HandlerContext, msg: Any) -> Result:
    try:
        punt = _decode(msg.punt)
    except ApiError as exc:
        raise Unanswered(exc.reason) from exc
    ctx.dataplane.punt.register(punt, msg.header_version, msg.pathname)
    return {"pathname": SERVER_SOCKET}


@handles("punt_socket_deregister")
def punt_socket_deregister(ctx: HandlerContext, msg: Any) -> Result:
    ctx.dataplane.punt.deregister(_decode(msg.punt))
    return {}


@handles("punt_socket_dump")
def punt_socket_dump(ctx: HandlerContext, msg: Any) -> Result:
    punt_type = int(msg.type)
    if punt_type not in (L4, IP_PROTO, EXCEPTION):
        return []
    return [("punt_socket_details", {"context": ctx.context, "punt": _fields(punt),
                                     "pathname": path})
            for punt, path in ctx.dataplane.punt.of_type(punt_type)]


@handles("punt_reason_dump")
def punt_reason_dump(ctx: HandlerContext, msg: Any) -> Result:
    wanted = msg.reason.name
    return [("punt_reason_details", {"context": ctx.context,
                                     "reason": {"id": number, "name": name}})
            for number, name in enumerate(REASONS, start=1) if not wanted or name == wanted]

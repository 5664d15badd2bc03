"""`vpp/punt/exception/<reason>`: the packets VPP punts for an exception reason (by VPP's name
for it, e.g. `ipsec4-no-such-tunnel`), sent to an application's socket.

    {"socket": "/run/ike/punt.sock"}

The reason's number is VPP's (`punt_reason_dump`), looked up when the value is applied: a name
VPP does not have fails with the names it has (VPP's reasons come from its plugins: a retry
cannot help). `punt_socket_register` (a new socket re-points it in place),
`punt_socket_deregister`, read back by `punt_socket_dump`. Registrations VPP has that the desired
state does not name are kept OBTAINED (VPP knows no owner of them).
"""

from __future__ import annotations

import re
from typing import Any

from scheduler import Descriptor
from southbound.modelspec import ModelSpec
from southbound.validation import KEY_FIELD, validate
from southbound.vpp.context import Context
from southbound.vpp.models import memoized
from southbound.vpp.punt_api import (
    EXCEPTION,
    PuntApi,
    VppPuntSocket,
    exception_punt,
    punt_descriptor,
)

PREFIX = "vpp/punt/exception/"
DESCRIPTOR = "vpp-punt-exception"
REASON_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,62}")


class VppPuntException(VppPuntSocket):
    """`vpp/punt/exception/<reason>`: send the packets VPP punts for an exception reason (VPP's
    name for it, e.g. ipsec4-no-such-tunnel) to an application's unix socket."""


def reason_name(key: str) -> str | None:
    if not key.startswith(PREFIX) or "/" in key[len(PREFIX):]:
        return None
    return key[len(PREFIX):] or None


@memoized
def check_punt_exception(key: str, value: Any) -> dict[str, Any]:
    name = reason_name(key)
    problem = None
    if name is None:
        problem = "malformed key (vpp/punt/exception/<reason name>)"
    elif REASON_RE.fullmatch(name) is None:
        problem = f"reason {name!r}: a VPP punt reason name (letters, digits, _ . : -)"
    return validate(VppPuntException, key, value,
                    key_problems={KEY_FIELD: problem} if problem else {}).model_dump()


def _punt(api: PuntApi, key: str, for_create: bool) -> dict[str, Any] | None:
    name = str(reason_name(key))
    if for_create:
        return exception_punt(api.reason_id(name))  # an unknown name fails, naming VPP's
    reasons = api.reasons()  # on a delete, a reason VPP lacks (restarted without it): nothing
    return exception_punt(reasons[name]) if name in reasons else None


def _registered(api: PuntApi) -> list[tuple[str, str]]:
    registrations = api.registrations(EXCEPTION)
    names = {number: name for name, number in api.reasons().items()} if registrations else {}
    result = []
    for union, socket in registrations:
        name = names.get(int(union.exception.id))
        if name is not None and REASON_RE.fullmatch(name) is not None:  # else no key names it
            result.append((f"{PREFIX}{name}", socket))
    return result


def descriptors(ctx: Context) -> list[Descriptor]:
    return [punt_descriptor(ctx.api.conn, DESCRIPTOR, PREFIX, check_punt_exception, _punt,
                            _registered)]


MODEL: ModelSpec[Context] = ModelSpec(
    "vpp/punt/exception", "vpp/punt/exception/<reason>", re.compile(r"vpp/punt/exception/[^/]+"),
    VppPuntException, check_punt_exception, descriptors,
    examples=(("vpp/punt/exception/ipsec4-no-such-tunnel", {"socket": "/run/ike/punt.sock"}),),
)

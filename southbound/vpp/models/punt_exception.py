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
from collections.abc import Sequence
from typing import Any

from scheduler import Dependency, Descriptor, ValueOrigin
from southbound.modelspec import ModelSpec
from southbound.validation import KEY_FIELD, validate
from southbound.vpp.context import Context
from southbound.vpp.errors import is_retriable
from southbound.vpp.models import memoized, same_normalized
from southbound.vpp.punt_api import EXCEPTION, PuntApi, VppPuntSocket, exception_punt

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


def _validate(key: str, value: Any) -> None:
    check_punt_exception(key, value)


def descriptors(ctx: Context) -> list[Descriptor]:
    api = PuntApi(ctx.api.conn)

    def create(key: str, value: Any) -> None:
        reason = api.reason_id(str(reason_name(key)))
        api.register(exception_punt(reason), check_punt_exception(key, value)["socket"])

    def update(key: str, old: Any, new: Any, metadata: Any) -> None:
        create(key, new)  # VPP re-points a registration in place

    def delete(key: str, value: Any, metadata: Any) -> None:
        reasons = api.reasons()
        name = str(reason_name(key))
        if name in reasons:  # else VPP has no such reason (restarted without it): nothing to do
            api.deregister(exception_punt(reasons[name]))

    def dependencies(key: str, value: Any) -> Sequence[Dependency]:
        return ()

    def retrieve(correlate: list[tuple[str, Any, Any]]) -> list[tuple[str, Any, Any, Any]]:
        registrations = api.registrations(EXCEPTION)
        if not registrations:
            return []
        names = {number: name for name, number in api.reasons().items()}
        result = []
        for union, socket in registrations:
            name = names.get(int(union.exception.id))
            if name is None or REASON_RE.fullmatch(name) is None:
                continue  # no key can name it
            result.append((f"{PREFIX}{name}", {"socket": socket}, None, ValueOrigin.UNKNOWN))
        return result

    return [Descriptor(
        name=DESCRIPTOR,
        key_selector=lambda key: key.startswith(PREFIX),
        validate=_validate,
        create=create,
        update=update,
        delete=delete,
        dependencies=dependencies,
        retrieve=retrieve,
        value_comparator=lambda key, a, b: same_normalized(check_punt_exception, key, a, b),
        is_retriable_failure=is_retriable,
    )]


MODEL: ModelSpec[Context] = ModelSpec(
    "vpp/punt/exception", "vpp/punt/exception/<reason>", re.compile(r"vpp/punt/exception/[^/]+"),
    VppPuntException, check_punt_exception, descriptors,
    examples=(("vpp/punt/exception/ipsec4-no-such-tunnel", {"socket": "/run/ike/punt.sock"}),),
)

"""`vpp/span/<from>/<to>`: mirror the frames of one interface to another (SPAN).

    {"state": "both", "l2": false}    # rx, tx or both; at the device level or at L2

`sw_interface_span_enable_disable` with the state (VPP sets a mirror's state in place, so a new
state is an update; a change of `l2`, a different feature in VPP, re-creates it), disabled
(state 0) to delete; read back by `sw_interface_span_dump` at both levels. Depends on both
interfaces: VPP checks neither exists and keeps a mirror of a deleted interface, so kvmesh
removes the mirror before either of its interfaces. Mirrors VPP has between kvmesh's interfaces
that the desired state does not name are kept OBTAINED (VPP knows no owner of a mirror); those
with an interface kvmesh does not own cannot be named by a key and are left alone.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import Field

from scheduler import Dependency, Descriptor, InvalidValueError, ValueOrigin
from southbound.modelspec import ModelSpec
from southbound.validation import KEY_FIELD, StrictModel, validate
from southbound.vpp import keys
from southbound.vpp.context import INTERFACE_DESCRIPTOR, Context
from southbound.vpp.errors import (
    INVALID_SW_IF_INDEX,
    MissingInterfaceError,
    VppApiError,
)
from southbound.vpp.models import interface_dependency, memoized, model_descriptor, name_problem

PREFIX = "vpp/span/"
DESCRIPTOR = "vpp-span"
STATES = {"rx": 1, "tx": 2, "both": 3}  # span_state
DISABLED = 0


class VppSpan(StrictModel):
    """`vpp/span/<from>/<to>`: copy the frames received (`rx`), sent (`tx`) or both on
    interface `<from>` to interface `<to>`, at the device level or, with `l2`, at L2 (frames
    switched by a bridge domain or cross-connect)."""

    state: Literal["rx", "tx", "both"] = Field("both", description="which frames are mirrored")
    l2: bool = Field(False, description="mirror at L2 instead of the device level")


def span_ends(key: str) -> tuple[str, str] | None:
    """(from, to) of a SPAN key."""
    parts = keys.key_parts(key, PREFIX, 2)
    return (parts[0], parts[1]) if parts is not None else None


def span_key(src: str, dst: str) -> str:
    return f"{PREFIX}{src}/{dst}"


@memoized
def check_span(key: str, value: Any) -> dict[str, Any]:
    ends = span_ends(key)
    problem = "malformed key (vpp/span/<from interface>/<to interface>)" if ends is None else \
        name_problem(ends[0], "interface name") or name_problem(ends[1], "interface name")
    if problem is None and ends is not None and ends[0] == ends[1]:
        problem = "an interface cannot be mirrored to itself (VPP: INVALID_INTERFACE)"
    return validate(VppSpan, key, value,
                    key_problems={KEY_FIELD: problem} if problem else {}).model_dump()


def descriptors(ctx: Context) -> list[Descriptor]:
    conn = ctx.api.conn

    def mirror(key: str, state: int, l2: bool) -> None:
        src, dst = span_ends(key) or ("", "")
        conn.call("sw_interface_span_enable_disable", sw_if_index_from=ctx.sw_if_index(src),
                  sw_if_index_to=ctx.sw_if_index(dst), state=state, is_l2=l2)

    def create(key: str, value: Any) -> None:
        v = check_span(key, value)
        mirror(key, STATES[v["state"]], v["l2"])

    def update(key: str, old: Any, new: Any, metadata: Any) -> None:
        create(key, new)  # the same mirror: VPP sets its new state in place

    def recreate(key: str, old: Any, new: Any, metadata: Any) -> bool:
        try:
            return bool(check_span(key, old)["l2"] != check_span(key, new)["l2"])
        except InvalidValueError:
            return True

    def delete(key: str, value: Any, metadata: Any) -> None:
        try:
            mirror(key, DISABLED, check_span(key, value)["l2"])
        except MissingInterfaceError:
            return  # never made, or VPP restarted: nothing to disable
        except VppApiError as exc:
            if exc.retval != INVALID_SW_IF_INDEX:
                raise

    def dependencies(key: str, value: Any) -> Sequence[Dependency]:
        ends = span_ends(key)
        if ends is None:
            return ()
        return tuple(interface_dependency(name)
                     for name in ends)

    def retrieve(correlate: list[tuple[str, Any, Any]]) -> list[tuple[str, Any, Any, Any]]:
        desired_l2 = {}
        for key, value, _ in correlate:
            try:
                desired_l2[key] = check_span(key, value)["l2"]
            except InvalidValueError:
                continue
        names = ctx.names_by_index  # refreshed: interfaces are retrieved first
        found: dict[str, dict[str, Any]] = {}
        for l2 in (False, True):
            for d in conn.dump("sw_interface_span_dump", is_l2=l2):
                src, dst = names.get(d.sw_if_index_from), names.get(d.sw_if_index_to)
                state = next((n for n, s in STATES.items() if s == int(d.state)), None)
                if src is None or dst is None or state is None or src == dst:
                    continue
                key = span_key(src, dst)
                # One key, two VPP mirrors (device and L2): the one the desired state names.
                if key not in found or desired_l2.get(key) == l2:
                    found[key] = {"state": state, "l2": l2}
        return [(key, value, None, ValueOrigin.UNKNOWN) for key, value in found.items()]

    return [model_descriptor(
        DESCRIPTOR, check_span, lambda key: span_ends(key) is not None,
        create=create,
        update=update,
        update_with_recreate=recreate,
        delete=delete,
        dependencies=dependencies,
        retrieve=retrieve,
        retrieve_dependencies=(INTERFACE_DESCRIPTOR,),
    )]


MODEL: ModelSpec[Context] = ModelSpec(
    "vpp/span", "vpp/span/<from>/<to>", re.compile(r"vpp/span/[^/]+/[^/]+"), VppSpan,
    check_span, descriptors,
    examples=(("vpp/span/uplink/monitor", {"state": "both"}),
              ("vpp/span/bd-port/monitor", {"state": "rx", "l2": True})),
)

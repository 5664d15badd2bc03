"""`vpp/xconnect/<rx interface>`: an L2 cross-connect, `sw_interface_set_l2_xconnect`, read back
by `l2_xconnect_dump`.

Depends on both interfaces. Frames received on `receive_interface` are sent out of
`transmit_interface` (one direction: a two-way link is two values). An interface is in a bridge
domain or a cross-connect, never both: VPP would silently move it, so whichever comes second
fails with a retriable error naming the first, and a retry policy applies it once the first is
removed. A new `transmit_interface` is applied in place.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import Field, ValidationInfo, model_validator

from scheduler import Descriptor, ValueOrigin
from southbound.modelspec import ModelSpec
from southbound.validation import KEY_FIELD, FieldProblems, StrictModel, validate
from southbound.vpp import keys
from southbound.vpp.bridge_domain import claim_l2_mode, release_l2_mode
from southbound.vpp.context import INTERFACE_DESCRIPTOR, XCONNECT_DESCRIPTOR, Context
from southbound.vpp.errors import (
    INVALID_SW_IF_INDEX,
    MissingInterfaceError,
    VppApiError,
)
from southbound.vpp.models import (
    VppName,
    interface_dependency,
    memoized,
    model_descriptor,
    name_problem,
)

HOLDER = "a cross-connect"


class VppXconnect(StrictModel):
    """`vpp/xconnect/<rx interface>`: an L2 cross-connect from one interface to another.
    `receive_interface` may be left out (it is taken from the key)."""

    receive_interface: VppName | None = Field(
        None, description="the vpp/interface frames come in on (as in the key)")
    transmit_interface: VppName = Field(description="the vpp/interface they go out of")

    @model_validator(mode="after")
    def _agrees_with_key(self, info: ValidationInfo) -> VppXconnect:
        rx = (info.context or {}).get("rx")
        problems = {}
        if self.receive_interface is not None and self.receive_interface != rx:
            problems["receive_interface"] = f"{self.receive_interface} does not match the " \
                                            f"key's {rx!r}"
        if self.transmit_interface == rx:
            problems["transmit_interface"] = "an interface cannot be cross-connected to itself"
        if problems:
            raise FieldProblems(problems)
        return self


@memoized
def normalize_xconnect(key: str, value: Any) -> dict[str, Any]:
    rx = keys.xconnect_interface(key)
    problem = name_problem(rx, "interface name") if rx is not None else "malformed key"
    model = validate(VppXconnect, key, value,
                     key_problems={KEY_FIELD: problem} if problem else {}, context={"rx": rx})
    return {"receive_interface": rx, "transmit_interface": model.transmit_interface}


class XconnectDescriptor:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.api = ctx.api

    def descriptor(self) -> Descriptor:
        return model_descriptor(
            XCONNECT_DESCRIPTOR, normalize_xconnect,
            lambda key: keys.xconnect_interface(key) is not None,
            depends_on=lambda v: (interface_dependency(v["receive_interface"]),
                                  interface_dependency(v["transmit_interface"])),
            create=self.create,
            update=self.update,
            delete=self.delete,
            retrieve=self.retrieve,
            retrieve_dependencies=(INTERFACE_DESCRIPTOR,),
        )

    def create(self, key: str, value: Any) -> None:
        v = normalize_xconnect(key, value)
        rx = v["receive_interface"]
        claim_l2_mode(self.ctx, rx, HOLDER)
        self.api.set_xconnect(self.ctx.sw_if_index(rx),
                              self.ctx.sw_if_index(v["transmit_interface"]), True)
        self.ctx.l2_users[rx] = HOLDER

    def update(self, key: str, old: Any, new: Any, metadata: Any) -> None:
        self.create(key, new)  # VPP re-targets the cross-connect in place

    def delete(self, key: str, value: Any, metadata: Any) -> None:
        rx = normalize_xconnect(key, value)["receive_interface"]
        release_l2_mode(self.ctx, rx, HOLDER)
        try:
            self.api.set_xconnect(self.ctx.sw_if_index(rx), 0, False)
        except MissingInterfaceError:
            return
        except VppApiError as exc:
            if exc.retval != INVALID_SW_IF_INDEX:
                raise

    def retrieve(self, correlate: list[tuple[str, Any, Any]]) -> list[tuple[str, Any, Any, Any]]:
        # Interfaces are retrieved first (retrieve_dependencies), which refreshes this map.
        names = self.ctx.names_by_index
        users = self.ctx.l2_users
        for interface in [i for i, holder in users.items() if holder == HOLDER]:
            del users[interface]
        result = []
        for rx_index, tx_index in self.api.xconnects().items():
            rx, tx = names.get(rx_index), names.get(tx_index)
            if rx is None or tx is None:
                continue  # with an interface kvmesh does not own
            users[rx] = HOLDER
            value = {"receive_interface": rx, "transmit_interface": tx}
            result.append((keys.xconnect_key(rx), value, None, ValueOrigin.UNKNOWN))
        return result


def descriptors(ctx: Context) -> list[Descriptor]:
    return [XconnectDescriptor(ctx).descriptor()]


MODEL: ModelSpec[Context] = ModelSpec(
    "vpp/xconnect", "vpp/xconnect/<rx interface>", re.compile(r"vpp/xconnect/[^/]+"),
    VppXconnect, normalize_xconnect, descriptors,
    examples=(("vpp/xconnect/memif1", {"transmit_interface": "vxlan1"}),),
)

"""`vpp/bd/<bd name>/fib/<mac>`: a static L2 FIB entry, `l2fib_add_del`, read back by
`l2_fib_table_dump`.

Depends on its bridge domain and on its interface being a member of it (the domain's derived
member value `vpp/bd/<bd>/interface/<iface>`): VPP refuses an entry for an interface that is not
in L2 mode. A changed interface or flag is applied in place (VPP overwrites the entry). The key
is not the bridge domain's (`vpp/bd/<name>` takes exactly one name).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from pydantic import Field, ValidationInfo, model_validator

from scheduler import Dependency, Descriptor, ValueOrigin
from southbound.modelspec import ModelSpec
from southbound.validation import KEY_FIELD, FieldProblems, StrictModel, validate
from southbound.vpp import keys
from southbound.vpp.context import (
    BD_DESCRIPTOR,
    INTERFACE_DESCRIPTOR,
    L2FIB_DESCRIPTOR,
    Context,
)
from southbound.vpp.errors import NO_SUCH_ENTRY, MissingInterfaceError, VppApiError
from southbound.vpp.models import Mac, VppName, _mac, memoized, model_descriptor, name_problem


class VppL2Fib(StrictModel):
    """`vpp/bd/<bd name>/fib/<mac>`: a static L2 FIB entry of a bridge domain. `bridge_domain`
    and `mac` may be left out (they are taken from the key); if given they must match it."""

    bridge_domain: VppName | None = Field(None, description="a vpp/bd name (as in the key)")
    mac: Mac | None = Field(None, description="the MAC address (as in the key)")
    interface: VppName = Field(description="the member interface frames to `mac` go out of")
    static: bool = Field(True, description="never aged out or moved by learning")
    bvi: bool = Field(False, description="the MAC of the bridge's BVI")

    @model_validator(mode="after")
    def _agrees_with_key(self, info: ValidationInfo) -> VppL2Fib:
        context = info.context or {}
        problems = {}
        if self.bridge_domain is not None and self.bridge_domain != context.get("bd"):
            problems["bridge_domain"] = f"{self.bridge_domain} does not match the key's " \
                                        f"{context.get('bd')!r}"
        if self.mac is not None and self.mac != context.get("mac"):
            problems["mac"] = f"{self.mac} does not match the key's {context.get('mac')!r}"
        if problems:
            raise FieldProblems(problems)
        return self


@memoized
def normalize_l2fib(key: str, value: Any) -> dict[str, Any]:
    parsed = keys.parse_l2fib_key(key)
    bd, mac = parsed if parsed is not None else ("", "")
    problems: dict[str, str] = {}
    if parsed is None:
        problems[KEY_FIELD] = "malformed key (vpp/bd/<bd name>/fib/<mac>)"
    elif (problem := name_problem(bd, "bridge domain name")) is not None:
        problems[KEY_FIELD] = problem
    else:
        try:
            mac = _mac(mac)
        except ValueError as exc:
            problems[KEY_FIELD] = f"the key's mac {exc}"
    model = validate(VppL2Fib, key, value, key_problems=problems,
                     context={"bd": bd, "mac": mac})
    return {"bridge_domain": bd, "mac": mac, "interface": model.interface,
            "static": model.static, "bvi": model.bvi}


def _dependencies(v: dict[str, Any]) -> Sequence[Dependency]:
    bd, interface = v["bridge_domain"], v["interface"]
    return (
        Dependency(label=f"bridge domain {bd}", key=keys.bd_key(bd)),
        Dependency(label=f"interface {interface} in bridge domain {bd}",
                   key=keys.bd_member_key(bd, interface)),
    )


class L2FibDescriptor:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.api = ctx.api

    def descriptor(self) -> Descriptor:
        return model_descriptor(
            L2FIB_DESCRIPTOR, normalize_l2fib,
            lambda key: keys.parse_l2fib_key(key) is not None,
            depends_on=_dependencies,
            create=self.create,
            update=self.update,
            delete=self.delete,
            retrieve=self.retrieve,
            retrieve_dependencies=(INTERFACE_DESCRIPTOR, BD_DESCRIPTOR),
        )

    def _bd_id(self, bd: str) -> int:
        bd_id = self.ctx.bd_ids.get(bd)
        if bd_id is None:
            raise MissingInterfaceError(f"bridge domain {bd!r} is not configured (no bd_id)")
        return bd_id

    def create(self, key: str, value: Any) -> None:
        v = normalize_l2fib(key, value)
        self.api.l2fib_add_del(self._bd_id(v["bridge_domain"]), v["mac"],
                               self.ctx.sw_if_index(v["interface"]), v["static"], v["bvi"], True)

    def update(self, key: str, old: Any, new: Any, metadata: Any) -> None:
        self.create(key, new)  # VPP overwrites the entry

    def delete(self, key: str, value: Any, metadata: Any) -> None:
        v = normalize_l2fib(key, value)
        try:
            self.api.l2fib_add_del(self._bd_id(v["bridge_domain"]), v["mac"],
                                   self.ctx.sw_if_index(v["interface"]), v["static"], v["bvi"],
                                   False)
        except MissingInterfaceError:
            return  # the domain or interface is gone, the entry with it
        except VppApiError as exc:
            if exc.retval != NO_SUCH_ENTRY:
                raise

    def retrieve(self, correlate: list[tuple[str, Any, Any]]) -> list[tuple[str, Any, Any, Any]]:
        # Interfaces and bridge domains are retrieved first, which refreshes these maps.
        names = self.ctx.names_by_index
        domains = {bd_id: name for name, bd_id in self.ctx.bd_ids.items()}
        result = []
        for entry in self.api.l2fib_entries():
            bd, interface = domains.get(entry.bd_id), names.get(entry.sw_if_index)
            if bd is None or interface is None or not entry.static:
                continue  # learnt, or in a domain or on an interface kvmesh does not own
            mac = entry.mac.lower()
            value = {"bridge_domain": bd, "mac": mac, "interface": interface,
                     "static": entry.static, "bvi": entry.bvi}
            result.append((keys.l2fib_key(bd, mac), value, None, ValueOrigin.UNKNOWN))
        return result


def descriptors(ctx: Context) -> list[Descriptor]:
    return [L2FibDescriptor(ctx).descriptor()]


MODEL: ModelSpec[Context] = ModelSpec(
    "vpp/l2fib", "vpp/bd/<bd name>/fib/<mac>", re.compile(r"vpp/bd/[^/]+/fib/[^/]+"),
    VppL2Fib, normalize_l2fib, descriptors,
    examples=(("vpp/bd/bd1/fib/02:00:00:00:00:0a", {"interface": "lo1"}),),
)

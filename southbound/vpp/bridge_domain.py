"""`vpp/bd/<name>` bridge domains, and their derived members `vpp/bd/<name>/interface/<iface>`.

The domain has no dependencies: it exists as soon as it is wanted. Each member is a derived value
with its own descriptor that depends on its interface, so a missing interface only leaves its own
binding PENDING. Bridge domains carry the tag `kvmesh:<name>`; Retrieve reports those only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from scheduler import Dependency, Descriptor, InvalidValueError, ValueOrigin
from southbound.vpp import keys
from southbound.vpp.binapi import BD_FLAG_BITS
from southbound.vpp.context import (
    BD_DESCRIPTOR,
    BD_MEMBER_DESCRIPTOR,
    INTERFACE_DESCRIPTOR,
    Context,
    owned_name,
    owner_tag,
)
from southbound.vpp.errors import (
    INVALID_SW_IF_INDEX,
    NO_SUCH_ENTRY,
    L2ModeConflictError,
    MissingInterfaceError,
    VppApiError,
    is_retriable,
)
from southbound.vpp.models import interface_dependency, model_descriptor, normalize_bd

FLAG_FIELDS = tuple(BD_FLAG_BITS)


def _name(key: str) -> str:
    name = keys.bd_name(key)
    assert name is not None, key
    return name


class BridgeDomainDescriptor:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.api = ctx.api

    def descriptor(self) -> Descriptor:
        return model_descriptor(
            BD_DESCRIPTOR, normalize_bd, lambda key: keys.bd_name(key) is not None,
            # Members are derived values: only the domain's own fields are compared.
            agree=lambda x, y: all(x[f] == y[f] for f in ("bd_id", *FLAG_FIELDS)),
            key_label=_name,
            create=self.create,
            delete=self.delete,
            update=self.update,
            update_with_recreate=self.update_with_recreate,
            retrieve=self.retrieve,
            derived_values=self.derived_values,
            retrieve_dependencies=(INTERFACE_DESCRIPTOR,),
        )

    def create(self, key: str, value: Any) -> None:
        v = normalize_bd(key, value)
        self.api.bd_add(v["bd_id"], v, owner_tag(_name(key)))
        self.ctx.bd_ids[_name(key)] = v["bd_id"]

    def delete(self, key: str, value: Any, metadata: Any) -> None:
        v = normalize_bd(key, value)
        self.ctx.bd_ids.pop(_name(key), None)
        try:
            self.api.bd_delete(v["bd_id"])
        except VppApiError as exc:
            if exc.retval != NO_SUCH_ENTRY:
                raise

    def update(self, key: str, old: Any, new: Any, metadata: Any) -> None:
        o, n = normalize_bd(key, old), normalize_bd(key, new)
        self.api.bd_set_flags(n["bd_id"], n, o)

    def update_with_recreate(self, key: str, old: Any, new: Any, metadata: Any) -> bool:
        return bool(normalize_bd(key, old)["bd_id"] != normalize_bd(key, new)["bd_id"])

    def derived_values(self, key: str, value: Any) -> list[tuple[str, Any]]:
        try:
            v = normalize_bd(key, value)
        except InvalidValueError:
            return []
        name = _name(key)
        return [
            (
                keys.bd_member_key(name, m["name"]),
                {"bd": name, "bd_id": v["bd_id"], "interface": m["name"], "bvi": m["bvi"]},
            )
            for m in v["interfaces"]
        ]

    def retrieve(self, correlate: list[tuple[str, Any, Any]]) -> list[tuple[str, Any, Any, Any]]:
        domains = [(owned_name(d.tag), d) for d in self.api.bridge_domains()]
        owned = [(name, d) for name, d in domains if name]
        self.ctx.bd_ids = {str(name): d.bd_id for name, d in owned}
        users = self.ctx.l2_users
        for interface in [i for i, holder in users.items() if holder.startswith("bridge")]:
            del users[interface]
        if not owned:
            return []
        # Interfaces are retrieved first (retrieve_dependencies), which refreshes this map.
        names = self.ctx.names_by_index
        result = []
        for name, d in owned:
            members = [
                {"name": names[idx], "bvi": idx == d.bvi} for idx in d.members if idx in names
            ]
            for member in members:
                users[str(member["name"])] = f"bridge domain {name}"
            value = {
                "bd_id": d.bd_id,
                **d.flags,
                "interfaces": sorted(members, key=lambda m: str(m["name"])),
            }
            result.append((keys.bd_key(str(name)), value, None, ValueOrigin.FROM_NB))
        return result


def bd_member_descriptor(ctx: Context) -> Descriptor:
    def create(key: str, value: Any) -> None:
        holder = f"bridge domain {value['bd']}"
        claim_l2_mode(ctx, value["interface"], holder)
        idx = ctx.sw_if_index(value["interface"])
        ctx.api.bd_member(idx, value["bd_id"], value["bvi"], True)
        ctx.l2_users[value["interface"]] = holder

    def delete(key: str, value: Any, metadata: Any) -> None:
        release_l2_mode(ctx, value["interface"], f"bridge domain {value['bd']}")
        try:
            idx = ctx.sw_if_index(value["interface"])
            ctx.api.bd_member(idx, value["bd_id"], value["bvi"], False)
        except MissingInterfaceError:
            return
        except VppApiError as exc:
            if exc.retval != INVALID_SW_IF_INDEX:
                raise

    def dependencies(key: str, value: Any) -> Sequence[Dependency]:
        return (
            interface_dependency(value["interface"]),
        )

    return Descriptor(
        name=BD_MEMBER_DESCRIPTOR,
        key_selector=lambda key: keys.parse_bd_member_key(key) is not None,
        create=create,
        delete=delete,
        dependencies=dependencies,
        is_retriable_failure=is_retriable,
    )


def claim_l2_mode(ctx: Context, interface: str, holder: str) -> None:
    """An interface is in a bridge domain or a cross-connect, never both: VPP would silently
    move it from one to the other, so the second one waits (a retriable failure naming the
    first) until the first is removed."""
    current = ctx.l2_users.get(interface)
    if current is not None and current != holder:
        raise L2ModeConflictError(
            f"interface {interface} is already in {current}: an interface is in a bridge "
            f"domain or a cross-connect, never both"
        )


def release_l2_mode(ctx: Context, interface: str, holder: str) -> None:
    if ctx.l2_users.get(interface) == holder:
        del ctx.l2_users[interface]

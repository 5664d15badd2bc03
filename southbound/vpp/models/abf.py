"""`vpp/abf/<policy id>`: ACL-based forwarding: traffic an ACL permits, forwarded on paths.

    {"acl": "web",
     "paths": [{"next_hop": "10.9.0.1", "interface": "uplink", "weight": 1, "preference": 0}],
     "interfaces": [{"interface": "lan", "priority": 10, "family": "ipv4"}]}

- The policy (id 0..4294967295, VPP's u32) is `abf_policy_add_del`: VPP adds the given paths to
  the policy of that id (creating it) and removes given paths (the last one removes it). Its
  ACL is `vpp/acl/<acl>` - kvmesh's by name, `vpp-<index>` for one kvmesh did not create -,
  its VPP index found by name in `acl_dump` when the policy is made. A path is a next hop,
  through `interface` or looked up in `table`; `0.0.0.0` / `::` with an interface is the
  interface itself (an attached path). Weight and preference are not part of what VPP calls a
  path, so a path's new weight is a remove and an add.
- Changing the paths updates the policy in place: new paths are added before old ones are
  removed, so it always has one. When no path stays the same (every path new in weight or
  preference only) or the ACL changes, it is re-created (its attachments removed first and put
  back after).
- Each interface is a derived value `vpp/abf/<id>/interface/<interface>`
  (`abf_itf_attach_add_del`): changing attachments never touches the policy. VPP keys an
  attachment by policy and interface, so a policy is attached to an interface once, in one
  family; `priority` orders the policies of an interface (lowest first).
- Depends on the ACL, on each path's interface and table (> 0), and each attachment on its
  interface. While attached, the ACL is held by VPP (`ACL_IN_USE_BY_LOOKUP_CONTEXT`): the
  scheduler removes the attachments first.
- Read back by `abf_policy_dump` and `abf_itf_attach_dump`. Policies the desired state does not
  name are reported with an unknown origin: OBTAINED, never changed or deleted.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, model_validator

from scheduler import Dependency, Descriptor, InvalidValueError, ValueOrigin
from southbound.modelspec import ModelSpec
from southbound.validation import KEY_FIELD, FieldProblems, StrictModel, validate
from southbound.vpp import keys
from southbound.vpp.abf_api import AbfApi
from southbound.vpp.binapi import ANY_INDEX, fib_path
from southbound.vpp.context import INTERFACE_DESCRIPTOR, Context
from southbound.vpp.errors import (
    INVALID_VALUE,
    NO_SUCH_ENTRY,
    MissingInterfaceError,
    VppApiError,
    VppError,
    is_retriable,
)
from southbound.vpp.fib_paths import MAX_PATHS, FibPathSpec, distinct_paths, place
from southbound.vpp.models import (
    MAX_U32,
    VppName,
    _ip,
    interface_dependency,
    memoized,
    model_descriptor,
)
from southbound.vpp.models.acl import AclApi, acl_key
from southbound.vpp.models.vrf import vrf_dependencies

PREFIX = "vpp/abf/"
DESCRIPTOR = "vpp-abf"
ATTACH_DESCRIPTOR = "vpp-abf-interface"
FAMILIES = ("ipv4", "ipv6")


class MissingAclError(VppError):
    """A policy's ACL is not in VPP (yet): retried."""

    retriable = True


@dataclass(frozen=True)
class PathPlan:
    """How a policy's paths change in place: paths at new places, old paths to remove (gone, or
    with another weight or preference), those put back with their new ones, and the rest."""

    fresh: list[dict[str, Any]]
    stale: list[dict[str, Any]]
    reweighted: list[dict[str, Any]]
    kept: list[dict[str, Any]]


class AbfPath(FibPathSpec):
    """A forwarding path: a next hop, through an interface or looked up in a table. ABF has no
    family of its own to give a path without a next hop: the interface itself is next hop
    0.0.0.0 or ::."""

    next_hop: Annotated[str, AfterValidator(_ip)] = Field(
        description="next hop address (0.0.0.0 or :: with an interface: the interface itself)")

    @model_validator(mode="after")
    def _attached(self) -> AbfPath:
        if self.interface is None and ipaddress.ip_address(self.next_hop).is_unspecified:
            raise FieldProblems({"next_hop": "an unspecified next hop needs an interface"})
        return self


class AbfAttachment(StrictModel):
    """The policy applied to traffic of one family entering an interface."""

    interface: VppName = Field(description="a vpp/interface")
    priority: int = Field(0, ge=0, le=MAX_U32,
                          description="order among the interface's policies (lowest first)")
    family: Literal["ipv4", "ipv6"] = Field("ipv4", description="the traffic it applies to")


def _attachments(attachments: list[AbfAttachment]) -> list[AbfAttachment]:
    names = [a.interface for a in attachments]
    problems = {f"[{i}].interface": f"{name!r} is listed twice (VPP attaches a policy to an "
                f"interface once, in one family)" for i, name in enumerate(names)
                if name in names[:i]}
    if problems:
        raise FieldProblems(problems)
    return sorted(attachments, key=lambda a: a.interface)


class VppAbfPolicy(StrictModel):
    """`vpp/abf/<policy id>`: forward what the ACL `acl` permits on `paths`, for traffic
    entering the `interfaces` (id 0..4294967295, VPP's u32)."""

    acl: VppName = Field(description="the vpp/acl name (vpp-<index>: one kvmesh did not create)")
    paths: Annotated[list[AbfPath], AfterValidator(distinct_paths)] = Field(
        min_length=1, max_length=MAX_PATHS, description=f"1..{MAX_PATHS} forwarding paths")
    interfaces: Annotated[list[AbfAttachment], AfterValidator(_attachments)] = Field(
        default_factory=list, description="where it applies (each interface once)")


def policy_id(key: str) -> int | None:
    return keys.u32_key_tail(key, PREFIX)


def policy_key(number: int) -> str:
    return f"{PREFIX}{number}"


def attachment_key(number: int, iface: str) -> str:
    return f"{PREFIX}{number}/interface/{iface}"


def _attachment_parts(key: str) -> tuple[int, str] | None:
    if not key.startswith(PREFIX):
        return None
    parts = key[len(PREFIX):].split("/")
    if len(parts) != 3 or parts[1] != "interface" or not parts[2]:
        return None
    number = policy_id(PREFIX + parts[0])
    return None if number is None else (number, parts[2])


def canonical(acl: str, paths: list[dict[str, Any]],
              interfaces: list[dict[str, Any]]) -> dict[str, Any]:
    return {"acl": acl, "paths": sorted(paths, key=place),
            "interfaces": sorted(interfaces, key=lambda a: a["interface"])}


@memoized
def check_abf(key: str, value: Any) -> dict[str, Any]:
    problems = {} if policy_id(key) is not None else \
        {KEY_FIELD: f"malformed key (vpp/abf/<policy id 0..{MAX_U32}>)"}
    v = validate(VppAbfPolicy, key, value, key_problems=problems).model_dump()
    return canonical(v["acl"], v["paths"], v["interfaces"])


def _dependencies(v: dict[str, Any]) -> Sequence[Dependency]:
    deps = [Dependency(label=f"ACL {v['acl']}", key=acl_key(v["acl"]))]
    for path in v["paths"]:
        if path["interface"] is not None:
            deps.append(interface_dependency(path["interface"]))
        else:
            deps += vrf_dependencies(path["table"], (":" in path["next_hop"],))
    return list({d.key: d for d in deps}.values())


class AbfState:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.api = AbfApi(ctx.api.conn)
        self.acls = AclApi(ctx.api.conn)

    # -------------------------------------------------------------- the policy
    def policy_descriptor(self) -> Descriptor:
        return model_descriptor(
            DESCRIPTOR, check_abf, lambda key: policy_id(key) is not None,
            depends_on=_dependencies,
            # The ACL and paths: the attachments are the derived values' business.
            agree=lambda x, y: bool((x["acl"], x["paths"]) == (y["acl"], y["paths"])),
            create=self.create,
            update=self.update,
            update_with_recreate=self.recreate,
            delete=self.delete,
            retrieve=self.retrieve,
            derived_values=self.derived_values,
            retrieve_dependencies=(INTERFACE_DESCRIPTOR,),
        )

    def _wire(self, paths: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [fib_path(p["next_hop"], ANY_INDEX if p["interface"] is None
                         else self.ctx.sw_if_index(p["interface"]),
                         p["table"], p["weight"], p["preference"]) for p in paths]

    def _acl_index(self, name: str) -> int:
        index = self.acls.indexes_by_name().get(name)
        if index is None:
            raise MissingAclError(f"ACL {name!r} is not in VPP")
        return index

    def _change(self, key: str, acl_index: int, paths: list[dict[str, Any]],
                is_add: bool) -> None:
        if paths:
            self.api.add_del_paths(int(policy_id(key) or 0), acl_index, self._wire(paths), is_add)

    def create(self, key: str, value: Any) -> None:
        v = check_abf(key, value)
        self._change(key, self._acl_index(v["acl"]), v["paths"], True)

    @staticmethod
    def _plan(old: dict[str, Any], new: dict[str, Any]) -> PathPlan:
        before = {place(p): p for p in old["paths"]}
        after = {place(p): p for p in new["paths"]}
        return PathPlan(
            fresh=[p for where, p in after.items() if where not in before],
            stale=[p for where, p in before.items() if after.get(where) != p],
            reweighted=[p for where, p in after.items() if before.get(where) not in (None, p)],
            kept=[p for where, p in after.items() if before.get(where) == p])

    def recreate(self, key: str, old: Any, new: Any, metadata: Any) -> bool:
        """Re-created for another ACL (VPP refuses it), or when updating in place would leave
        the policy without a path (which would remove it) on the way."""
        try:
            a, b = check_abf(key, old), check_abf(key, new)
        except InvalidValueError:
            return True
        plan = self._plan(a, b)
        return a["acl"] != b["acl"] or not (plan.kept or plan.fresh)

    def update(self, key: str, old: Any, new: Any, metadata: Any) -> None:
        """New paths first, then the old ones go, then those with a new weight or preference
        come back (VPP does not tell paths apart by those)."""
        a, b = check_abf(key, old), check_abf(key, new)
        plan = self._plan(a, b)
        acl_index = self._acl_index(b["acl"])
        self._change(key, acl_index, plan.fresh, True)
        self._change(key, acl_index, plan.stale, False)
        self._change(key, acl_index, plan.reweighted, True)

    def delete(self, key: str, value: Any, metadata: Any) -> None:
        v = check_abf(key, value)
        try:
            self._change(key, 0, v["paths"], False)  # the ACL is not looked at
        except MissingInterfaceError:
            return  # kvmesh no longer knows a path's interface (it goes after the policy)
        except VppApiError as exc:
            if exc.retval != INVALID_VALUE:  # no such policy
                raise

    @staticmethod
    def derived_values(key: str, value: Any) -> list[tuple[str, Any]]:
        try:
            v = check_abf(key, value)
        except InvalidValueError:
            return []
        number = int(policy_id(key) or 0)
        return [(attachment_key(number, a["interface"]), {"policy": number, **a})
                for a in v["interfaces"]]

    def retrieve(self, correlate: list[tuple[str, Any, Any]]) -> list[tuple[str, Any, Any, Any]]:
        names = self.ctx.names_by_index  # refreshed: interfaces are retrieved first

        def name(sw_if_index: int) -> str:
            return names.get(sw_if_index, f"sw_if_index-{sw_if_index}")

        policies = self.api.policies()
        if not policies:
            return []  # (nor an ACL dump)
        acl_names = {index: acl for acl, index in self.acls.indexes_by_name().items()}
        attached: dict[int, list[dict[str, Any]]] = {}
        for a in self.api.attachments():
            attached.setdefault(a.policy_id, []).append({
                "interface": name(a.sw_if_index), "priority": a.priority,
                "family": FAMILIES[a.is_ipv6]})
        result = []
        for found in policies:
            paths = [{"next_hop": p.next_hop,
                      "interface": None if p.sw_if_index == ANY_INDEX else name(p.sw_if_index),
                      "table": p.table_id if p.sw_if_index == ANY_INDEX else 0,
                      "weight": p.weight, "preference": p.preference} for p in found.paths]
            value = canonical(acl_names.get(found.acl_index, f"vpp-{found.acl_index}"), paths,
                              attached.get(found.policy_id, []))
            result.append((policy_key(found.policy_id), value, None, ValueOrigin.UNKNOWN))
        return result

    # -------------------------------------------------------------- attachments
    def attach_descriptor(self) -> Descriptor:
        return Descriptor(
            name=ATTACH_DESCRIPTOR,
            key_selector=lambda key: _attachment_parts(key) is not None,
            create=self.attach,
            delete=self.detach,
            dependencies=lambda key, value: (Dependency(
                label=f"interface {value['interface']}",
                key=keys.interface_key(value["interface"])),),
            is_retriable_failure=is_retriable,
        )

    def _attach(self, value: dict[str, Any], is_add: bool) -> None:
        self.api.attach(value["policy"], self.ctx.sw_if_index(value["interface"]),
                        value["priority"], value["family"] == "ipv6", is_add)

    def attach(self, key: str, value: Any) -> None:
        self._attach(value, True)

    def detach(self, key: str, value: Any, metadata: Any) -> None:
        try:
            self._attach(value, False)
        except MissingInterfaceError:
            return  # kvmesh no longer knows the interface's index
        except VppApiError as exc:
            if exc.retval != NO_SUCH_ENTRY:
                raise


def descriptors(ctx: Context) -> list[Descriptor]:
    state = AbfState(ctx)
    return [state.policy_descriptor(), state.attach_descriptor()]


MODEL: ModelSpec[Context] = ModelSpec(
    "vpp/abf", "vpp/abf/<policy id>", re.compile(r"vpp/abf/[^/]+"), VppAbfPolicy, check_abf,
    descriptors,
    examples=(("vpp/abf/10", {
        "acl": "web", "paths": [{"next_hop": "10.9.0.1", "interface": "uplink"}],
        "interfaces": [{"interface": "lan", "priority": 10}]}),),
)

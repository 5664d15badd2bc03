"""`vpp/acl/<name>`: an ACL of VPP's acl plugin, and the interfaces it applies to.

    {"rules": [{"action": "permit", "src": "10.0.0.0/8", "dst": "0.0.0.0/0", "protocol": "tcp",
                "src_ports": [0, 65535], "dst_ports": [80, 80]}],
     "interfaces": {"ingress": ["uplink"], "egress": []}}

- The ACL is `acl_add_replace` with index ~0 (create) and tag `kvmesh:<name>`; an update of its
  rules is `acl_add_replace` with its index (replaced in place: the index stays); `acl_del`
  removes it. ACLs without a kvmesh tag are reported OBTAINED as `vpp/acl/vpp-<index>` and never
  changed or deleted (names `vpp-<digits>` are therefore reserved).
- Each (direction, interface) is a derived value `vpp/acl/<name>/interface/<ingress|egress>/
  <iface>` depending on `vpp/interface/<iface>`. An interface's lists are set whole by
  `acl_interface_set_acl_list`, so creating or deleting one binding recomputes the interface's
  lists from every kvmesh ACL bound to it, in name order, followed by ACLs kvmesh does not own
  that VPP had on the interface (kept as found).
- Read back by `acl_dump` + `acl_interface_list_dump` (two calls, whatever the number of ACLs).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import AfterValidator, Field, model_validator

from scheduler import Dependency, Descriptor, InvalidValueError, ValueOrigin
from southbound.modelspec import ModelSpec
from southbound.validation import KEY_FIELD, FieldProblems, StrictModel, validate
from southbound.vpp import keys
from southbound.vpp.context import INTERFACE_DESCRIPTOR, Context, owned_name, owner_tag
from southbound.vpp.errors import (
    INVALID_SW_IF_INDEX,
    NO_SUCH_ENTRY,
    MissingInterfaceError,
    VppApiError,
    is_retriable,
)
from southbound.vpp.models import VppName, listed_once, memoized, model_descriptor, name_problem

if TYPE_CHECKING:
    from southbound.vpp.connection import VppConnection

PREFIX = "vpp/acl/"
ACL_DESCRIPTOR = "vpp-acl"
BINDING_DESCRIPTOR = "vpp-acl-interface"
ANY_INDEX = 0xFFFFFFFF
DIRECTIONS = ("ingress", "egress")
ACTIONS = {"deny": 0, "permit": 1, "reflect": 2}
PROTOCOLS = {"icmp": 1, "tcp": 6, "udp": 17, "icmpv6": 58}
FOREIGN = re.compile(r"vpp-[0-9]+")  # the keys of ACLs kvmesh did not make


def _network(text: str) -> str:
    try:
        return str(ipaddress.ip_network(text))
    except ValueError as exc:
        raise ValueError(f"must be a network like 10.0.0.0/8 (no host bits): {exc}") from None


def _range(ports: list[int]) -> list[int]:
    if ports[0] > ports[1]:
        raise ValueError(f"must be [low, high] with low <= high, got {ports}")
    return ports


def _protocol(protocol: int | str) -> int | str:
    if isinstance(protocol, str) and protocol not in PROTOCOLS:
        raise ValueError(f"must be 0..255 or one of {', '.join(PROTOCOLS)}, got {protocol!r}")
    if isinstance(protocol, int) and not 0 <= protocol <= 255:
        raise ValueError(f"must be 0..255 or one of {', '.join(PROTOCOLS)}, got {protocol}")
    return protocol


Port = Annotated[int, Field(ge=0, le=65535)]
PortRange = Annotated[list[Port], Field(min_length=2, max_length=2), AfterValidator(_range)]
Network = Annotated[str, AfterValidator(_network), Field(
    description="a network, e.g. 10.0.0.0/8 or ::/0")]


class AclRuleSpec(StrictModel):
    """One rule; the first rule that matches decides."""

    action: Literal["deny", "permit", "reflect"] = Field(
        description="deny, permit, or permit and let the replies in (reflect)")
    src: Network | None = Field(None, description="source network (unset: any of the family)")
    dst: Network | None = Field(None, description="destination network (unset: any)")
    protocol: Annotated[int | str, AfterValidator(_protocol)] = Field(
        0, description="IP protocol: 0..255 (0: any) or tcp, udp, icmp, icmpv6")
    src_ports: PortRange = Field(default_factory=lambda: [0, 65535],
                                 description="[low, high] source ports (ICMP: types)")
    dst_ports: PortRange = Field(default_factory=lambda: [0, 65535],
                                 description="[low, high] destination ports (ICMP: codes)")

    @model_validator(mode="after")
    def _one_family(self) -> AclRuleSpec:
        if self.src is not None and self.dst is not None and \
                ipaddress.ip_network(self.src).version != ipaddress.ip_network(self.dst).version:
            raise FieldProblems({"dst": f"{self.dst} is not of the family of src {self.src}"})
        return self


Names = Annotated[list[VppName], AfterValidator(listed_once)]


class AclInterfaces(StrictModel):
    """The interfaces the ACL applies to, by direction."""

    ingress: Names = Field(default_factory=list, description="vpp/interface names (input)")
    egress: Names = Field(default_factory=list, description="vpp/interface names (output)")


class VppAcl(StrictModel):
    """`vpp/acl/<name>`: an ACL (acl plugin), its rules in order and the interfaces it applies
    to. Several ACLs on one interface apply in name order."""

    rules: list[AclRuleSpec] = Field(default_factory=list, description="the rules, in order")
    interfaces: AclInterfaces = Field(default_factory=AclInterfaces,
                                      description="where the ACL applies")


def acl_name(key: str) -> str | None:
    if not key.startswith(PREFIX) or key.count("/") != 2:
        return None
    return key[len(PREFIX):] or None


def acl_key(name: str) -> str:
    return f"{PREFIX}{name}"


def binding_key(name: str, direction: str, iface: str) -> str:
    return f"{PREFIX}{name}/interface/{direction}/{iface}"


def parse_binding_key(key: str) -> tuple[str, str, str] | None:
    """(acl, direction, interface) of `vpp/acl/<name>/interface/<direction>/<iface>`."""
    if not key.startswith(PREFIX):
        return None
    parts = key[len(PREFIX):].split("/")
    if len(parts) != 4 or parts[1] != "interface" or parts[2] not in DIRECTIONS or \
            not parts[0] or not parts[3]:
        return None
    return parts[0], parts[2], parts[3]


def _canonical_rule(rule: AclRuleSpec) -> dict[str, Any]:
    family = next((ipaddress.ip_network(n).version for n in (rule.src, rule.dst) if n), 4)
    anywhere = "0.0.0.0/0" if family == 4 else "::/0"
    protocol = PROTOCOLS[rule.protocol] if isinstance(rule.protocol, str) else rule.protocol
    return {"action": rule.action, "src": rule.src or anywhere, "dst": rule.dst or anywhere,
            "protocol": protocol, "src_ports": list(rule.src_ports),
            "dst_ports": list(rule.dst_ports)}


@memoized
def check_acl(key: str, value: Any) -> dict[str, Any]:
    """The canonical ACL: every rule with both networks and a protocol number, interfaces
    sorted."""
    name = acl_name(key)
    problem = name_problem(name, "ACL name") if name is not None else "malformed key"
    if problem is None and FOREIGN.fullmatch(str(name)):
        problem = "names vpp-<number> are reserved for ACLs kvmesh did not create"
    model = validate(VppAcl, key, value, key_problems={KEY_FIELD: problem} if problem else {})
    return {"rules": [_canonical_rule(r) for r in model.rules],
            "interfaces": model.interfaces.model_dump()}


# ---------------------------------------------------------------------- VPP calls
@dataclass(frozen=True)
class AclDetails:
    index: int
    tag: str
    rules: list[dict[str, Any]]


def model_name(acl: AclDetails) -> str:
    """An ACL's name in the model: kvmesh's from its tag, `vpp-<index>` for the others."""
    return owned_name(acl.tag) or f"vpp-{acl.index}"


class AclApi:
    def __init__(self, conn: VppConnection) -> None:
        self.conn = conn

    def add_replace(self, index: int, tag: str, rules: list[dict[str, Any]]) -> int:
        wire = [{
            "is_permit": ACTIONS[r["action"]], "src_prefix": r["src"], "dst_prefix": r["dst"],
            "proto": r["protocol"],
            "srcport_or_icmptype_first": r["src_ports"][0],
            "srcport_or_icmptype_last": r["src_ports"][1],
            "dstport_or_icmpcode_first": r["dst_ports"][0],
            "dstport_or_icmpcode_last": r["dst_ports"][1],
            "tcp_flags_mask": 0, "tcp_flags_value": 0,
        } for r in rules]
        reply = self.conn.call("acl_add_replace", acl_index=index, tag=tag, count=len(wire),
                               r=wire)
        return int(reply.acl_index)

    def delete(self, index: int) -> None:
        self.conn.call("acl_del", acl_index=index)

    def set_lists(self, sw_if_index: int, ingress: list[int], egress: list[int]) -> None:
        acls = [*ingress, *egress]
        self.conn.call("acl_interface_set_acl_list", sw_if_index=sw_if_index, count=len(acls),
                       n_input=len(ingress), acls=acls)

    def acls(self) -> list[AclDetails]:
        actions = {number: action for action, number in ACTIONS.items()}
        return [AclDetails(d.acl_index, d.tag, [{
            "action": actions.get(int(r.is_permit), "deny"),
            "src": str(r.src_prefix), "dst": str(r.dst_prefix), "protocol": int(r.proto),
            "src_ports": [r.srcport_or_icmptype_first, r.srcport_or_icmptype_last],
            "dst_ports": [r.dstport_or_icmpcode_first, r.dstport_or_icmpcode_last],
        } for r in d.r]) for d in self.conn.dump("acl_dump", acl_index=ANY_INDEX)]

    def indexes_by_name(self) -> dict[str, int]:
        """Every ACL VPP has, by its model name (what `vpp/acl/<name>` and its users say)."""
        return {model_name(d): d.index for d in self.acls()}

    def interface_lists(self) -> dict[int, tuple[list[int], list[int]]]:
        return {d.sw_if_index: (list(d.acls[:d.n_input]), list(d.acls[d.n_input:]))
                for d in self.conn.dump("acl_interface_list_dump", sw_if_index=ANY_INDEX)}


# ---------------------------------------------------------------------- descriptors
@dataclass(frozen=True)
class AclMeta:
    """Metadata of a configured ACL (the `vpp-acl` metadata map, by name)."""

    acl_index: int


@dataclass
class AclState:
    """What the two descriptors share: ACL indexes by name, and for every interface the kvmesh
    ACLs bound to it and the ACLs of others VPP had on it (re-learnt from VPP by Retrieve)."""

    ctx: Context
    api: AclApi
    indexes: dict[str, int] = field(default_factory=dict)
    bound: dict[str, dict[str, set[str]]] = field(default_factory=dict)  # iface -> dir -> ACLs
    foreign: dict[str, tuple[list[int], list[int]]] = field(default_factory=dict)

    # -------------------------------------------------------------- the ACL
    def acl_descriptor(self) -> Descriptor:
        return model_descriptor(
            ACL_DESCRIPTOR, check_acl, lambda key: acl_name(key) is not None,
            # Only the rules: where the ACL applies is the derived values' business.
            agree=lambda x, y: bool(x["rules"] == y["rules"]),
            key_label=lambda key: str(acl_name(key)),
            create=self.create,
            update=self.update,
            delete=self.delete,
            retrieve=self.retrieve,
            derived_values=self.derived_values,
            with_metadata=True,
            retrieve_dependencies=(INTERFACE_DESCRIPTOR,),
        )

    def create(self, key: str, value: Any) -> AclMeta:
        name = str(acl_name(key))
        index = self.api.add_replace(ANY_INDEX, owner_tag(name), check_acl(key, value)["rules"])
        self.indexes[name] = index
        return AclMeta(index)

    def update(self, key: str, old: Any, new: Any, metadata: Any) -> AclMeta:
        name = str(acl_name(key))
        index = metadata.acl_index if metadata is not None else self.indexes[name]
        self.api.add_replace(index, owner_tag(name), check_acl(key, new)["rules"])
        self.indexes[name] = index
        return AclMeta(index)

    def delete(self, key: str, value: Any, metadata: Any) -> None:
        name = str(acl_name(key))
        index = metadata.acl_index if metadata is not None else self.indexes.get(name)
        if index is not None:
            try:
                self.api.delete(index)
            except VppApiError as exc:
                if exc.retval != NO_SUCH_ENTRY:
                    raise
        self.indexes.pop(name, None)

    def derived_values(self, key: str, value: Any) -> list[tuple[str, Any]]:
        try:
            interfaces = check_acl(key, value)["interfaces"]
        except InvalidValueError:
            return []
        name = str(acl_name(key))
        return [(binding_key(name, direction, iface),
                 {"acl": name, "direction": direction, "interface": iface})
                for direction in DIRECTIONS for iface in interfaces[direction]]

    def retrieve(self, correlate: list[tuple[str, Any, Any]]) -> list[tuple[str, Any, Any, Any]]:
        acls = self.api.acls()
        lists = self.api.interface_lists()
        owned = {d.index: name for d in acls if (name := owned_name(d.tag)) is not None}
        self.indexes = {name: index for index, name in owned.items()}
        names = self.ctx.names_by_index  # refreshed: interfaces are retrieved first
        applied: dict[str, dict[str, list[str]]] = {name: {d: [] for d in DIRECTIONS}
                                                    for name in owned.values()}
        self.bound, self.foreign = {}, {}
        for sw_if_index, (ingress, egress) in lists.items():
            iface = names.get(sw_if_index)
            if iface is None:
                continue
            others: tuple[list[int], list[int]] = ([], [])
            for direction, indexes, kept in zip(DIRECTIONS, (ingress, egress), others,
                                                strict=True):
                for index in indexes:
                    if index in owned:
                        applied[owned[index]][direction].append(iface)
                        self.bound.setdefault(iface, {}).setdefault(direction, set()).add(
                            owned[index])
                    else:
                        kept.append(index)
            if others != ([], []):
                self.foreign[iface] = others
        result: list[tuple[str, Any, Any, Any]] = []
        for d in acls:
            name = owned.get(d.index)
            if name is None:
                value = {"rules": d.rules, "interfaces": {"ingress": [], "egress": []}}
                result.append((acl_key(model_name(d)), value, AclMeta(d.index),
                               ValueOrigin.FROM_SB))
                continue
            value = {"rules": d.rules, "interfaces": {
                direction: sorted(applied[name][direction]) for direction in DIRECTIONS}}
            result.append((acl_key(name), value, AclMeta(d.index), ValueOrigin.FROM_NB))
        return result

    # -------------------------------------------------------------- bindings
    def binding_descriptor(self) -> Descriptor:
        return Descriptor(
            name=BINDING_DESCRIPTOR,
            key_selector=lambda key: parse_binding_key(key) is not None,
            create=self.bind,
            delete=self.unbind,
            dependencies=self.binding_dependencies,
            is_retriable_failure=is_retriable,
        )

    def bind(self, key: str, value: Any) -> None:
        acl, direction, iface = value["acl"], value["direction"], value["interface"]
        self.bound.setdefault(iface, {}).setdefault(direction, set()).add(acl)
        self._push(iface)

    def unbind(self, key: str, value: Any, metadata: Any) -> None:
        acl, direction, iface = value["acl"], value["direction"], value["interface"]
        self.bound.get(iface, {}).get(direction, set()).discard(acl)
        try:
            self._push(iface)
        except MissingInterfaceError:
            return  # the interface is gone, and its lists with it
        except VppApiError as exc:
            if exc.retval != INVALID_SW_IF_INDEX:
                raise

    def binding_dependencies(self, key: str, value: Any) -> Sequence[Dependency]:
        iface = value["interface"]
        return (Dependency(label=f"interface {iface}", key=keys.interface_key(iface)),)

    def _push(self, iface: str) -> None:
        """One acl_interface_set_acl_list with every ACL that applies to the interface."""
        sw_if_index = self.ctx.sw_if_index(iface)
        bound = self.bound.get(iface, {})
        foreign = self.foreign.get(iface, ([], []))
        lists = [[self.indexes[acl] for acl in sorted(bound.get(direction, ()))
                  if acl in self.indexes] + kept
                 for direction, kept in zip(DIRECTIONS, foreign, strict=True)]
        self.api.set_lists(sw_if_index, lists[0], lists[1])


def descriptors(ctx: Context) -> list[Descriptor]:
    state = AclState(ctx, AclApi(ctx.api.conn))
    return [state.acl_descriptor(), state.binding_descriptor()]


MODEL: ModelSpec[Context] = ModelSpec(
    "vpp/acl", "vpp/acl/<name>", re.compile(r"vpp/acl/[^/]+"), VppAcl, check_acl, descriptors,
    examples=(("vpp/acl/web", {
        "rules": [{"action": "permit", "dst": "10.0.0.0/24", "protocol": "tcp",
                   "dst_ports": [80, 80]},
                  {"action": "deny"}],
        "interfaces": {"ingress": ["uplink"]}}),),
)

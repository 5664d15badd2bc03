"""``linux/rule/<ipv4|ipv6>/<priority>``: policy routing rules (``ip rule``).

Ownership: kvmesh adds every rule with its protocol number (FRA_PROTOCOL = the plugin's route
protocol, ``Ownership.route_proto``; ``ip rule show proto 107``). Retrieve reports only rules
carrying it, and delete matches every attribute of the rule *and* the protocol, so rules of the
kernel (the defaults at priorities 0, 32766 and 32767, which keys cannot name) and of anyone
else are never touched. One kvmesh rule per family and priority: the key is the identity.

The kernel has no in-place change of a rule: any change of a value re-creates it (delete, then
add). ``iif``/``oif`` make the rule depend on those links (kvmesh interfaces or host links):
the kernel would accept a name with no link, but the rule would match nothing until it exists.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field, ValidationInfo, model_validator

from scheduler import Dependency, Descriptor, ValueOrigin
from southbound.linux import keys
from southbound.linux.addr import parse_cidr
from southbound.linux.context import PluginContext
from southbound.linux.errors import InvalidValueError, is_retriable_failure
from southbound.linux.interface import link_dependency
from southbound.linux.memo import ParseCache
from southbound.linux.models import U32_MAX, InterfaceName, Table
from southbound.linux.records import Rule
from southbound.modelspec import ModelSpec
from southbound.validation import KEY_FIELD, FieldProblems, StrictModel, validate

NAME = "linux-rule"
PREFIX = "linux/rule/"
SHAPE = "linux/rule/<ipv4|ipv6>/<priority>"
FAMILIES: dict[str, int] = {"ipv4": socket.AF_INET, "ipv6": socket.AF_INET6}
FAMILY_NAMES = {number: name for name, number in FAMILIES.items()}
# FR_ACT_* of linux/fib_rules.h
ACTIONS = {"lookup": 1, "blackhole": 6, "unreachable": 7, "prohibit": 8}
ACTION_NAMES = {number: name for name, number in ACTIONS.items()}
KERNEL_PRIORITIES = (0, 32766, 32767)  # the kernel's default rules: never kvmesh's
ALL_MARK_BITS = U32_MAX
Action = Literal["lookup", "blackhole", "unreachable", "prohibit"]


class LinuxRule(StrictModel):
    """``linux/rule/<ipv4|ipv6>/<priority>``: a policy routing rule kvmesh owns. ``from``/``to``
    unset match any source/destination; ``fwmark`` matches under ``fwmask`` (default all bits);
    ``table`` (default main) is looked up with action ``lookup`` and not allowed with the
    others. Every change re-creates the rule (the kernel cannot change one in place)."""

    priority: int | None = Field(None, ge=1, le=U32_MAX, description="as in the key")
    family: Literal["ipv4", "ipv6"] | None = Field(None, description="as in the key")
    from_: str | None = Field(None, alias="from", description="source network (unset: any)")
    to: str | None = Field(None, description="destination network (unset: any)")
    iif: InterfaceName | None = Field(None, description="incoming link (unset: any)")
    oif: InterfaceName | None = Field(None, description="outgoing link (unset: any)")
    fwmark: int | None = Field(None, ge=0, le=U32_MAX, description="firewall mark to match")
    fwmask: int | None = Field(None, ge=0, le=U32_MAX,
                               description="bits of fwmark compared (default all)")
    table: Table | None = Field(None, description="table looked up (action lookup; default "
                                "main)")
    action: Action = Field("lookup", description="lookup a table, or drop the packet as "
                           "blackhole, unreachable or prohibit")

    @model_validator(mode="after")
    def _consistent(self, info: ValidationInfo) -> LinuxRule:
        context = info.context or {}
        problems: dict[str, str] = {}
        for field in ("priority", "family"):
            expected, given = context.get(field), getattr(self, field)
            if expected is not None and given is not None and given != expected:
                problems[field] = f"must match the key ({expected})"
        version = {"ipv4": 4, "ipv6": 6}.get(context.get("family") or "")
        for field, given in (("from", self.from_), ("to", self.to)):
            if given is None:
                continue
            try:
                cidr = parse_cidr(given)
            except ValueError:
                problems[field] = f"must be a network in CIDR notation, got {given!r}"
                continue
            if version is not None and cidr.version != version:
                problems[field] = f"must be an IPv{version} network like the key's family"
            elif not cidr.host_bits_zero:
                problems[field] = f"must have host bits zero, got {given!r}"
        if self.fwmask is not None and self.fwmark is None:
            problems["fwmask"] = "needs fwmark"
        if self.action != "lookup" and self.table is not None:
            problems["table"] = f"not allowed with action {self.action!r}"
        if problems:
            raise FieldProblems(problems)
        return self


@dataclass(frozen=True, slots=True)
class RuleSpec:
    family: str
    priority: int
    src: str | None
    dst: str | None
    iif: str | None
    oif: str | None
    fwmark: int | None
    fwmask: int | None
    table: int | None
    action: str

    def to_value(self) -> dict[str, Any]:
        return {"priority": self.priority, "family": self.family, "from": self.src,
                "to": self.dst, "iif": self.iif, "oif": self.oif, "fwmark": self.fwmark,
                "fwmask": self.fwmask, "table": self.table, "action": self.action}

    def record(self, proto: int) -> Rule:
        return Rule(family=FAMILIES[self.family], priority=self.priority, src=self.src,
                    dst=self.dst, iif=self.iif, oif=self.oif, fwmark=self.fwmark,
                    fwmask=self.fwmask, table=self.table or 0, action=ACTIONS[self.action],
                    proto=proto)


def rule_key(family: str, priority: int) -> str:
    return f"{PREFIX}{family}/{priority}"


def parse_rule_key(key: str) -> tuple[str, str] | None:
    """(family, priority) as written in a rule key, or None."""
    if not key.startswith(PREFIX):
        return None
    parts = key[len(PREFIX):].split("/")
    if len(parts) != 2 or not all(parts):
        return None
    return parts[0], parts[1]


def _key_problem(family: str, priority: str) -> str | None:
    if family not in FAMILIES:
        return f"family must be ipv4 or ipv6, got {family!r}"
    if not priority.isascii() or not priority.isdigit() or str(int(priority)) != priority:
        return f"priority must be a decimal integer, got {priority!r}"
    number = int(priority)
    if number in KERNEL_PRIORITIES:
        return f"priority {number} is the kernel's default rule: kvmesh never touches it"
    if not 1 <= number <= U32_MAX:
        return f"priority must be 1..{U32_MAX}"
    return None


def parse_rule(key: str, value: object) -> RuleSpec:
    """Validate a rule value against its key; raise ``InvalidValueError`` naming every bad
    field."""
    parsed = parse_rule_key(key)
    if parsed is None:
        raise InvalidValueError(key, {KEY_FIELD: f"must be '{SHAPE}'"})
    family, priority = parsed
    problem = _key_problem(family, priority)
    model = validate(LinuxRule, key, value,
                     key_problems={KEY_FIELD: problem} if problem else None,
                     context={"family": family, "priority": int(priority)},
                     error=InvalidValueError)
    table: int | None = None
    if model.action == "lookup":
        raw = model.table if model.table is not None else "main"
        table = keys.TABLE_NAMES[raw] if isinstance(raw, str) else raw
    fwmask = None
    if model.fwmark is not None:
        fwmask = model.fwmask if model.fwmask is not None else ALL_MARK_BITS
    return RuleSpec(
        family=family, priority=int(priority),
        # Checked by the model's validator: canonical form only.
        src=parse_cidr(model.from_).text if model.from_ is not None else None,
        dst=parse_cidr(model.to).text if model.to is not None else None,
        iif=model.iif, oif=model.oif, fwmark=model.fwmark, fwmask=fwmask, table=table,
        action=model.action)


def observed_rule(rule: Rule) -> RuleSpec | None:
    """The spec of a rule read from the kernel (None for an action the model has not)."""
    action = ACTION_NAMES.get(rule.action)
    family = FAMILY_NAMES.get(rule.family)
    if action is None or family is None:
        return None
    return RuleSpec(family=family, priority=rule.priority, src=rule.src, dst=rule.dst,
                    iif=rule.iif, oif=rule.oif, fwmark=rule.fwmark, fwmask=rule.fwmask,
                    table=rule.table if action == "lookup" else None, action=action)


class RuleDescriptor:
    name = NAME

    def __init__(self, context: PluginContext) -> None:
        self.ctx = context
        self.specs: ParseCache[RuleSpec] = ParseCache(parse_rule)

    @staticmethod
    def key_selector(key: str) -> bool:
        return key.startswith(PREFIX)

    def dependencies(self, key: str, value: Any) -> list[Dependency]:
        spec = self.specs.try_get(key, value)
        if spec is None:
            return []
        return [link_dependency(f"{role} {name}", name)
                for role, name in (("incoming interface", spec.iif),
                                   ("outgoing interface", spec.oif)) if name is not None]

    def create(self, key: str, value: Any) -> None:
        spec = self.specs.get(key, value)
        self.ctx.client.add_rule(spec.record(self.ctx.ownership.route_proto), f"add rule {key}")

    def delete(self, key: str, value: Any, metadata: Any) -> None:
        spec = self.specs.try_get(key, value)
        if spec is not None:
            self.ctx.client.delete_rule(spec.record(self.ctx.ownership.route_proto),
                                        f"delete rule {key}")

    def retrieve(self, correlate: Sequence[tuple[str, Any, Any]]
                 ) -> list[tuple[str, Any, Any, ValueOrigin]]:
        result = []
        seen: set[str] = set()
        for rule in self.ctx.client.dump_rules(proto=self.ctx.ownership.route_proto):
            spec = observed_rule(rule)
            if spec is None or spec.priority in KERNEL_PRIORITIES:
                continue
            key = rule_key(spec.family, spec.priority)
            if key in seen:
                continue  # a second kvmesh rule at one priority: the model holds one
            seen.add(key)
            value = spec.to_value()
            self.specs.put(key, value, spec)  # spares the scheduler's calls a re-parse
            result.append((key, value, None, ValueOrigin.FROM_NB))
        return result


def descriptors(context: PluginContext) -> list[Descriptor]:
    rules = RuleDescriptor(context)
    # No update: every change re-creates the rule.
    return [Descriptor(
        name=rules.name, key_selector=rules.key_selector, validate=rules.specs.validate,
        create=rules.create, delete=rules.delete, retrieve=rules.retrieve,
        dependencies=rules.dependencies, value_comparator=rules.specs.equivalent,
        is_retriable_failure=is_retriable_failure,
    )]


MODEL: ModelSpec[PluginContext] = ModelSpec(
    "linux/rule", SHAPE, re.compile(r"linux/rule/[^/]+/[^/]+"), LinuxRule, parse_rule,
    descriptors,
    examples=(
        ("linux/rule/ipv4/1000", {"from": "10.1.0.0/16", "table": 100}),
        ("linux/rule/ipv6/1100", {"to": "fd00:66::/64", "action": "unreachable"}),
        ("linux/rule/ipv4/1200", {"fwmark": 1, "fwmask": 255, "iif": "veth0", "table": 200}),
    ),
)

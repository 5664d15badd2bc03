"""The nftables model: ``linux/nftables/<family>/<table>``, one table applied as a whole.

The value is nftables' own JSON (what ``nft -j list table`` prints inside ``{"nftables": [...]}``):
``chains``, ``sets`` and ``rules`` are the bodies of ``{"chain": {...}}``, ``{"set": {...}}`` and
``{"rule": {...}}`` objects; ``family`` and ``table`` are implied by the key (they may be repeated
and must then agree). pydantic checks the structure; the expressions are nft's to check.

* Apply: the whole table is replaced in ONE nftables transaction (``nft -j -f -``): nobody ever
  sees it half-written or missing (``nft_table.replace_transaction``).
* Ownership: the table carries kvmesh's marker (``nft_table.MARKER_CHAIN``). Tables without it
  are OBTAINED ``linux/nftables/host/<family>/<table>`` values, never changed or deleted; a
  declared table that already exists without the marker is refused (retriable, like a foreign
  link of the same name).
* Drift: the marker records the digest of the desired value and, right after the apply (deferred,
  so the apply costs one nft run), the digest of the table as the kernel lists it. Retrieve
  reports the desired value while both still match, else the table as listed: the scheduler then
  re-applies it (downstream resync) or deletes it (no longer desired).
* Delete removes that table only, and only while it carries the marker.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, ValidationInfo, WithJsonSchema, model_validator

from scheduler import Dependency, Descriptor, ValueOrigin
from scheduler.gcpause import GcPause
from southbound.linux.context import PluginContext
from southbound.linux.errors import InvalidValueError, OwnershipError, is_retriable_failure
from southbound.linux.interface import link_dependency
from southbound.linux.memo import ParseCache
from southbound.linux.models import InterfaceName
from southbound.linux.nft import Nft, NftError, SerialRunner, is_absent
from southbound.linux.nft_table import (
    FAMILIES,
    MARKER_CHAIN,
    TableSpec,
    baseline_digest,
    baseline_transaction,
    delete_transaction,
    find_marker,
    group_tables,
    readback_value,
    replace_transaction,
    table_spec,
)
from southbound.modelspec import ModelSpec
from southbound.validation import KEY_FIELD, FieldProblems, StrictModel, validate

log = logging.getLogger(__name__)

NAME = "linux-nftables"
PREFIX = "linux/nftables/"
HOST_PREFIX = "linux/nftables/host/"
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,254}$")
I32 = 2**31
GC_PAUSE_RULES = 200

Family = Literal["ip", "ip6", "inet", "arp", "bridge", "netdev"]
NftName = Annotated[str, Field(
    pattern=_NAME_RE.pattern, min_length=1, max_length=255,
    description="an nftables name: a letter or '_', then letters, digits, '_', '-', '.'")]


def _expressions(items: list[Any]) -> list[Any]:
    # A plain check instead of a pydantic dict per expression: a big table has thousands.
    if not items:
        raise ValueError("must have at least one expression")
    for index, item in enumerate(items):
        if not isinstance(item, dict) or len(item) != 1 or not isinstance(next(iter(item)), str):
            raise ValueError(f"expression {index} must be a JSON object with exactly one key "
                             f"(e.g. {{\"accept\": null}}), got {item!r}"[:200])
    return items


Expressions = Annotated[list[Any], AfterValidator(_expressions), WithJsonSchema({
    "type": "array", "minItems": 1, "items": {"type": "object", "minProperties": 1,
                                              "maxProperties": 1}})]


def table_key(family: str, name: str) -> str:
    return f"{PREFIX}{family}/{name}"


def host_table_key(family: str, name: str) -> str:
    return f"{HOST_PREFIX}{family}/{name}"


def parse_table_key(key: str) -> tuple[str, str] | None:
    """(family, table) of an NB table key (any spelling, checked by validation), or None."""
    if not key.startswith(PREFIX) or key.startswith(HOST_PREFIX):
        return None
    parts = key[len(PREFIX):].split("/")
    return (parts[0], parts[1]) if len(parts) == 2 else None


class _InTable(StrictModel):
    family: Family | None = Field(None, description="as in the key (implied when absent)")
    table: NftName | None = Field(None, description="as in the key (implied when absent)")


class NftChain(_InTable):
    """A chain: the body of an nft JSON ``{"chain": {...}}`` object. A base chain has ``type``,
    ``hook`` and ``prio`` (all three); ``policy`` and ``dev`` only go with a base chain."""

    name: NftName = Field(description="chain name")
    type: Literal["filter", "nat", "route"] | None = Field(None, description="base chain type")
    hook: Literal["prerouting", "input", "forward", "output", "postrouting", "ingress",
                  "egress"] | None = Field(None, description="base chain hook")
    prio: int | None = Field(None, ge=-I32, le=I32 - 1,
                             description="base chain priority (a number, e.g. 0 or 100)")
    policy: Literal["accept", "drop"] | None = Field(None, description="base chain policy")
    dev: InterfaceName | list[InterfaceName] | None = Field(
        None, description="device(s) of a netdev ingress/egress chain (the table waits for "
                          "them)")

    @model_validator(mode="after")
    def _base_chain(self) -> NftChain:
        problems: dict[str, str] = {}
        base = [self.type is not None, self.hook is not None, self.prio is not None]
        if any(base) and not all(base):
            missing = [name for name, given in zip(("type", "hook", "prio"), base, strict=True)
                       if not given]
            problems[missing[0]] = "a base chain needs type, hook and prio"
        if not any(base):
            for name in ("policy", "dev"):
                if getattr(self, name) is not None:
                    problems[name] = "only allowed on a base chain (with type, hook, prio)"
        if self.name == MARKER_CHAIN:
            problems["name"] = f"'{MARKER_CHAIN}' is reserved (kvmesh's ownership marker)"
        if problems:
            raise FieldProblems(problems)
        return self


class NftSet(_InTable):
    """A named set: the body of an nft JSON ``{"set": {...}}`` object."""

    name: NftName = Field(description="set name")
    type: str | list[str] = Field(description="element type, e.g. ipv4_addr or "
                                               "[\"ipv4_addr\", \"inet_service\"]")
    policy: Literal["performance", "memory"] | None = Field(None, description="set policy")
    flags: list[Literal["constant", "interval", "timeout", "dynamic"]] | None = Field(
        None, description="set flags")
    elem: list[Any] | None = Field(None, description="elements, in nft JSON")
    timeout: int | None = Field(None, ge=0, description="element timeout (seconds)")
    gc_interval: int | None = Field(None, alias="gc-interval", ge=0,
                                    description="garbage collection interval (seconds)")
    size: int | None = Field(None, ge=1, le=2**32 - 1, description="maximum elements")


class NftRule(_InTable):
    """A rule: the body of an nft JSON ``{"rule": {...}}`` object; rules of a chain are applied
    in list order."""

    chain: NftName = Field(description="the chain (declared in chains)")
    expr: Expressions = Field(description="the rule's expressions, each one nftables JSON "
                                          "expression such as {\"accept\": null} (checked by "
                                          "nft)")
    comment: str | None = Field(None, max_length=128, description="rule comment")


class NftTable(StrictModel):
    """``linux/nftables/<family>/<table>``: one nftables table kvmesh owns, in nftables' own
    JSON (``nft -j``), replaced as a whole in one nftables transaction. Tables kvmesh did not
    make are reported as OBTAINED ``linux/nftables/host/<family>/<table>`` and never touched."""

    family: Family | None = Field(None, description="address family (as in the key)")
    name: NftName | None = Field(None, description="table name (as in the key)")
    chains: list[NftChain] = Field(default_factory=list, description="chains")
    sets: list[NftSet] = Field(default_factory=list, description="named sets")
    rules: list[NftRule] = Field(default_factory=list, description="rules, in order per chain")

    @model_validator(mode="after")
    def _agrees(self, info: ValidationInfo) -> NftTable:
        context = info.context or {}
        family, table = context.get("family"), context.get("table")
        problems: dict[str, str] = {}
        if family is not None and self.family not in (None, family):
            problems["family"] = f"must match the key ({family})"
        if table is not None and self.name not in (None, table):
            problems["name"] = f"must match the key ({table})"
        for section in ("chains", "sets", "rules"):
            for index, item in enumerate(getattr(self, section)):
                if item.family not in (None, family) and family is not None:
                    problems[f"{section}[{index}].family"] = f"must match the key ({family})"
                if item.table not in (None, table) and table is not None:
                    problems[f"{section}[{index}].table"] = f"must match the key ({table})"
        chains = _unique_names("chains", self.chains, problems)
        _unique_names("sets", self.sets, problems)
        for index, rule in enumerate(self.rules):
            if rule.chain not in chains:
                problems[f"rules[{index}].chain"] = f"no chain {rule.chain!r} in chains"
        if problems:
            raise FieldProblems(problems)
        return self


def _unique_names(section: str, items: Sequence[NftChain | NftSet],
                  problems: dict[str, str]) -> set[str]:
    seen: set[str] = set()
    for index, item in enumerate(items):
        if item.name in seen:
            problems[f"{section}[{index}].name"] = f"{item.name!r} is declared twice"
        seen.add(item.name)
    return seen


def parse_table(key: str, value: object) -> TableSpec:
    """Validate a table value (``NftTable``) against its key; raise ``InvalidValueError``
    listing every bad field."""
    parsed = parse_table_key(key)
    family = table = problem = None
    if parsed is None:
        problem = "must be 'linux/nftables/<family>/<table>'"
    elif parsed[0] not in FAMILIES:
        problem = f"family must be one of {', '.join(FAMILIES)}, got {parsed[0]!r}"
    elif not _NAME_RE.match(parsed[1]):
        problem = (f"table name must start with a letter or '_' and contain letters, digits, "
                   f"'_', '-', '.' only (at most 255), got {parsed[1]!r}")
    else:
        family, table = parsed
    rules = value.get("rules") if isinstance(value, Mapping) else None
    # Thousands of rules allocate many small objects at once: the cyclic collector would walk
    # the heap again and again meanwhile (half the time of a 1000-rule table).
    with GcPause(isinstance(rules, list) and len(rules) >= GC_PAUSE_RULES):
        validate(NftTable, key, value, key_problems={KEY_FIELD: problem} if problem else None,
                 context={"family": family, "table": table}, error=InvalidValueError)
        assert family is not None and table is not None
        # The value as given (nulls dropped by table_spec): the model has no defaults to fill.
        assert isinstance(value, Mapping)
        return table_spec(family, table, value)


class NftablesDescriptor:
    """The descriptor of ``linux/nftables/...`` (NB tables and OBTAINED host tables)."""

    name = NAME

    def __init__(self, context: PluginContext, nft: Nft | None = None) -> None:
        self.nft = nft if nft is not None else Nft(context.client.netns)
        self.serial = SerialRunner()
        self.specs: ParseCache[TableSpec] = ParseCache(parse_table)

    @staticmethod
    def key_selector(key: str) -> bool:
        return key.startswith(PREFIX)

    def validate(self, key: str, value: Any) -> None:
        if key.startswith(HOST_PREFIX):
            raise InvalidValueError(key, {KEY_FIELD: "tables kvmesh did not make are read-only: "
                                                     "kvmesh reports them and never changes them"})
        self.specs.validate(key, value)

    def dependencies(self, key: str, value: Any) -> list[Dependency]:
        spec = self.specs.try_get(key, value)
        if spec is None:
            return []
        return [link_dependency(f"chain device {dev}", dev) for dev in spec.devices()]

    @staticmethod
    def is_retriable_failure(exc: BaseException) -> bool:
        if isinstance(exc, NftError):
            return exc.retriable
        return is_retriable_failure(exc)

    # -- changes ------------------------------------------------------------------------------

    def create(self, key: str, value: Any) -> None:
        spec = self.specs.get(key, value)
        self.serial.run(lambda: self._create(spec))

    def _create(self, spec: TableSpec) -> None:
        what = f"create table {spec.family} {spec.name}"
        try:
            self.nft.apply(replace_transaction(spec, fresh=True), what)
        except NftError:
            existing = self.nft.list_table(spec.family, spec.name)
            if existing is None:
                raise  # nft refused the table itself: its message says why
            if find_marker(existing) is None:
                raise OwnershipError(what, f"table {spec.family} {spec.name} exists and was not "
                                           "made by kvmesh: kvmesh leaves it alone") from None
            self.nft.apply(replace_transaction(spec), what)  # kvmesh's own, left from before
        self._record_baseline_later(spec)

    def update(self, key: str, old: Any, new: Any, metadata: Any) -> None:
        spec = self.specs.get(key, new)

        def replace() -> None:
            self.nft.apply(replace_transaction(spec), f"replace table {spec.family} {spec.name}")
            self._record_baseline_later(spec)

        self.serial.run(replace)

    def delete(self, key: str, value: Any, metadata: Any) -> None:
        parsed = parse_table_key(key)
        if parsed is None:
            return
        family, name = parsed

        def remove() -> None:
            try:
                self.nft.apply(delete_transaction(family, name), f"delete table {family} {name}")
            except NftError as exc:
                if not is_absent(exc):
                    raise
                # Gone already, or no longer kvmesh's (no marker): either way, nothing to do.
                log.info("table %s %s: not deleted (absent or not kvmesh's)", family, name)

        self.serial.run(remove)

    def _record_baseline_later(self, spec: TableSpec) -> None:
        self.serial.defer(lambda: self._record_baseline(spec))

    def _record_baseline(self, spec: TableSpec) -> None:
        """Store the digest of the table as listed right after kvmesh applied it."""
        objects = self.nft.list_table(spec.family, spec.name)
        marker = find_marker(objects) if objects is not None else None
        if objects is None or marker is None or marker.desired != spec.digest:
            return  # deleted or replaced since: the later operation records its own
        if marker.baseline is None:
            self.nft.apply(baseline_transaction(spec.family, spec.name, marker,
                                                baseline_digest(objects)),
                           f"record baseline of table {spec.family} {spec.name}")

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait until the deferred baselines are recorded (tests, benchmarks)."""
        return self.serial.wait_idle(timeout)

    # -- reading ------------------------------------------------------------------------------

    def retrieve(self, correlate: Sequence[tuple[str, Any, Any]]
                 ) -> list[tuple[str, Any, Any, ValueOrigin]]:
        desired = {key: value for key, value, _metadata in correlate}
        objects = self.serial.run(lambda: self.nft.query("ruleset"))
        result: list[tuple[str, Any, Any, ValueOrigin]] = []
        for (family, name), items in group_tables(objects).items():
            if "/" in name or "/" in family:
                continue  # not expressible as a key; never kvmesh's either
            marker = find_marker(items)
            if marker is None:
                result.append((host_table_key(family, name), {"family": family, "name": name},
                               None, ValueOrigin.FROM_SB))
                continue
            key = table_key(family, name)
            value: Any = readback_value(family, name, items)
            wanted = desired.get(key)
            spec = self.specs.try_get(key, wanted) if wanted is not None else None
            if (spec is not None and marker.desired == spec.digest
                    and marker.baseline == baseline_digest(items)):
                value = wanted  # unchanged since kvmesh applied it
            result.append((key, value, None, ValueOrigin.FROM_NB))
        return result

    def descriptor(self) -> Descriptor:
        return Descriptor(
            name=self.name, key_selector=self.key_selector, validate=self.validate,
            create=self.create, update=self.update, delete=self.delete,
            retrieve=self.retrieve, dependencies=self.dependencies,
            value_comparator=self.specs.equivalent,
            is_retriable_failure=self.is_retriable_failure,
        )


def descriptors(context: PluginContext) -> list[Descriptor]:
    return [NftablesDescriptor(context).descriptor()]


EXAMPLE_VALUE = {
    "chains": [{"name": "input", "type": "filter", "hook": "input", "prio": 0,
                "policy": "accept"}],
    "sets": [{"name": "blocked", "type": "inet_service", "elem": [5002]}],
    "rules": [{"chain": "input", "expr": [
        {"match": {"op": "==", "left": {"payload": {"protocol": "tcp", "field": "dport"}},
                   "right": "@blocked"}},
        {"drop": None}]}],
}

MODEL: ModelSpec[PluginContext] = ModelSpec(
    "linux/nftables", "linux/nftables/<family>/<table>",
    re.compile(r"linux/nftables/(?!host/)[^/]+/[^/]+"), NftTable, parse_table, descriptors,
    examples=(("linux/nftables/inet/filter", EXAMPLE_VALUE),),
)

"""``linux/neighbor/<dev>/<ip>``: static ARP (IPv4) and NDP (IPv6) entries.

Ownership: kvmesh writes every entry with its protocol number (NDA_PROTOCOL = the plugin's
route protocol, ``Ownership.route_proto``; ``ip neigh show proto 107``), which the kernel keeps
with the entry. Retrieve reports only entries carrying it. Everything else in the neighbor
table (entries the kernel learned, entries made by hand or by another daemon) is not kvmesh's:
it is never reported, changed or deleted — with one exception: an entry the kernel *learned*
(a dynamic NUD state, no protocol) for an address kvmesh is told to pin is replaced, as
``ip neigh replace`` would (the cache entry is the kernel's, not anyone's configuration). A
static entry of another owner for that address makes the create fail with ``OwnershipError``
(retriable). Delete removes the entry only while it still carries kvmesh's protocol.

The whole entry (MAC and state) is updated in place (``replace``). A ``reachable`` entry is a
dynamic one primed with the MAC: the kernel ages it (stale, delay...) and Retrieve reports any
dynamic state of a kvmesh entry as ``reachable``; the kernel flushes non-permanent entries when
the link loses carrier, which a resync repairs.
"""

from __future__ import annotations

import errno
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field, ValidationInfo, model_validator

from scheduler import Dependency, Descriptor, ValueOrigin
from southbound.linux.addr import parse_address
from southbound.linux.context import PluginContext
from southbound.linux.errors import (
    InvalidValueError,
    NetlinkOperationError,
    OwnershipError,
    is_retriable_failure,
)
from southbound.linux.interface import NAME as INTERFACE_DESCRIPTOR
from southbound.linux.interface import link_dependency
from southbound.linux.memo import ParseCache
from southbound.linux.models import InterfaceName, IPAddress, Mac, interface_name_problem
from southbound.linux.records import Neighbor
from southbound.modelspec import ModelSpec
from southbound.validation import KEY_FIELD, FieldProblems, StrictModel, validate

NAME = "linux-neighbor"
PREFIX = "linux/neighbor/"
SHAPE = "linux/neighbor/<dev>/<ip>"
NUD_REACHABLE = 0x02
NUD_NOARP = 0x40
NUD_PERMANENT = 0x80
NUD_STATES = {"permanent": NUD_PERMANENT, "noarp": NUD_NOARP, "reachable": NUD_REACHABLE}
State = Literal["permanent", "noarp", "reachable"]


class LinuxNeighbor(StrictModel):
    """``linux/neighbor/<dev>/<ip>``: a static neighbor (ARP or NDP) entry kvmesh owns. The key
    carries the device and the IP address (canonical form); the value may repeat them."""

    dev: InterfaceName | None = Field(None, description="the link (as in the key)")
    ip: IPAddress | None = Field(None, description="IPv4 or IPv6 address (as in the key)")
    mac: Mac = Field(description="link-layer address the IP resolves to")
    state: State = Field("permanent", description="permanent (never expires), noarp (never "
                         "verified) or reachable (a dynamic entry the kernel ages)")

    @model_validator(mode="after")
    def _agrees_with_key(self, info: ValidationInfo) -> LinuxNeighbor:
        context = info.context or {}
        problems = {}
        for field in ("dev", "ip"):
            expected, given = context.get(field), getattr(self, field)
            if expected is not None and given is not None and given != expected:
                problems[field] = f"must match the key ({expected})"
        if problems:
            raise FieldProblems(problems)
        return self


@dataclass(frozen=True, slots=True)
class NeighborSpec:
    dev: str
    ip: str
    mac: str
    state: str

    def to_value(self) -> dict[str, Any]:
        return {"dev": self.dev, "ip": self.ip, "mac": self.mac, "state": self.state}


def neighbor_key(dev: str, ip: str) -> str:
    return f"{PREFIX}{dev}/{ip}"


def parse_neighbor_key(key: str) -> tuple[str, str] | None:
    """(dev, ip) of a neighbor key (IPs contain no '/'), or None."""
    if not key.startswith(PREFIX):
        return None
    parts = key[len(PREFIX):].split("/")
    if len(parts) != 2 or not all(parts):
        return None
    return parts[0], parts[1]


def parse_neighbor(key: str, value: object) -> NeighborSpec:
    """Validate a neighbor value against its key; raise ``InvalidValueError`` naming every bad
    field."""
    parsed = parse_neighbor_key(key)
    if parsed is None:
        raise InvalidValueError(key, {KEY_FIELD: f"must be '{SHAPE}'"})
    dev, ip = parsed
    problem = interface_name_problem(dev)
    problem = f"device {problem}" if problem else None
    canonical = None
    try:
        version, packed, canonical = parse_address(ip)
    except ValueError:
        problem = problem or f"{ip!r} is not an IPv4 or IPv6 address"
    else:
        if canonical != ip:
            # Retrieve reports entries under the canonical key: another spelling never matches.
            problem = problem or f"write the address {ip} as {canonical}"
        elif not any(packed) or (packed[0] >= 0xE0 if version == 4 else packed[0] == 0xFF):
            problem = problem or f"{ip} is not a unicast address"
    model = validate(LinuxNeighbor, key, value,
                     key_problems={KEY_FIELD: problem} if problem else None,
                     context={"dev": dev, "ip": canonical}, error=InvalidValueError)
    return NeighborSpec(dev=dev, ip=ip, mac=model.mac, state=model.state)


def reported_state(nud: int) -> str:
    """The model's state for a kvmesh entry's NUD bits (any dynamic state is ``reachable``)."""
    if nud & NUD_PERMANENT:
        return "permanent"
    if nud & NUD_NOARP:
        return "noarp"
    return "reachable"


def is_static(nud: int) -> bool:
    return bool(nud & (NUD_PERMANENT | NUD_NOARP))


class NeighborDescriptor:
    name = NAME

    def __init__(self, context: PluginContext) -> None:
        self.ctx = context
        self.specs: ParseCache[NeighborSpec] = ParseCache(parse_neighbor)

    @staticmethod
    def key_selector(key: str) -> bool:
        return key.startswith(PREFIX)

    def dependencies(self, key: str, value: Any) -> list[Dependency]:
        spec = self.specs.try_get(key, value)
        return [] if spec is None else [link_dependency(f"interface {spec.dev}", spec.dev)]

    def _entry(self, spec: NeighborSpec, index: int) -> Neighbor:
        return Neighbor(index=index, ip=spec.ip, mac=spec.mac, state=NUD_STATES[spec.state],
                        proto=self.ctx.ownership.route_proto)

    def create(self, key: str, value: Any) -> None:
        spec = self.specs.get(key, value)
        purpose = f"add neighbor {key}"
        self.ctx.links.with_index(spec.dev, purpose, lambda index: self._add(spec, index, purpose))

    def _add(self, spec: NeighborSpec, index: int, purpose: str) -> None:
        entry = self._entry(spec, index)
        try:
            self.ctx.client.set_neighbor(entry, purpose, replace=False)
            return
        except NetlinkOperationError as exc:
            if exc.code != errno.EEXIST:
                raise
        existing = self.ctx.client.get_neighbor(index, spec.ip)
        if existing is not None and existing.proto != entry.proto and is_static(existing.state):
            raise OwnershipError(purpose, f"a static entry for {spec.ip} on {spec.dev} "
                                          f"exists and is not kvmesh's (protocol "
                                          f"{existing.proto})")
        # kvmesh's own entry (e.g. left by an earlier run), or one the kernel learned.
        self.ctx.client.set_neighbor(entry, purpose, replace=True)

    def update(self, key: str, old: Any, new: Any, metadata: Any) -> None:
        spec = self.specs.get(key, new)
        purpose = f"replace neighbor {key}"
        self.ctx.links.with_index(
            spec.dev, purpose,
            lambda index: self.ctx.client.set_neighbor(self._entry(spec, index), purpose,
                                                       replace=True))

    def delete(self, key: str, value: Any, metadata: Any) -> None:
        parsed = parse_neighbor_key(key)
        if parsed is None:
            return
        dev, ip = parsed
        index = self.ctx.links.lookup(dev)
        if index is None:
            return  # the link is gone, and its entries with it
        existing = self.ctx.client.get_neighbor(index, ip)
        if existing is None or existing.proto != self.ctx.ownership.route_proto:
            return  # gone, or replaced by someone else's entry: not kvmesh's to delete
        self.ctx.client.delete_neighbor(index, ip, f"delete neighbor {key}")

    def retrieve(self, correlate: Sequence[tuple[str, Any, Any]]
                 ) -> list[tuple[str, Any, Any, ValueOrigin]]:
        names = self.ctx.snapshot().names
        proto = self.ctx.ownership.route_proto
        result = []
        for entry in self.ctx.client.dump_neighbors():
            dev = names.get(entry.index)
            if entry.proto != proto or dev is None or entry.mac is None:
                continue
            spec = NeighborSpec(dev=dev, ip=entry.ip, mac=entry.mac,
                                state=reported_state(entry.state))
            key = neighbor_key(dev, entry.ip)
            value = spec.to_value()
            self.specs.put(key, value, spec)  # spares the scheduler's calls a re-parse
            result.append((key, value, None, ValueOrigin.FROM_NB))
        return result


def descriptors(context: PluginContext) -> list[Descriptor]:
    neighbors = NeighborDescriptor(context)
    return [Descriptor(
        name=neighbors.name, key_selector=neighbors.key_selector,
        validate=neighbors.specs.validate, create=neighbors.create, update=neighbors.update,
        delete=neighbors.delete, retrieve=neighbors.retrieve,
        dependencies=neighbors.dependencies, value_comparator=neighbors.specs.equivalent,
        is_retriable_failure=is_retriable_failure,
        # The interfaces' Retrieve takes the link dump this one reuses for names.
        retrieve_dependencies=(INTERFACE_DESCRIPTOR,),
    )]


MODEL: ModelSpec[PluginContext] = ModelSpec(
    "linux/neighbor", SHAPE, re.compile(r"linux/neighbor/[^/]+/[^/]+"), LinuxNeighbor,
    parse_neighbor, descriptors,
    examples=(
        ("linux/neighbor/veth0/10.0.0.2", {"mac": "02:00:00:00:00:02"}),
        ("linux/neighbor/veth0/fd00::2", {"mac": "02:00:00:00:00:02", "state": "noarp"}),
    ),
)

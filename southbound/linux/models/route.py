"""The ``linux/route/<table>/<dst cidr>/<dev>`` model: IPv4/IPv6 unicast routes.

One module (see ``southbound.modelspec``): the pydantic model (``LinuxRoute``), its canonical
spec (``RouteSpec``, what ``parse_route`` returns and Retrieve reports), the descriptor and
``MODEL``.

The key carries the route's identity (table, destination, device); the value may repeat those
fields (they must then agree with the key) and adds ``gateway``, ``metric`` and ``scope``.
Canonical defaults (what the kernel does, so Retrieve reports the same thing): ``metric`` 0 for
IPv4 and 1024 for IPv6 (the kernel turns an IPv6 metric of 0 into 1024); ``scope`` ``link`` for an
IPv4 route without gateway and ``universe`` otherwise (IPv6 routes only have ``universe``).

Dependencies: the device (a kvmesh interface or a host link) and, for a route with a gateway,
an address of the device whose subnet contains the gateway (AnyOf over the derived address keys
``linux/interface/<dev>/address/*`` and ``linux/interface/host/<dev>/address/*``): the kernel
refuses a gateway it cannot reach, so the route waits (PENDING) instead of failing.

Routes are created with kvmesh's route protocol number (``context.KVMESH_ROUTE_PROTO``);
Retrieve reports only those, so routes made by the kernel or by others are never touched.
A change of gateway or scope is an in-place replace; a change of metric re-creates the route
(the metric is part of the kernel's identity of a route).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field, ValidationInfo, model_validator

from scheduler import Dependency, Descriptor, ValueOrigin
from southbound.linux import keys
from southbound.linux.addr import Cidr, parse_address, parse_cidr, parse_network
from southbound.linux.context import PluginContext
from southbound.linux.errors import InvalidValueError, is_retriable_failure
from southbound.linux.fields import (
    U32_MAX,
    InterfaceName,
    IPAddress,
    Network,
    Table,
    interface_name_problem,
)
from southbound.linux.interface import link_dependency
from southbound.linux.memo import ParseCache
from southbound.linux.models.interface import NAME as INTERFACE_DESCRIPTOR
from southbound.linux.records import NextHop, Route, sorted_nexthops
from southbound.modelspec import ModelSpec
from southbound.validation import KEY_FIELD, FieldProblems, StrictModel, validate

NAME = "linux-route"
SCOPES = {"universe": 0, "site": 200, "link": 253, "host": 254, "nowhere": 255}


# -- model ------------------------------------------------------------------------------------


ROUTE_TYPES = {"unicast": 1, "blackhole": 6, "unreachable": 7, "prohibit": 8}
MAX_WEIGHT = 256  # the kernel keeps weight - 1 in a byte (rtnh_hops)


class NextHopSection(StrictModel):
    """One next hop of a multipath (ECMP) route."""

    gateway: IPAddress | None = Field(None, description="next hop address, same family as dst "
                                                        "(required for IPv6)")
    dev: InterfaceName = Field(description="outgoing device (kvmesh interface or host link)")
    weight: int = Field(1, ge=1, le=MAX_WEIGHT, description="relative share of the traffic")


class LinuxRoute(StrictModel):
    """``linux/route/<table>/<dst cidr>/<dev>``: a route kvmesh owns. The key carries table,
    destination and device; the value may repeat them (they must then agree with the key). A
    route without one device (``type`` other than ``unicast``, or ``nexthops`` over several
    devices) has ``-`` as the key's device: ``linux/route/main/203.0.113.0/24/-``. Defaults as
    the kernel's: metric 0 (IPv4) or 1024 (IPv6); scope ``link`` for an IPv4 route without
    gateway or next hops, else ``universe``."""

    dst: Network | None = Field(None, description="destination (as in the key)")
    dev: InterfaceName | None = Field(None, description="outgoing device (as in the key; `-`: "
                                                        "none)")
    gateway: IPAddress | None = Field(None, description="next hop, same family as dst")
    metric: int | None = Field(None, ge=0, le=U32_MAX, description="route metric (priority)")
    table: Table | None = Field(None, description="routing table (as in the key)")
    scope: Literal["universe", "site", "link", "host", "nowhere"] | None = Field(
        None, description="route scope (IPv6: universe only)")
    type: Literal["unicast", "blackhole", "unreachable", "prohibit"] = Field(
        "unicast", description="route type; the others drop traffic and have no device")
    src: IPAddress | None = Field(None, description="preferred source address (an address "
                                                    "configured on some link)")
    nexthops: list[NextHopSection] = Field(
        default_factory=list, description="multipath (ECMP) next hops, at least two; instead "
                                          "of gateway")

    @model_validator(mode="after")
    def _agrees_with_key(self, info: ValidationInfo) -> LinuxRoute:
        context = info.context or {}
        network: Cidr | None = context.get("network")
        table: int | None = context.get("table")
        problems: dict[str, str] = {}
        if table is not None and self.table is not None:
            expected: object = keys.table_in_key(table) if isinstance(self.table, str) else table
            if self.table != expected:
                problems["table"] = f"must match the key ({expected})"
        dev = context.get("dev")
        if dev is not None and self.dev is not None and self.dev != dev:
            problems["dev"] = f"must match the key ({dev})"
        if network is not None:
            if self.dst is not None and self.dst != network.text:
                problems["dst"] = f"must match the key ({network.text})"
            self._family_problems(network.version, problems)
        if self.gateway is not None and self.scope in ("link", "host", "nowhere"):
            problems.setdefault("scope", "a route with a gateway must have scope 'universe' "
                                         "or 'site'")
        if dev is not None:
            self._shape_problems(dev, problems)
        if problems:
            raise FieldProblems(problems)
        return self

    def _family_problems(self, version: int, problems: dict[str, str]) -> None:
        family = f"must be an IPv{version} address like the destination"
        if self.gateway is not None and parse_address(self.gateway)[0] != version:
            problems["gateway"] = family
        if self.src is not None and parse_address(self.src)[0] != version:
            problems["src"] = family
        for position, hop in enumerate(self.nexthops):
            if hop.gateway is not None and parse_address(hop.gateway)[0] != version:
                problems[f"nexthops[{position}].gateway"] = family
            elif hop.gateway is None and version == 6:
                problems[f"nexthops[{position}].gateway"] = "is required for an IPv6 next hop"
        if version == 6 and self.scope not in (None, "universe"):
            problems["scope"] = "IPv6 routes only support 'universe'"

    def _shape_problems(self, dev: str, problems: dict[str, str]) -> None:
        """Typed routes, multipath routes and the key's device agree (see the class doc)."""
        if self.type != "unicast":
            for name in ("gateway", "src", "nexthops"):
                if getattr(self, name):
                    problems[name] = f"not allowed with type '{self.type}'"
            if self.scope not in (None, "universe"):
                problems["scope"] = f"must be 'universe' with type '{self.type}'"
            if dev != keys.NO_DEVICE:
                problems[KEY_FIELD] = f"the device of a '{self.type}' route must be " \
                                      f"'{keys.NO_DEVICE}'"
            return
        if not self.nexthops:
            if dev == keys.NO_DEVICE:
                problems[KEY_FIELD] = f"device '{keys.NO_DEVICE}' needs a type other than " \
                                      "'unicast' or nexthops over several devices"
            return
        if self.gateway is not None:
            problems["gateway"] = "not allowed with nexthops (give each next hop its gateway)"
        if len(self.nexthops) < 2:
            problems["nexthops"] = "needs at least two next hops (one: use gateway and the " \
                                   "key's device)"
        seen: set[tuple[str, str | None]] = set()
        for position, hop in enumerate(self.nexthops):
            if (hop.dev, hop.gateway) in seen:
                problems[f"nexthops[{position}]"] = "duplicate next hop"
            seen.add((hop.dev, hop.gateway))
        expected = multipath_device({hop.dev for hop in self.nexthops})
        if dev != expected:
            problems[KEY_FIELD] = f"the device of this multipath route must be '{expected}'" + (
                " (its next hops use several devices)" if expected == keys.NO_DEVICE else
                " (the device of every next hop)")


def multipath_device(devices: set[str]) -> str:
    """The key's device of a multipath route: the one device of all its next hops, else '-'."""
    return next(iter(devices)) if len(devices) == 1 else keys.NO_DEVICE


# -- canonical spec -------------------------------------------------------------------------


SCOPE_NAMES = {number: name for name, number in SCOPES.items()}
TYPE_NAMES = {number: name for name, number in ROUTE_TYPES.items()}
MAIN_TABLE = keys.TABLE_NAMES["main"]
TABLE_NAMES = keys.TABLE_NAMES
table_in_key = keys.table_in_key
TABLE_RANGE = (1, 2**32 - 1)
METRIC_RANGE = (0, 2**32 - 1)
IPV6_DEFAULT_METRIC = 1024


@dataclass(frozen=True, slots=True)
class NextHopSpec:
    dev: str
    gateway: str | None
    weight: int

    def to_value(self) -> dict[str, Any]:
        return {"gateway": self.gateway, "dev": self.dev, "weight": self.weight}


@dataclass(frozen=True, slots=True)
class RouteSpec:
    table: int
    dst: str
    dev: str  # keys.NO_DEVICE for a typed route or a multipath route over several devices
    gateway: str | None
    metric: int
    scope: str
    type: str = "unicast"
    src: str | None = None
    nexthops: tuple[NextHopSpec, ...] = ()  # sorted: see sorted_hops

    def to_value(self) -> dict[str, Any]:
        return {
            "dst": self.dst,
            "dev": self.dev,
            "gateway": self.gateway,
            "metric": self.metric,
            "table": self.table,
            "scope": self.scope,
            "type": self.type,
            "src": self.src,
            "nexthops": [hop.to_value() for hop in self.nexthops],
        }

    def identity(self) -> tuple[Any, ...]:
        """What the kernel identifies a route by (besides dev): changing it means re-create.
        Everything else (gateway, scope, type, src, next hops) is replaced in place."""
        return (self.table, self.dst, self.dev, self.metric)

    @property
    def devices(self) -> tuple[str, ...]:
        """The links the route goes out of (none for a typed route)."""
        if self.nexthops:
            return tuple(sorted({hop.dev for hop in self.nexthops}))
        return () if self.dev == keys.NO_DEVICE else (self.dev,)

    @property
    def gateways(self) -> tuple[tuple[str, str], ...]:
        """(device, gateway) of every next hop with a gateway."""
        if self.nexthops:
            return tuple((hop.dev, hop.gateway) for hop in self.nexthops
                         if hop.gateway is not None)
        return ((self.dev, self.gateway),) if self.gateway is not None else ()


def sorted_hops(hops: Iterable[NextHopSpec]) -> tuple[NextHopSpec, ...]:
    """Next hops in one order (by device, then gateway): the kernel's order is not the model's."""
    return tuple(sorted(hops, key=lambda hop: (hop.dev, hop.gateway or "", hop.weight)))


def default_metric(version: int) -> int:
    return IPV6_DEFAULT_METRIC if version == 6 else 0


def default_scope(version: int, gateway: str | None, multipath: bool = False) -> str:
    return "link" if version == 4 and gateway is None and not multipath else "universe"


def parse_route(key: str, value: object) -> RouteSpec:
    """Validate a route value (``models.LinuxRoute``) against its key; raise
    ``InvalidValueError`` listing every bad field."""
    parsed = keys.parse_route_key(key)
    if parsed is None:
        raise InvalidValueError(key, {KEY_FIELD: "must be 'linux/route/<table>/<dst cidr>/<dev>'"})
    table, network, problem = _key_table(parsed.table), None, None
    if table is None:
        problem = (f"table must be one of {', '.join(TABLE_NAMES)} or an integer "
                   f"{TABLE_RANGE[0]}..{TABLE_RANGE[1]}")
    elif table_in_key(table) != parsed.table:
        problem, table = f"write table {parsed.table} as {table_in_key(table)!r}", None
    try:
        network = parse_network(parsed.dst)
    except ValueError:
        problem = problem or "destination must be a network in CIDR notation with host bits zero"
    if network is not None and network.text != parsed.dst:
        # Retrieve reports routes under the canonical key: another spelling would never match.
        problem, network = problem or f"write the destination {parsed.dst} as {network.text}", None
    dev_problem = None if parsed.dev == keys.NO_DEVICE else interface_name_problem(parsed.dev)
    problem = problem or (f"device {dev_problem}" if dev_problem else None)
    model = validate(LinuxRoute, key, value,
                     key_problems={KEY_FIELD: problem} if problem else None,
                     context={"table": table, "network": network, "dev": parsed.dev},
                     error=InvalidValueError)
    assert network is not None and table is not None
    metric = model.metric
    if metric is None or (network.version == 6 and metric == 0):
        metric = default_metric(network.version)
    hops = sorted_hops(NextHopSpec(dev=hop.dev, gateway=hop.gateway, weight=hop.weight)
                       for hop in model.nexthops) if model.nexthops else ()
    return RouteSpec(
        table=table,
        dst=network.text,
        dev=parsed.dev,
        gateway=model.gateway,
        metric=metric,
        scope=model.scope or default_scope(network.version, model.gateway, bool(hops)
                                           or model.type != "unicast"),
        type=model.type,
        src=model.src,
        nexthops=hops,
    )


def _key_table(text: str) -> int | None:
    if text in TABLE_NAMES:
        return TABLE_NAMES[text]
    if not text.isdigit() or not TABLE_RANGE[0] <= int(text) <= TABLE_RANGE[1]:
        return None
    return int(text)


def gateway_in_address(gateway: str, cidr: str) -> bool:
    """Whether an interface address (``10.0.0.1/24``) puts ``gateway`` in a connected subnet."""
    try:
        return parse_cidr(cidr).contains(parse_address(gateway)[1])
    except ValueError:
        return False


def address_is(address: str, cidr: str) -> bool:
    """Whether an interface address (``10.0.0.1/24``) is ``address`` (canonical text)."""
    return cidr.partition("/")[0] == address


# -- descriptor ---------------------------------------------------------------------------


class RouteDescriptor:
    name = NAME

    def __init__(self, context: PluginContext) -> None:
        self.ctx = context
        self.specs: ParseCache[RouteSpec] = ParseCache(parse_route)

    @staticmethod
    def key_selector(key: str) -> bool:
        return key.startswith(keys.ROUTE_PREFIX)

    def dependencies(self, key: str, value: Any) -> list[Dependency]:
        spec = self.specs.try_get(key, value)
        if spec is None:
            return []
        result = [link_dependency(f"interface {dev}", dev) for dev in spec.devices]
        for dev, gateway in spec.gateways:
            result.append(_gateway_dependency(dev, gateway))
        if spec.src is not None:
            result.append(_source_dependency(spec.src))
        return result

    def _route(self, spec: RouteSpec, oif: int | None, purpose: str) -> Route:
        hops = sorted_nexthops(
            NextHop(oif=self.ctx.links.require(hop.dev, purpose), gateway=hop.gateway,
                    weight=hop.weight) for hop in spec.nexthops)
        return Route(table=spec.table, dst=spec.dst, oif=oif, gateway=spec.gateway,
                     metric=spec.metric, scope=SCOPES[spec.scope],
                     proto=self.ctx.ownership.route_proto, type=ROUTE_TYPES[spec.type],
                     src=spec.src, nexthops=hops)

    def _apply(self, spec: RouteSpec, purpose: str, write: Callable[[Route, str], object]
               ) -> None:
        if spec.nexthops or spec.dev == keys.NO_DEVICE:
            write(self._route(spec, None, purpose), purpose)
            return
        self.ctx.links.with_index(
            spec.dev, purpose, lambda oif: write(self._route(spec, oif, purpose), purpose))

    def create(self, key: str, value: Any) -> None:
        self._apply(self.specs.get(key, value), f"add route {key}", self.ctx.client.add_route)

    def update(self, key: str, old: Any, new: Any, metadata: Any) -> None:
        self._apply(self.specs.get(key, new), f"replace route {key}",
                    self.ctx.client.replace_route)

    def update_with_recreate(self, key: str, old: Any, new: Any, metadata: Any) -> bool:
        previous, spec = self.specs.try_get(key, old), self.specs.try_get(key, new)
        return previous is None or spec is None or previous.identity() != spec.identity()

    def delete(self, key: str, value: Any, metadata: Any) -> None:
        spec = self.specs.try_get(key, value)
        if spec is None:
            return
        oif = None
        if spec.dev != keys.NO_DEVICE and not spec.nexthops:
            oif = self.ctx.links.lookup(spec.dev)
            if oif is None:
                return  # the device is gone, and the kernel removed its routes with it
        # Matched on table, destination, metric, type, protocol (and device): next hops and
        # the source are not needed to find it.
        route = Route(table=spec.table, dst=spec.dst, oif=oif, gateway=None,
                      metric=spec.metric, scope=SCOPES[spec.scope],
                      proto=self.ctx.ownership.route_proto, type=ROUTE_TYPES[spec.type])
        self.ctx.client.delete_route(route, f"delete route {key}")

    def retrieve(self, correlate: Sequence[tuple[str, Any, Any]]
                 ) -> list[tuple[str, Any, Any, ValueOrigin]]:
        names = self.ctx.snapshot().names
        result = []
        for route in self.ctx.client.dump_routes(proto=self.ctx.ownership.route_proto):
            spec = observed_route(route, names)
            if spec is None:
                continue  # a device kvmesh cannot name (gone meanwhile): not a model value
            key = keys.route_key(route.table, route.dst, spec.dev)
            value = spec.to_value()
            if spec.scope in SCOPES:
                self.specs.put(key, value, spec)  # spares the scheduler's calls a re-parse
            result.append((key, value, None, ValueOrigin.FROM_NB))
        return result


def observed_route(route: Route, names: Mapping[int, str]) -> RouteSpec | None:
    """The kernel's version of a kvmesh route, in the model's canonical shape."""
    kind = TYPE_NAMES.get(route.type, str(route.type))
    scope = SCOPE_NAMES.get(route.scope, str(route.scope))
    hops = []
    for hop in route.nexthops:
        hop_dev = names.get(hop.oif)
        if hop_dev is None:
            return None
        hops.append(NextHopSpec(dev=hop_dev, gateway=hop.gateway, weight=hop.weight))
    if hops:
        dev: str | None = multipath_device({hop.dev for hop in hops})
    elif kind != "unicast":
        dev = keys.NO_DEVICE
    else:
        dev = names.get(route.oif) if route.oif is not None else None
    if dev is None:
        return None
    return RouteSpec(table=route.table, dst=route.dst, dev=dev, gateway=route.gateway,
                     metric=route.metric, scope=scope, type=kind, src=route.src,
                     nexthops=sorted_hops(hops))


def _gateway_dependency(dev: str, gateway: str) -> Dependency:
    """An address of ``dev`` whose subnet contains ``gateway`` (the kernel refuses a gateway
    it cannot reach): AnyOf over the derived address keys of that link."""
    prefixes = (keys.address_prefix(dev), keys.host_address_prefix(dev))

    def reaches_gateway(candidate: str) -> bool:
        parsed = keys.parse_address_key(candidate) or keys.parse_host_address_key(candidate)
        return parsed is not None and gateway_in_address(gateway, parsed[1])

    return Dependency(label=f"address of {dev} in the subnet of {gateway}",
                      any_of=reaches_gateway, key_prefixes=prefixes)


def _source_dependency(src: str) -> Dependency:
    """The preferred source configured on some link, kvmesh's or a host link (the kernel
    refuses a source address it does not have): AnyOf over every derived address key."""

    def is_source(candidate: str) -> bool:
        parsed = keys.parse_address_key(candidate) or keys.parse_host_address_key(candidate)
        return parsed is not None and address_is(src, parsed[1])

    return Dependency(label=f"address {src} on some link", any_of=is_source,
                      key_prefixes=(keys.INTERFACE_PREFIX,))


# -- registration ---------------------------------------------------------------------------


def descriptors(context: PluginContext) -> list[Descriptor]:
    routes = RouteDescriptor(context)
    return [Descriptor(
        name=routes.name, key_selector=routes.key_selector, validate=routes.specs.validate,
        create=routes.create, delete=routes.delete, update=routes.update,
        update_with_recreate=routes.update_with_recreate, retrieve=routes.retrieve,
        dependencies=routes.dependencies, value_comparator=routes.specs.equivalent,
        is_retriable_failure=is_retriable_failure, retrieve_dependencies=(INTERFACE_DESCRIPTOR,),
    )]


MODEL: ModelSpec[PluginContext] = ModelSpec(
    "linux/route", "linux/route/<table>/<dst cidr>/<dev>",
    re.compile(r"linux/route/.+"), LinuxRoute, parse_route, descriptors=descriptors,
)

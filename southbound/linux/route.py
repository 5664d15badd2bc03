"""Descriptor of ``linux/route/<table>/<dst cidr>/<dev>``: IPv4/IPv6 unicast routes.

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

from collections.abc import Sequence
from typing import Any

from scheduler import Dependency, ValueOrigin
from southbound.linux import keys
from southbound.linux.context import PluginContext
from southbound.linux.interface import link_dependency
from southbound.linux.memo import ParseCache
from southbound.linux.records import Route
from southbound.linux.route_model import (
    SCOPE_NAMES,
    SCOPES,
    RouteSpec,
    gateway_in_address,
    parse_route,
)

NAME = "linux-route"


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
        result = [link_dependency(f"interface {spec.dev}", spec.dev)]
        if spec.gateway is not None:
            gateway = spec.gateway
            prefixes = (keys.address_prefix(spec.dev), keys.host_address_prefix(spec.dev))

            def reaches_gateway(candidate: str) -> bool:
                parsed = keys.parse_address_key(candidate) or keys.parse_host_address_key(
                    candidate)
                return parsed is not None and gateway_in_address(gateway, parsed[1])

            result.append(Dependency(label=f"address of {spec.dev} in the subnet of {gateway}",
                                     any_of=reaches_gateway, key_prefixes=prefixes))
        return result

    def _route(self, spec: RouteSpec, oif: int | None) -> Route:
        return Route(table=spec.table, dst=spec.dst, oif=oif, gateway=spec.gateway,
                     metric=spec.metric, scope=SCOPES[spec.scope],
                     proto=self.ctx.ownership.route_proto)

    def create(self, key: str, value: Any) -> None:
        spec = self.specs.get(key, value)
        purpose = f"add route {key}"
        self.ctx.links.with_index(
            spec.dev, purpose,
            lambda oif: self.ctx.client.add_route(self._route(spec, oif), purpose))

    def update(self, key: str, old: Any, new: Any, metadata: Any) -> None:
        spec = self.specs.get(key, new)
        purpose = f"replace route {key}"
        self.ctx.links.with_index(
            spec.dev, purpose,
            lambda oif: self.ctx.client.replace_route(self._route(spec, oif), purpose))

    def update_with_recreate(self, key: str, old: Any, new: Any, metadata: Any) -> bool:
        previous, spec = self.specs.try_get(key, old), self.specs.try_get(key, new)
        return previous is None or spec is None or previous.identity() != spec.identity()

    def delete(self, key: str, value: Any, metadata: Any) -> None:
        spec = self.specs.try_get(key, value)
        if spec is None:
            return
        oif = self.ctx.links.lookup(spec.dev)
        if oif is None:
            return  # the device is gone, and the kernel removed its routes with it
        self.ctx.client.delete_route(self._route(spec, oif), f"delete route {key}")

    def retrieve(self, correlate: Sequence[tuple[str, Any, Any]]
                 ) -> list[tuple[str, Any, Any, ValueOrigin]]:
        names = self.ctx.snapshot().names
        result = []
        for route in self.ctx.client.dump_routes(proto=self.ctx.ownership.route_proto):
            dev = names.get(route.oif) if route.oif is not None else None
            if dev is None:
                continue
            scope = SCOPE_NAMES.get(route.scope, str(route.scope))
            spec = RouteSpec(table=route.table, dst=route.dst, dev=dev, gateway=route.gateway,
                             metric=route.metric, scope=scope)
            key = keys.route_key(route.table, route.dst, dev)
            value = spec.to_value()
            if scope in SCOPES:
                self.specs.put(key, value, spec)  # spares the scheduler's calls a re-parse
            result.append((key, value, None, ValueOrigin.FROM_NB))
        return result

"""`vpp/route/<vrf>/<dst cidr>/<next hop>`: one path of an IPv4/IPv6 route in a VRF.

Each value is one path, added and removed with `is_multipath`, so several next hops for the same
destination are independent values. A route depends on its outgoing interface. Any change is a
re-creation (remove the old path, add the new one).

Retrieve reads every FIB table and reports, in model form, the paths kvmesh owns: those whose
outgoing interface is a kvmesh interface and that have a next hop (VPP's own entries - drop and
local routes, attached prefixes of interface addresses - never have one), plus any path the
scheduler asks about (`correlate`), e.g. an attached route configured through kvmesh.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from typing import Any

from scheduler import Dependency, Descriptor, ValueOrigin
from southbound.vpp import keys
from southbound.vpp.binapi import ANY_INDEX, PATH_NORMAL
from southbound.vpp.context import INTERFACE_DESCRIPTOR, ROUTE_DESCRIPTOR, Context
from southbound.vpp.models import (
    interface_dependency,
    model_descriptor,
    normalize_route,
    route_key_for,
)
from southbound.vpp.models.vrf import vrf_dependencies


def _dependencies(v: dict[str, Any]) -> Sequence[Dependency]:
    oif = v["outgoing_interface"]
    # The route's table (table 0 is VPP's own and always there).
    deps = list(vrf_dependencies(v["vrf"], (":" in v["dst"],)))
    if oif is not None:
        deps.append(interface_dependency(oif))
    return deps


class RouteDescriptor:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.api = ctx.api

    def descriptor(self) -> Descriptor:
        return model_descriptor(
            ROUTE_DESCRIPTOR, normalize_route, keys.is_route_key,
            depends_on=_dependencies,
            create=self.create,
            delete=self.delete,
            retrieve=self.retrieve,
            retrieve_dependencies=(INTERFACE_DESCRIPTOR,),
        )

    def _apply(self, key: str, value: Any, is_add: bool) -> None:
        v = normalize_route(key, value)
        oif = v["outgoing_interface"]
        sw_if_index = self.ctx.sw_if_index(oif) if oif is not None else ANY_INDEX
        self.api.add_del_route(
            is_add, v["vrf"], v["dst"], v["next_hop"], sw_if_index, v["weight"], v["preference"]
        )

    def create(self, key: str, value: Any) -> None:
        self._apply(key, value, True)

    def delete(self, key: str, value: Any, metadata: Any) -> None:
        # Removing a path that is not there is not an error in VPP.
        self._apply(key, value, False)

    def retrieve(self, correlate: list[tuple[str, Any, Any]]) -> list[tuple[str, Any, Any, Any]]:
        wanted = {key for key, _value, _meta in correlate}
        # Interfaces are retrieved first (retrieve_dependencies), which refreshes this map.
        names = self.ctx.names_by_index
        result = []
        seen: set[str] = set()
        for table_id, is_ip6 in self.api.tables():
            for route in self.api.routes(table_id, is_ip6):
                for path in route.paths:
                    if path.path_type != PATH_NORMAL:
                        continue
                    oif = names.get(path.sw_if_index)
                    if path.sw_if_index != ANY_INDEX and oif is None:
                        continue  # through an interface kvmesh does not own
                    value = {
                        "dst": route.prefix,
                        "next_hop": path.next_hop,
                        "outgoing_interface": oif,
                        "vrf": table_id,
                        "weight": path.weight,
                        "preference": path.preference,
                    }
                    key = route_key_for(value)
                    has_next_hop = not ipaddress.ip_address(path.next_hop).is_unspecified
                    if key in seen or (key not in wanted and not (has_next_hop and oif)):
                        continue
                    seen.add(key)
                    result.append((key, value, None, ValueOrigin.FROM_NB))
        return result

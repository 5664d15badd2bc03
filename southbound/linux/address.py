"""Descriptor of ``linux/interface/<name>/address/<cidr>``: one address of a kvmesh interface.

Derived from the interface value (one per entry of ``addresses``), so each address is added and
removed on its own: an address the kernel refuses fails alone, without blocking the interface or
its other addresses. Routes with a gateway depend on these keys (AnyOf: an address of the route's
device whose subnet contains the gateway). IPv6 addresses are added without duplicate address
detection, so they are usable at once.

Every address kvmesh adds carries its address protocol (``Ownership.address_proto``). On a link
kvmesh did not create (``"type": "existing"``, derived value ``{"existing": true}``) delete
removes an address only if it carries that marker: one the link had before is never removed.
"""

from __future__ import annotations

import logging
from typing import Any

from southbound.linux import keys
from southbound.linux.context import PluginContext

log = logging.getLogger(__name__)

NAME = "linux-interface-address"


class AddressDescriptor:
    name = NAME

    def __init__(self, context: PluginContext) -> None:
        self.ctx = context

    @staticmethod
    def key_selector(key: str) -> bool:
        return keys.parse_address_key(key) is not None

    @staticmethod
    def _parts(key: str) -> tuple[str, str]:
        parsed = keys.parse_address_key(key)
        assert parsed is not None, key
        return parsed

    def create(self, key: str, value: Any) -> None:
        name, cidr = self._parts(key)
        purpose = f"add address {cidr} to {name}"
        proto = self.ctx.ownership.address_proto
        self.ctx.links.with_index(
            name, purpose, lambda index: self.ctx.client.add_address(index, cidr, purpose, proto))

    def delete(self, key: str, value: Any, metadata: Any) -> None:
        name, cidr = self._parts(key)
        index = self.ctx.links.lookup(name)
        if index is None:
            return  # the link is gone, and its addresses with it
        if isinstance(value, dict) and value.get("existing") and not self._added_by_kvmesh(
                index, cidr):
            log.info("not deleting address %s of %s: kvmesh did not add it", cidr, name)
            return
        self.ctx.client.delete_address(index, cidr, f"delete address {cidr} from {name}")

    def _added_by_kvmesh(self, index: int, cidr: str) -> bool:
        proto = self.ctx.ownership.address_proto
        return any(address.index == index and address.cidr == cidr and address.proto == proto
                   for address in self.ctx.client.dump_addresses())

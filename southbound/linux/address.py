"""Descriptor of ``linux/interface/<name>/address/<cidr>``: one address of a kvmesh interface.

Derived from the interface value (one per entry of ``addresses``), so each address is added and
removed on its own: an address the kernel refuses fails alone, without blocking the interface or
its other addresses. Routes with a gateway depend on these keys (AnyOf: an address of the route's
device whose subnet contains the gateway). IPv6 addresses are added without duplicate address
detection, so they are usable at once.

Every address kvmesh adds carries its address protocol (``Ownership.address_proto``). On a link
kvmesh did not create (``"type": "existing"``, derived value ``{"existing": true}``) delete
removes an address only if it carries that marker: one the link had before is never removed.

Nor is one removed there as a side effect: the kernel deletes an IPv4 subnet's secondary addresses
together with its primary unless the link promotes them (``promote_secondaries``). So when
another address of the same subnet is on the link, kvmesh turns promotion on for the one
deletion and sets it back to what it was.
"""

from __future__ import annotations

import ipaddress
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from southbound.linux import keys
from southbound.linux.context import PluginContext
from southbound.linux.procsys import PROC_SYS, ProcSys
from southbound.linux.records import Address

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
        interface = ipaddress.ip_interface(cidr)
        existing = isinstance(value, dict) and bool(value.get("existing"))
        # Only on a link kvmesh did not create: there the dump is taken anyway (who added the
        # address), and others' addresses are expected; a link kvmesh made holds its own.
        on_link = [a for a in self.ctx.client.dump_addresses() if a.index == index] \
            if existing else []
        if existing and not self._added_by_kvmesh(on_link, cidr):
            log.info("not deleting address %s of %s: kvmesh did not add it", cidr, name)
            return
        purpose = f"delete address {cidr} from {name}"
        if interface.version == 4 and any(
                a.cidr != cidr and ipaddress.ip_interface(a.cidr).network == interface.network
                for a in on_link):
            with self._secondaries_promoted(name):
                self.ctx.client.delete_address(index, cidr, purpose)
        else:
            self.ctx.client.delete_address(index, cidr, purpose)

    def _added_by_kvmesh(self, on_link: list[Address], cidr: str) -> bool:
        proto = self.ctx.ownership.address_proto
        return any(address.cidr == cidr and address.proto == proto for address in on_link)

    @contextmanager
    def _secondaries_promoted(self, name: str) -> Iterator[None]:
        """``promote_secondaries`` on for link ``name`` while the block runs, then as it was."""
        procsys = ProcSys(self.ctx.client.netns)
        path = os.path.join(PROC_SYS, "net", "ipv4", "conf", name, "promote_secondaries")
        was = procsys.read([path])[path]
        if was in (None, "1"):
            yield  # already promoting (or no such file: nothing to set)
            return
        procsys.write(path, "1")
        try:
            yield
        finally:
            procsys.write(path, was)

"""Descriptors of host links: ``linux/interface/host/<name>`` and their addresses.

Host links are the links of the namespace kvmesh does not own (``lo``, physical NICs, links
created by hand or by other software). They are OBTAINED values: reported by the watcher's SB
notifications and by Retrieve (origin SB), never created, changed or deleted by kvmesh. Other
values may depend on them (a route via ``eth0``, a vxlan over ``eth0``, a VPP af-packet
interface). Each address of a host link is a derived value
``linux/interface/host/<name>/address/<cidr>``, so a route's gateway dependency can be met by a
host link's address.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from scheduler import ValueOrigin
from southbound.linux import keys
from southbound.linux.context import PluginContext
from southbound.linux.errors import InvalidValueError
from southbound.linux.observe import host_value

NAME = "linux-host-interface"
ADDRESS_NAME = "linux-host-interface-address"


class HostInterfaceDescriptor:
    name = NAME

    def __init__(self, context: PluginContext) -> None:
        self.ctx = context

    @staticmethod
    def key_selector(key: str) -> bool:
        return keys.parse_host_key(key) is not None

    @staticmethod
    def key_label(key: str) -> str:
        return keys.parse_host_key(key) or key

    @staticmethod
    def validate(key: str, value: Any) -> None:
        # Only called for values the NB tries to set: host links are read-only.
        raise InvalidValueError(key, {"(key)": "host links are read-only: kvmesh reports them "
                                               "and never configures them"})

    @staticmethod
    def derived_values(key: str, value: Any) -> list[tuple[str, Any]]:
        name = keys.parse_host_key(key)
        if name is None or not isinstance(value, dict):
            return []
        return [(keys.host_address_key(name, cidr), {"interface": name, "address": cidr})
                for cidr in value.get("addresses") or ()]

    def retrieve(self, correlate: Sequence[tuple[str, Any, Any]]
                 ) -> list[tuple[str, Any, Any, ValueOrigin]]:
        snapshot = self.ctx.snapshot(fresh=True)  # the first Retrieve of a refresh
        result = []
        for link in snapshot.links:
            if self.ctx.ownership.owns(link):
                continue
            value = host_value(link, snapshot.addresses.get(link.index, ()))
            result.append((keys.host_key(link.name), value, None, ValueOrigin.FROM_SB))
        return result


class HostAddressDescriptor:
    """Addresses derived from host links: dependency targets only, never configured."""

    name = ADDRESS_NAME

    @staticmethod
    def key_selector(key: str) -> bool:
        return keys.parse_host_address_key(key) is not None

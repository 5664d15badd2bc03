"""Linux southbound: descriptors that configure Linux networking over pyroute2 (netlink).

    from scheduler import KVScheduler
    from southbound.linux import register

    scheduler = KVScheduler()
    plugin = register(scheduler, netns="blue")   # None: the caller's own namespace
    ...
    plugin.close()

Models, keys and behaviour: docs/linux.md.
"""

from southbound.linux.context import KVMESH_LINK_GROUP, KVMESH_ROUTE_PROTO
from southbound.linux.errors import (
    InvalidValueError,
    NamespaceNotFoundError,
    NetlinkOperationError,
    OwnershipError,
    UnsupportedLinkTypeError,
)
from southbound.linux.plugin import LinuxPlugin, register

__all__ = [
    "KVMESH_LINK_GROUP",
    "KVMESH_ROUTE_PROTO",
    "InvalidValueError",
    "LinuxPlugin",
    "NamespaceNotFoundError",
    "NetlinkOperationError",
    "OwnershipError",
    "UnsupportedLinkTypeError",
    "register",
]

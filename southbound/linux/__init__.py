"""Linux southbound: descriptors that configure Linux networking over pyroute2 (netlink).

    from scheduler import KVScheduler
    from southbound.linux import register

    scheduler = KVScheduler()
    plugin = register(scheduler, netns="blue")   # None: the caller's own namespace
    ...
    plugin.close()

Models, keys and behaviour: docs/linux.md.
"""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from southbound.linux.context import KVMESH_LINK_GROUP, KVMESH_ROUTE_PROTO
    from southbound.linux.errors import (
        InvalidValueError,
        NamespaceNotFoundError,
        NetlinkOperationError,
        OwnershipError,
        UnsupportedLinkTypeError,
    )
    from southbound.linux.plugin import LinuxPlugin, register

# Loaded on first use (pyroute2 under them): the models (southbound.linux.models) import
# without the netlink machinery, which keeps the CLI quick to start.
_LAZY = {
    "KVMESH_LINK_GROUP": "context", "KVMESH_ROUTE_PROTO": "context",
    "InvalidValueError": "errors", "NamespaceNotFoundError": "errors",
    "NetlinkOperationError": "errors", "OwnershipError": "errors",
    "UnsupportedLinkTypeError": "errors", "LinuxPlugin": "plugin", "register": "plugin",
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'southbound.linux' has no attribute {name!r}")
    return getattr(importlib.import_module(f"southbound.linux.{_LAZY[name]}"), name)


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

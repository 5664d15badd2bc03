"""VPP southbound: descriptors that configure the VPP dataplane through the real `vpp_papi` client.

    plugin = southbound.vpp.register(scheduler, socket="/run/vpp/api.sock")
    plugin.on_connect(lambda: scheduler.resync({}, kind="downstream"))   # after a VPP restart
    ...
    plugin.close()

Models and keys: see `southbound.vpp.models` and docs/vpp.md.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from scheduler import KVScheduler
    from southbound.vpp.errors import (
        VppApiError,
        VppConnectionError,
        VppError,
        VppUnsupportedError,
    )
    from southbound.vpp.plugin import InterfaceEvent, VppPlugin

# Loaded on first use (vpp_papi under them): the models (southbound.vpp.models) import without
# the client machinery, which keeps the CLI quick to start.
_LAZY = {"VppApiError": "errors", "VppConnectionError": "errors", "VppError": "errors",
         "VppUnsupportedError": "errors", "InterfaceEvent": "plugin", "VppPlugin": "plugin"}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'southbound.vpp' has no attribute {name!r}")
    return getattr(importlib.import_module(f"southbound.vpp.{_LAZY[name]}"), name)

DEFAULT_SOCKET = "/run/vpp/api.sock"

__all__ = [
    "DEFAULT_SOCKET",
    "InterfaceEvent",
    "VppApiError",
    "VppConnectionError",
    "VppError",
    "VppPlugin",
    "VppUnsupportedError",
    "register",
]


def register(
    scheduler: KVScheduler,
    socket: str = DEFAULT_SOCKET,
    *,
    connect_timeout: float = 30.0,
    read_timeout: float = 5.0,
    client_name: str = "kvmesh",
    apidir: str | None = None,
) -> VppPlugin:
    """Connect to VPP, register the VPP descriptors on `scheduler`, subscribe to interface
    events, and return the plugin (call `close()` to disconnect).

    The API definitions are bootstrapped from VPP (`get_api_json`, VPP >= 24.06) unless `apidir`
    points at VPP's `.api.json` files. With `connect_timeout` > 0, wait that long for the first
    connection and raise `VppConnectionError` if VPP is not there; with 0, return at once and keep
    trying in the background (operations fail with a retriable error until connected).
    """
    from southbound.vpp.connection import VppConnection
    from southbound.vpp.errors import VppConnectionError
    from southbound.vpp.plugin import VppPlugin

    connection = VppConnection(
        socket, client_name=client_name, read_timeout=read_timeout, apidir=apidir
    )
    plugin = VppPlugin(scheduler, connection)
    connection.start()
    if connect_timeout > 0 and not connection.wait_connected(connect_timeout):
        connection.close()
        raise VppConnectionError(f"VPP at {socket} not reachable within {connect_timeout}s")
    try:
        plugin.register_descriptors()
    except BaseException:
        connection.close()
        raise
    return plugin

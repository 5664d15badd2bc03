"""The Linux configuration models, one module per model (``southbound.modelspec``):

    interface.py   linux/interface/<name>                 (+ derived addresses, bridge binding)
    route.py       linux/route/<table>/<dst cidr>/<dev>

each listed once in ``southbound.linux.registry``. The field types they share (interface names,
MACs, IPs, CIDRs, tables) live in ``southbound.linux.fields`` and are re-exported here (model
modules import them from there).
"""

from __future__ import annotations

from southbound.linux.fields import (
    IFNAMSIZ,
    U32_MAX,
    InterfaceAddress,
    InterfaceAddresses,
    InterfaceName,
    IPAddress,
    Mac,
    Network,
    Table,
    interface_name_problem,
    sort_addresses,
)

__all__ = [
    "IFNAMSIZ",
    "U32_MAX",
    "IPAddress",
    "InterfaceAddress",
    "InterfaceAddresses",
    "InterfaceName",
    "Mac",
    "Network",
    "Table",
    "interface_name_problem",
    "sort_addresses",
]

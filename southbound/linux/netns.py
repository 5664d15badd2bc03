"""Named network namespaces, as `ip netns` keeps them: where they live and whether one exists.

Kept apart from ``southbound.linux.netlink`` so that the parts of the southbound that only name
a namespace (the models, nftables, /proc/sys) do not load pyroute2.
"""

from __future__ import annotations

import os

from southbound.linux.errors import NamespaceNotFoundError

NETNS_DIR = "/run/netns"  # where `ip netns` and pyroute2 keep named namespaces


def require_netns(netns: str) -> None:
    """Fail clearly when a named namespace does not exist (pyroute2 would create it, or fail
    obscurely for a raw socket)."""
    if not os.path.exists(os.path.join(NETNS_DIR, netns)):
        raise NamespaceNotFoundError(netns)

"""The Linux plane's configuration models, listed once (see ``southbound.modelspec``).

The plugin registers ``REGISTRY.descriptors(context)``; the agent, the CLI's validation,
``kvmesh model schema`` and ``docs/models.md`` read ``REGISTRY``. Adding a model: write its module
under ``southbound/linux/models/`` and add its ``MODEL`` here. Order matters: it is the order
the descriptors are registered in (the interface model first: its host-link Retrieve takes the
dump the others reuse).
"""

from __future__ import annotations

from southbound.linux.context import PluginContext
from southbound.linux.models import interface, neighbor, route, rule, sysctl
from southbound.linux.models.nftables import MODEL as NFTABLES
from southbound.modelspec import ModelRegistry

REGISTRY: ModelRegistry[PluginContext] = ModelRegistry("linux", (
    interface.MODEL,
    route.MODEL,
    neighbor.MODEL,
    rule.MODEL,
    sysctl.MODEL,
    NFTABLES,
))

"""The Linux plane's configuration models, listed once (see ``southbound.modelspec``).

The plugin registers ``REGISTRY.descriptors(context)``; the agent, the CLI's validation,
``kvmesh model schema`` and ``docs/models.md`` read ``REGISTRY``. Adding a model: write its module
under ``southbound/linux/models/`` and add its ``MODEL`` here.
"""

from __future__ import annotations

import re

from southbound.linux.context import PluginContext
from southbound.linux.interface_model import parse_interface
from southbound.linux.models import LinuxInterface, LinuxRoute
from southbound.linux.models.nftables import MODEL as NFTABLES
from southbound.linux.route_model import parse_route
from southbound.modelspec import ModelRegistry, ModelSpec

REGISTRY: ModelRegistry[PluginContext] = ModelRegistry("linux", (
    ModelSpec("linux/interface", "linux/interface/<name>",
              re.compile(r"linux/interface/(?!host/)[^/]+"), LinuxInterface, parse_interface),
    ModelSpec("linux/route", "linux/route/<table>/<dst cidr>/<dev>",
              re.compile(r"linux/route/.+"), LinuxRoute, parse_route),
    NFTABLES,
))

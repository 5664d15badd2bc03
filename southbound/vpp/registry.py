"""The VPP plane's configuration models, listed once (see ``southbound.modelspec``).

The plugin registers ``REGISTRY.descriptors(context)``; the agent, the CLI's validation,
``kvmesh model schema`` and ``docs/models.md`` read ``REGISTRY``. Adding a model: write its module
under ``southbound/vpp/models/`` and add its ``MODEL`` here.
"""

from __future__ import annotations

import re

from southbound.modelspec import ModelRegistry, ModelSpec
from southbound.vpp.context import Context
from southbound.vpp.models import (
    VppBridgeDomain,
    VppInterface,
    VppRoute,
    abf,
    acl,
    bond_member,
    interface_conflicts,
    ip6_nd,
    ipsec_protection,
    ipsec_sa,
    ipsec_spd,
    l2fib,
    l3xc,
    lcp,
    nat44_global,
    nat44_interface,
    nat44_pool,
    nat44_static,
    neighbor,
    normalize_bd,
    normalize_interface,
    normalize_route,
    proxy_arp,
    proxy_arp_interface,
    punt_exception,
    punt_l4,
    span,
    srv6_localsid,
    srv6_policy,
    srv6_steering,
    vrf,
    wireguard_peer,
    xconnect,
)

REGISTRY: ModelRegistry[Context] = ModelRegistry("vpp", (
    ModelSpec("vpp/interface", "vpp/interface/<name>", re.compile(r"vpp/interface/[^/]+"),
              VppInterface, normalize_interface, conflicts=interface_conflicts),
    ModelSpec("vpp/bd", "vpp/bd/<name>", re.compile(r"vpp/bd/[^/]+"), VppBridgeDomain,
              normalize_bd),
    ModelSpec("vpp/route", "vpp/route/<vrf>/<dst cidr>/<next hop>", re.compile(r"vpp/route/.+"),
              VppRoute, normalize_route),
    vrf.MODEL,
    neighbor.MODEL,
    xconnect.MODEL,
    l2fib.MODEL,
    acl.MODEL,
    abf.MODEL,
    nat44_global.MODEL,
    nat44_interface.MODEL,
    nat44_pool.MODEL,
    nat44_static.MODEL,
    bond_member.MODEL,
    lcp.MODEL,
    ipsec_sa.MODEL,
    ipsec_spd.MODEL,
    ipsec_protection.MODEL,
    srv6_localsid.MODEL,
    srv6_policy.MODEL,
    srv6_steering.MODEL,
    proxy_arp.MODEL,
    proxy_arp_interface.MODEL,
    l3xc.MODEL,
    ip6_nd.MODEL,
    span.MODEL,
    punt_l4.MODEL,
    punt_exception.MODEL,
    wireguard_peer.MODEL,
))

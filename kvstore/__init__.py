"""KvStore: the replicated, eventually consistent key-value mesh (a sans-I/O core plus an
asyncio/ZeroMQ node).

This module is the public surface: code outside `kvstore/` (the CLI, the agent, tools) imports
from here only (`from kvstore import KvStoreClient, Value`), so the modules behind it (the core,
the node's shells, the generated Thrift code) can change without touching their users. A test
(tests/kvstore/test_surface.py) keeps kvmesh/cli and kvmesh/agent on this surface.

What it holds: the clients (`KvStoreClient`, `Subscription`, the asyncio `AsyncKvStoreClient`,
`KeyManager`) and their errors (`KvStoreError` and its subclasses); the node (`KvStoreNode`,
`run_node`) and its configuration (`NodeConfig`, `load_config`, `ConfigError`); CurveZMQ keys
(`ClientCurve`, `load_key_pair`, `generate`, ...); values and what the node reports (`Value`,
`make_value`, `next_version`, `TTL_INFINITY`, `Publication`, `PeerSpec`, `PeerState`,
`NodeInfo`, `StoreState`); the declared counters (`stats`), safe file writes (`safefs`) and
the membership records (`membership`).

Names load on first use (PEP 562): importing one part (say the CLI's `KvStoreClient`) does not
import the node, its storage or asyncio. The `TYPE_CHECKING` imports give type checkers the same
names; a test checks that both agree.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kvstore import config_layers, membership, safefs, stats, version
    from kvstore.aioclient import AsyncKvStoreClient, AsyncSubscription, KeyManager
    from kvstore.client import (
        DEFAULT_TIMEOUT_S,
        KvStoreAuthError,
        KvStoreClient,
        KvStoreError,
        KvStoreRequestError,
        KvStoreTimeout,
        KvStoreVersionExhausted,
        Subscription,
        check_response,
        make_value,
        next_version,
    )
    from kvstore.config import (
        DEFAULT_DATA_ROOT,
        LOG_LEVELS,
        NODE_SCHEMA,
        ConfigError,
        NodeConfig,
        PeerAddress,
        load_config,
        node_config,
        parse_peer,
        read_config_file,
        settle_data_dir,
    )
    from kvstore.curve import (
        ClientCurve,
        CurveError,
        KeyPair,
        NodeSecurity,
        client_curve,
        fingerprint,
        generate,
        is_loopback_host,
        load_key_pair,
        load_public_key,
        non_loopback,
    )
    from kvstore.envnames import KEY_FILE_ENV, SERVER_KEY_ENV
    from kvstore.gen.kvstore_thrift.ttypes import NodeInfo, PeerSpec, PeerState, Publication
    from kvstore.node import KvStoreNode, run_node
    from kvstore.node_ports import free_tcp_port
    from kvstore.sdnotify import ServiceNotifier
    from kvstore.signature import record_identity, store_signature
    from kvstore.storage import DB_FILE
    from kvstore.store_state import StoreState, store_is_current, why_not_current
    from kvstore.value import I64_MAX, I64_MIN, TTL_INFINITY, NoMergeReason, Value, with_ttl

# Where each public name lives (a submodule for `config_layers`, `membership`, `safefs`,
# `stats`, `version`).
_SURFACE: dict[str, tuple[str, ...]] = {
    "kvstore.config_layers": ("config_layers",),
    "kvstore.version": ("version",),
    "kvstore.safefs": ("safefs",),
    "kvstore.stats": ("stats",),
    "kvstore.membership": ("membership",),
    "kvstore.aioclient": ("AsyncKvStoreClient", "AsyncSubscription", "KeyManager"),
    "kvstore.client": (
        "DEFAULT_TIMEOUT_S", "KvStoreAuthError", "KvStoreClient", "KvStoreError",
        "KvStoreRequestError", "KvStoreTimeout", "KvStoreVersionExhausted", "Subscription",
        "check_response", "make_value", "next_version",
    ),
    "kvstore.config": ("DEFAULT_DATA_ROOT", "LOG_LEVELS", "NODE_SCHEMA", "ConfigError",
                       "NodeConfig", "PeerAddress", "load_config", "node_config", "parse_peer",
                       "read_config_file", "settle_data_dir"),
    "kvstore.envnames": ("KEY_FILE_ENV", "SERVER_KEY_ENV"),
    "kvstore.curve": (
        "ClientCurve", "CurveError", "KeyPair", "NodeSecurity", "client_curve", "fingerprint",
        "generate", "is_loopback_host", "load_key_pair", "load_public_key", "non_loopback",
    ),
    "kvstore.gen.kvstore_thrift.ttypes": ("NodeInfo", "PeerSpec", "PeerState", "Publication"),
    "kvstore.node": ("KvStoreNode", "run_node"),
    "kvstore.node_ports": ("free_tcp_port",),
    "kvstore.sdnotify": ("ServiceNotifier",),
    "kvstore.signature": ("record_identity", "store_signature"),
    "kvstore.storage": ("DB_FILE",),
    "kvstore.store_state": ("StoreState", "store_is_current", "why_not_current"),
    "kvstore.value": ("I64_MAX", "I64_MIN", "TTL_INFINITY", "NoMergeReason", "Value", "with_ttl"),
}
_MODULE_OF = {name: module for module, names in _SURFACE.items() for name in names}


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'kvstore' has no attribute {name!r}")
    loaded = importlib.import_module(module)
    value = loaded if module == f"kvstore.{name}" else getattr(loaded, name)
    globals()[name] = value  # next time without __getattr__
    return value


__all__ = [
    "DB_FILE",
    "DEFAULT_DATA_ROOT",
    "DEFAULT_TIMEOUT_S",
    "I64_MAX",
    "I64_MIN",
    "KEY_FILE_ENV",
    "LOG_LEVELS",
    "NODE_SCHEMA",
    "SERVER_KEY_ENV",
    "TTL_INFINITY",
    "AsyncKvStoreClient",
    "AsyncSubscription",
    "ClientCurve",
    "ConfigError",
    "CurveError",
    "KeyManager",
    "KeyPair",
    "KvStoreAuthError",
    "KvStoreClient",
    "KvStoreError",
    "KvStoreNode",
    "KvStoreRequestError",
    "KvStoreTimeout",
    "KvStoreVersionExhausted",
    "NoMergeReason",
    "NodeConfig",
    "NodeInfo",
    "NodeSecurity",
    "PeerAddress",
    "PeerSpec",
    "PeerState",
    "Publication",
    "ServiceNotifier",
    "StoreState",
    "Subscription",
    "Value",
    "check_response",
    "client_curve",
    "config_layers",
    "fingerprint",
    "free_tcp_port",
    "generate",
    "is_loopback_host",
    "load_config",
    "load_key_pair",
    "load_public_key",
    "make_value",
    "membership",
    "next_version",
    "node_config",
    "non_loopback",
    "parse_peer",
    "read_config_file",
    "record_identity",
    "run_node",
    "safefs",
    "settle_data_dir",
    "stats",
    "store_is_current",
    "store_signature",
    "version",
    "why_not_current",
    "with_ttl",
]

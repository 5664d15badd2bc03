"""Node configuration: defaults, a TOML file, validation.

Every knob has a safe default, so a node runs without a file. The file (docs/kvstore.md, "The
configuration file") holds the NodeConfig fields below as top-level keys, what else `kvmesh node
run` takes (`NODE_RUN_SETTINGS`: key file, authorized-keys directory, log level, ...) and a
`[peers]` table; kvmesh adds its `[agent]` section to the same schema. An unknown key or a value
of the wrong type or range is an error (ConfigError, with the file and the key named) rather than
being silently ignored, because a typo in a tuning knob is otherwise invisible.

Which settings a SIGHUP applies live is declared here, once, on each field (`LIVE`); the others
need a restart. Layering (defaults < file < flags) and printing: kvstore/config_layers.py.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvstore import safefs
from kvstore.config_layers import ConfigError, Effective, Schema, Setting, layer
from kvstore.filters import KeyFilter, leaf_filter
from kvstore.storage import DURABILITY_MODES

__all__ = ["DEFAULT_DATA_ROOT", "LIVE", "LOG_LEVELS", "NODE_SCHEMA", "ConfigError", "NodeConfig",
           "PeerAddress", "load_config", "node_config", "parse_peer", "read_config_file",
           "settle_data_dir"]

# A leaf's peers: one core node, or two (dual-homed: either may be down). docs/kvstore.md.
MAX_LEAF_PEERS = 2


# Field metadata of a setting a running node takes on SIGHUP (KvStoreNode.reconfigure applies
# exactly these); every other field needs a restart.
LIVE = {"live": True}
LOG_LEVELS = ("debug", "info", "warning", "error")


@dataclass(frozen=True)
class PeerAddress:
    cmd_url: str
    pub_url: str = ""


@dataclass(frozen=True)
class NodeConfig:
    # Identity and sockets (usually given on the command line).
    name: str = ""
    cmd_url: str = "tcp://127.0.0.1:60002"
    pub_url: str = "tcp://127.0.0.1:60001"
    peers: dict[str, PeerAddress] = field(default_factory=dict, metadata=LIVE)
    # TTL: each hop removes ttl_decrement_ms; keys with less than ttl_threshold_ms left are not
    # flooded (they would expire in flight and bounce).
    ttl_decrement_ms: int = field(default=1, metadata=LIVE)
    ttl_threshold_ms: int = field(default=500, metadata=LIVE)
    # Wall-clock offset between nodes taken as normal: a peer's timestamp further ahead than this
    # is counted as a clock problem (kvstore.ttl.clock_ahead). Transit time is charged to TTLs
    # whatever the value (kvstore/transit.py).
    max_clock_skew_ms: int = field(default=1_000, metadata=LIVE)
    # Anti-entropy: one full sync with a random peer every interval (+-20 % jitter); 0 disables.
    sync_interval_s: float = 60.0
    # A sync step not answered within this time fails the sync (peer back to IDLE, backoff).
    sync_timeout_ms: int = field(default=10_000, metadata=LIVE)
    sync_initial_backoff_ms: int = 1_000
    # Dead or silent peers: a peer not heard from for this long (it is probed with a NODE_INFO
    # after a third of it) is marked down: IDLE, counted (kvstore.peer_silent), logged, and
    # synced again as soon as it answers. 0 disables the probes (a dead peer then stays
    # INITIALIZED until a sync with it fails).
    peer_timeout_ms: int = field(default=9_000, metadata=LIVE)
    sync_max_backoff_ms: int = 60_000
    # Digest-tree leaves asked for in one KEY_DUMP: bounds the size of one sync message.
    sync_buckets_per_request: int = field(default=4_096, metadata=LIVE)
    # Flood rate limit (publications per second and burst); 0 disables it.
    flood_msg_per_sec: int = 0
    flood_msg_burst: int = 0
    # Largest accepted command message; larger ones get a TOO_LARGE error.
    max_message_bytes: int = 64 * 1024 * 1024
    # ZeroMQ high-water marks (messages queued per socket before sends fail or drop).
    zmq_hwm: int = 65_536
    # Durable store (kvstore/storage.py): the directory of the node's database; "" keeps the
    # store in memory only (`kvmesh node run --ephemeral`). durability: "sync" (a solicited
    # KEY_SET is answered once its key-values are fsynced), "batch" (written by a writer thread,
    # not waited for), "off" (memory only, like an empty data_dir). See docs/kvstore.md.
    data_dir: str = ""
    durability: str = "sync"
    # Start empty when the database is corrupt (moving it aside) instead of refusing to start.
    discard_corrupt_state: bool = False

    @property
    def durable(self) -> bool:
        return bool(self.data_dir) and self.durability != "off"
    # Hostile-input limits (docs/kvstore.md, "Limits"): connections to the command socket
    # (clients and peers alike), to the publication socket, and configured peers.
    max_clients: int = 1024
    max_subscribers: int = 512
    max_peers: int = field(default=512, metadata=LIVE)
    # Bytes queued for one subscriber that does not read before its publications are dropped.
    subscriber_queue_bytes: int = 32 * 1024 * 1024
    # Leaf node (docs/kvstore.md, "Leaf nodes"): stores, floods and syncs only the key-values
    # that start with one of key_prefix_filters OR whose originator is one of
    # key_originator_filters (or this node), and has at most MAX_LEAF_PEERS peers, its core
    # uplinks (dual-homed); it never forwards a peer's flood (a leaf is never a transit node).
    leaf: bool = False
    key_prefix_filters: tuple[str, ...] = ()
    key_originator_filters: tuple[str, ...] = ()

    @property
    def leaf_filter(self) -> KeyFilter | None:
        """What this node keeps when it is a leaf (None: everything)."""
        if not self.leaf:
            return None
        return leaf_filter(self.name, self.key_prefix_filters, self.key_originator_filters)

    def with_overrides(self, **changes: Any) -> NodeConfig:
        """A copy with the given (non-None) fields replaced, validated."""
        config = dataclasses.replace(
            self, **{k: v for k, v in changes.items() if v is not None}
        )
        config.validate()
        return config

    def validate(self, source: str = "config") -> None:
        for name, minimum in _INT_MINIMUMS.items():
            _check_int(source, name, getattr(self, name), minimum)
        if not isinstance(self.sync_interval_s, int | float) or isinstance(
            self.sync_interval_s, bool
        ) or self.sync_interval_s < 0:
            raise ConfigError(f"{source}: sync_interval_s must be a number >= 0")
        if self.sync_max_backoff_ms < self.sync_initial_backoff_ms:
            raise ConfigError(
                f"{source}: sync_max_backoff_ms must be >= sync_initial_backoff_ms"
            )
        if (self.flood_msg_per_sec > 0) != (self.flood_msg_burst > 0):
            raise ConfigError(
                f"{source}: flood_msg_per_sec and flood_msg_burst must both be set (or both 0)"
            )
        if self.durability not in DURABILITY_MODES:
            raise ConfigError(
                f"{source}: durability must be one of {', '.join(DURABILITY_MODES)},"
                f" got {self.durability!r}"
            )
        if not isinstance(self.data_dir, str):
            raise ConfigError(f"{source}: data_dir must be a string (a directory)")
        for url_field in ("cmd_url", "pub_url"):
            _check_url(source, url_field, getattr(self, url_field))
        if len(self.peers) > self.max_peers:
            raise ConfigError(
                f"{source}: {len(self.peers)} peers configured, more than max_peers"
                f" ({self.max_peers})"
            )
        for list_field in ("key_prefix_filters", "key_originator_filters"):
            items = getattr(self, list_field)
            if not isinstance(items, tuple) or not all(
                isinstance(item, str) and item for item in items
            ):
                raise ConfigError(f"{source}: {list_field} must be a list of non-empty strings")
            if items and not self.leaf:
                raise ConfigError(f"{source}: {list_field} needs leaf = true (--leaf)")
        if not isinstance(self.leaf, bool):
            raise ConfigError(f"{source}: leaf must be true or false")
        if self.leaf and len(self.peers) > MAX_LEAF_PEERS:
            raise ConfigError(
                f"{source}: leaf node {self.name!r} has {len(self.peers)} peers; a leaf takes at"
                f" most {MAX_LEAF_PEERS} (non-leaf nodes: its core uplinks) and never forwards"
                " between them: it stores only its share, so it must never be a transit node"
            )
        for peer, address in self.peers.items():
            if not peer:
                raise ConfigError(f"{source}: a peer needs a name")
            if peer == self.name and self.name:
                raise ConfigError(f"{source}: peer {peer!r} is this node itself")
            _check_url(source, f"peers.{peer}", address.cmd_url)


_INT_MINIMUMS: dict[str, int] = {
    "ttl_decrement_ms": 0,
    "ttl_threshold_ms": 0,
    "max_clock_skew_ms": 0,
    "sync_timeout_ms": 1,
    "sync_initial_backoff_ms": 1,
    "peer_timeout_ms": 0,
    "sync_max_backoff_ms": 1,
    "sync_buckets_per_request": 1,
    "flood_msg_per_sec": 0,
    "flood_msg_burst": 0,
    "max_message_bytes": 1024,
    "zmq_hwm": 64,  # below a few dozen, ZeroMQ refuses replies it has room for (measured)
    "max_clients": 1,
    "max_subscribers": 1,
    "max_peers": 1,
    "subscriber_queue_bytes": 64 * 1024,
}

_URL_SCHEMES = ("tcp://", "ipc://", "inproc://")


def _check_int(source: str, name: str, value: Any, minimum: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ConfigError(f"{source}: {name} must be an integer >= {minimum}, got {value!r}")


def _check_url(source: str, name: str, value: Any) -> None:
    if not isinstance(value, str) or not value.startswith(_URL_SCHEMES):
        raise ConfigError(
            f"{source}: {name} must be a ZeroMQ URL (tcp://HOST:PORT, ipc://PATH), got {value!r}"
        )


def parse_peer(text: str) -> tuple[str, PeerAddress]:
    """`NAME=CMD_URL[,PUB_URL]` -> (name, address); ValueError with a readable message."""
    name, sep, urls = text.partition("=")
    if not sep or not name or not urls:
        raise ValueError(f"peer must be NAME=CMD_URL[,PUB_URL], got {text!r}")
    cmd_url, _, pub_url = urls.partition(",")
    return name, PeerAddress(cmd_url=cmd_url, pub_url=pub_url)


# What `kvmesh node run` takes besides the NodeConfig fields (their flags have the same names,
# dashed: --key-file, --authorized-keys, --log-level, --insecure, ...).
NODE_RUN_SETTINGS = (
    Setting("ephemeral", False, help="keep the store in memory only (no data_dir)"),
    Setting("key_file", "", path=True, help="this node's CurveZMQ secret key"),
    Setting("authorized_keys", "", path=True, help="directory of allowed public keys by role"),
    Setting("insecure", False, help="plaintext, loopback only"),
    Setting("insecure_any_address", False, help="plaintext on any address"),
    Setting("log_level", "info", live=True, choices=LOG_LEVELS, help="the node's log level"),
)


# How `node run --check` lists them: who the node is and how it runs, then the tuning knobs.
_FIRST = ("name", "cmd_url", "pub_url", "data_dir", "ephemeral", "durability",
          "discard_corrupt_state", "key_file", "authorized_keys", "insecure",
          "insecure_any_address", "log_level", "leaf", "key_prefix_filters",
          "key_originator_filters")


def _node_settings() -> list[Setting]:
    settings = list(NODE_RUN_SETTINGS)
    for f in dataclasses.fields(NodeConfig):
        live = bool(f.metadata.get("live"))
        if f.name == "peers":
            settings.append(Setting("peers.*", "", live=live, help="CMD_URL[,PUB_URL]"))
        else:
            settings.append(Setting(f.name, f.default, live=live, path=f.name == "data_dir",
                                    choices=DURABILITY_MODES if f.name == "durability" else ()))
    first = {key: index for index, key in enumerate(_FIRST)}
    return sorted(settings, key=lambda s: first.get(s.key, len(first)))  # stable: fields' order


NODE_SCHEMA = Schema(_node_settings())


def read_config_file(path: str | os.PathLike[str], schema: Schema = NODE_SCHEMA) -> dict[str, Any]:
    """The settings of the TOML file at `path`, as dotted keys checked against `schema`: a file
    another user could have written (safefs.read_trusted), one that is not TOML, an empty one,
    an unknown key or a value of the wrong type is a one-line ConfigError naming the file.
    Relative paths in it are relative to the file's directory.

    Empty (no setting at all) is an error: it is what a truncated write leaves, and taken as
    "all defaults" it would drop every peer of a running node on SIGHUP."""
    where = os.fspath(path)
    try:
        data = safefs.read_trusted(path)
    except safefs.UnsafePathError as exc:
        raise ConfigError(str(exc)) from exc
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read: {exc.strerror or exc}") from exc
    try:
        document = tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{where}: invalid TOML: not UTF-8 ({exc.reason})") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{where}: invalid TOML: {exc}") from exc
    if not document:
        raise ConfigError(f"{where}: empty: no settings (a file cut short?); leave out --config "
                          "to run with the defaults")
    values = schema.flatten(document, where)
    base = Path(os.path.abspath(where)).parent
    for key, value in values.items():
        setting = schema.find(key)
        if setting is not None and setting.path and value and not os.path.isabs(value):
            values[key] = str(base / value)
    return values


def node_config(effective: Effective, where: str = "config") -> NodeConfig:
    """The NodeConfig of an effective configuration, validated (`where` names the file)."""
    values = {f.name: effective[f.name] for f in dataclasses.fields(NodeConfig)
              if f.name != "peers"}
    peers = {}
    for name, urls in effective.section("peers").items():
        cmd_url, _, pub_url = urls.partition(",")
        peers[name] = PeerAddress(cmd_url=cmd_url, pub_url=pub_url)
    if effective["ephemeral"]:
        values["data_dir"] = ""
    config = NodeConfig(peers=peers, **values)
    config.validate(where)
    return config


def load_config(path: str | Path | None) -> NodeConfig:
    """Defaults, overridden by the TOML file at `path` (if any), validated."""
    if path is None:
        config = NodeConfig()
        config.validate()
        return config
    return node_config(layer(NODE_SCHEMA, read_config_file(path), {}), str(path))


DEFAULT_DATA_ROOT = "/var/lib/kvmesh"


def settle_data_dir(effective: Effective, where: str) -> Effective:
    """`ephemeral` and `data_dir` given together: the higher layer wins (a flag over the file),
    and in one layer they exclude each other; neither given: DEFAULT_DATA_ROOT/NAME."""
    ephemeral_from = effective.sources.get("ephemeral", "default")
    data_dir_from = effective.sources.get("data_dir", "default")
    if effective["ephemeral"] and effective["data_dir"]:
        if ephemeral_from == data_dir_from:
            both = ("--ephemeral and --data-dir" if ephemeral_from == "flag"
                    else "ephemeral and data_dir")
            raise ConfigError(f"{where}: {both} exclude each other")
        if _RANK[ephemeral_from] > _RANK[data_dir_from]:
            return effective.with_value("data_dir", "", ephemeral_from)
        return effective.with_value("ephemeral", False, data_dir_from)
    if effective["ephemeral"]:
        return effective
    return effective.with_default("data_dir", str(Path(DEFAULT_DATA_ROOT) / effective["name"]))


_RANK = {"default": 0, "file": 1, "flag": 2}

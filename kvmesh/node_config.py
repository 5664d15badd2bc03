"""`kvmesh node run`'s whole configuration: the node's settings (kvstore) and its agent's.

One TOML file (`--config FILE`, docs/kvstore.md "The configuration file") holds everything the
command line takes: kvstore declares the node's part (`kvstore.NODE_SCHEMA`), this module adds
the `[agent]` section. `build_run_config` is the one place the effective configuration is made
and checked (defaults < file < flags, kvstore/config_layers.py): `node run` starts from it,
`node run --check` prints it, and SIGHUP (`Reloader`) rebuilds it from the re-read file.

The agent's settings all need a restart: the agent is a process of its own that takes them as
arguments when the node starts it, so a SIGHUP logs a changed one and leaves it as it runs.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvmesh.agent.liveness import HEARTBEAT_MS, HEARTBEAT_MS_RANGE
from kvstore import (
    KEY_FILE_ENV,
    LOG_LEVELS,
    NODE_SCHEMA,
    SERVER_KEY_ENV,
    ConfigError,
    CurveError,
    KvStoreNode,
    NodeConfig,
    NodeSecurity,
    config_layers,
    node_config,
    non_loopback,
    read_config_file,
    settle_data_dir,
    stats,
)

log = logging.getLogger(__name__)

Setting = config_layers.Setting
AGENT_SCHEMA = config_layers.Schema((
    Setting("agent.enabled", False, help="run this node's agent (--agent)"),
    Setting("agent.linux", False),
    Setting("agent.linux_netns", ""),
    Setting("agent.linux_state_dir", "", path=True),
    Setting("agent.vpp_socket", "", path=True),
    Setting("agent.http", ""),
    Setting("agent.http_cert", "", path=True),
    Setting("agent.http_key", "", path=True),
    Setting("agent.http_token_file", "", path=True),
    Setting("agent.http_read_token_file", "", path=True),
    Setting("agent.http_public_reads", False),
    Setting("agent.http_max_streams", 32),
    Setting("agent.downstream_resync_s", 300.0),
    Setting("agent.heartbeat_ms", HEARTBEAT_MS),
    Setting("agent.assume_current", False),
))
SCHEMA = NODE_SCHEMA + AGENT_SCHEMA

# `node run`'s option (its Python parameter name) -> the configuration key it sets; `--peer`
# sets `peers.NAME`. A test checks every option of `node run` is here or in NOT_SETTINGS.
FLAG_KEYS: dict[str, str] = {
    "name": "name", "cmd_url": "cmd_url", "pub_url": "pub_url", "data_dir": "data_dir",
    "ephemeral": "ephemeral", "discard_corrupt_state": "discard_corrupt_state", "leaf": "leaf",
    "key_prefix_filters": "key_prefix_filters",
    "originator_filters": "key_originator_filters", "node_key_file": "key_file",
    "authorized_keys": "authorized_keys", "insecure": "insecure",
    "insecure_any_address": "insecure_any_address", "log_level": "log_level",
    "agent": "agent.enabled",
    **{option: f"agent.{option}" for option in (
        "linux", "linux_netns", "linux_state_dir", "vpp_socket", "http", "http_cert", "http_key",
        "http_token_file", "http_read_token_file", "http_public_reads", "http_max_streams",
        "downstream_resync_s", "heartbeat_ms", "assume_current")},
}
NOT_SETTINGS = ("config_path", "check", "peers")


@dataclass(frozen=True)
class RunConfig:
    """The effective configuration of `node run`, checked; `node` is its kvstore part."""

    path: str | None  # the configuration file, if any
    effective: config_layers.Effective
    node: NodeConfig

    @property
    def agent(self) -> dict[str, Any]:
        return self.effective.section("agent")

    def render(self) -> str:
        return (f"# node {self.node.name}: the effective configuration; after each value, "
                "its source (default, file or flag)\n"
                + config_layers.render(SCHEMA, self.effective))


def flag_values(options: Mapping[str, Any], peers: tuple[str, ...]) -> dict[str, Any]:
    """The configuration keys set by the options given on the command line (`options`: only
    those; `peers`: the `--peer NAME=CMD_URL[,PUB_URL]` texts), checked like a file's."""
    values: dict[str, Any] = {}
    for option, value in options.items():
        key = FLAG_KEYS[option]
        setting = SCHEMA.find(key)
        assert setting is not None, key
        values[key] = setting.check(key, value, "command line")
    for text in peers:
        name, sep, urls = text.partition("=")
        if not sep or not name or not urls:
            raise ConfigError(f"peer must be NAME=CMD_URL[,PUB_URL], got {text!r}")
        values[f"peers.{name}"] = urls
    return values


def build_run_config(path: str | None, flags: Mapping[str, Any]) -> RunConfig:
    """Defaults < the file at `path` < `flags` (`flag_values`), derived defaults filled in,
    checked whole: ConfigError (one line naming the file and the key) if anything is wrong."""
    where = path if path is not None else "command line"
    file_values = read_config_file(path, SCHEMA) if path is not None else {}
    effective = config_layers.layer(SCHEMA, file_values, flags)
    if not effective["name"]:
        raise ConfigError(f"{where}: no node name: give --name NAME" if path is None else
                          f"{where}: no node name: give name = \"NAME\" in it, or --name NAME")
    effective = settle_data_dir(effective, where)
    effective = _agent_defaults(effective)
    _check_agent(effective, where)
    return RunConfig(path, effective, node_config(effective, where))


def _agent_defaults(effective: config_layers.Effective) -> config_layers.Effective:
    """Defaults that depend on other settings: the agent's durable state lives with the node's
    (kept by `cluster down`); a leaf running its agent keeps what the agent needs
    (docs/kvstore.md, "Leaf nodes")."""
    if effective["data_dir"]:
        effective = effective.with_default("agent.linux_state_dir",
                                           str(Path(effective["data_dir"]) / "agent"))
    if (effective["leaf"] and effective["agent.enabled"] and not effective["key_prefix_filters"]
            and not effective["key_originator_filters"]):
        from kvmesh.agent.keys import agent_leaf_prefixes

        effective = effective.with_default("key_prefix_filters",
                                           agent_leaf_prefixes(effective["name"]))
    return effective


def _check_agent(effective: config_layers.Effective, where: str) -> None:
    if not effective["agent.enabled"]:
        given = [_named(key, effective) for key in sorted(effective.values)
                 if key.startswith("agent.") and effective.given(key)]
        if given:
            raise ConfigError(f"{where}: agent option(s) {', '.join(given)} need --agent (or "
                              "enabled = true in [agent])")
    if effective["agent.downstream_resync_s"] < 1:
        raise ConfigError(f"{where}: agent.downstream_resync_s must be >= 1, got "
                          f"{effective['agent.downstream_resync_s']!r}")
    low, high = HEARTBEAT_MS_RANGE
    if not low <= effective["agent.heartbeat_ms"] <= high:
        raise ConfigError(f"{where}: agent.heartbeat_ms must be {low}..{high}, got "
                          f"{effective['agent.heartbeat_ms']!r}")
    if effective["agent.http"]:
        import click

        from kvmesh.cli.common import parse_http

        try:
            parse_http(effective["agent.http"])
        except click.BadParameter as exc:
            raise ConfigError(f"{where}: agent.http: expected ADDR:PORT, got "
                              f"{effective['agent.http']!r}") from exc


def _named(key: str, effective: config_layers.Effective) -> str:
    """`key` as its source spells it: `--linux-netns` on the command line, `agent.linux_netns`
    in the file."""
    if effective.sources[key] == "flag":
        return "--" + key.partition(".")[2].replace("_", "-")
    return key


def agent_args(run: RunConfig) -> list[str]:
    """The agent's command line (`kvmesh agent run ...`) for the agent settings, after checking
    the REST API's TLS and token files (ConfigError when unusable)."""
    agent = run.agent
    args: list[str] = []
    for option in ("linux_netns", "vpp_socket", "http", "linux_state_dir"):
        if agent[option]:
            args += [f"--{option.replace('_', '-')}", agent[option]]
    for option in ("linux", "assume_current"):
        if agent[option]:
            args.append(f"--{option.replace('_', '-')}")
    args += ["--downstream-resync-s", str(agent["downstream_resync_s"])]
    args += ["--heartbeat-ms", str(agent["heartbeat_ms"])]
    if agent["http_max_streams"] < 1:
        raise ConfigError(f"{run.path or 'command line'}: agent.http_max_streams must be >= 1, "
                          f"got {agent['http_max_streams']!r}")
    args += ["--http-max-streams", str(agent["http_max_streams"])]
    from kvmesh.agent.http_security import HttpConfigError
    from kvmesh.cli.common import check_http_security, parse_http

    try:
        args += check_http_security(
            parse_http(agent["http"] or None), agent["http_cert"] or None,
            agent["http_key"] or None, agent["http_token_file"] or None,
            agent["http_read_token_file"] or None, agent["http_public_reads"])
    except HttpConfigError as exc:
        raise ConfigError(f"{run.path or 'command line'}: {exc}") from exc
    return args


def node_security(run: RunConfig) -> NodeSecurity | None:
    """The node's CurveZMQ setup, or None for plaintext (only on loopback unless forced: a
    warning then); ConfigError with one line when the settings do not fit together."""
    values, config = run.effective, run.node
    key_file, authorized_keys = values["key_file"], values["authorized_keys"]
    plaintext = values["insecure"] or values["insecure_any_address"]
    if plaintext and (key_file or authorized_keys):
        raise ConfigError("node run: --insecure and --key-file/--authorized-keys exclude "
                          "each other")
    if plaintext:
        urls = [config.cmd_url, config.pub_url, *(p.cmd_url for p in config.peers.values())]
        remote = non_loopback(urls)
        if remote and not values["insecure_any_address"]:
            raise ConfigError(
                f"node run: --insecure is for loopback only ({', '.join(remote)} is not); run "
                "secured (--key-file, --authorized-keys) or force --insecure-any-address")
        if remote:
            log.warning("node %s runs PLAINTEXT and unauthenticated on %s: anyone who reaches "
                        "it can write", config.name, ", ".join(remote))
        return None
    if not key_file or not authorized_keys:
        raise ConfigError("node run: give --key-file FILE --authorized-keys DIR (secured; see "
                          "docs/security.md), or --insecure for a loopback-only plaintext node")
    try:
        return NodeSecurity(key_file, authorized_keys, config.name)
    except CurveError as exc:
        raise ConfigError(f"node run: {exc}") from exc


# ---------------------------------------------------------------------- SIGHUP


class Reloader:
    """SIGHUP: re-read the file, apply what is live, log what needs a restart (and leave it as
    it runs), keep everything as it was when the file is broken or a new peer is refused."""

    def __init__(self, run: RunConfig, flags: Mapping[str, Any]) -> None:
        self.running = run
        self.flags = dict(flags)

    def __call__(self, node: KvStoreNode) -> None:
        path = self.running.path
        if path is None:
            log.warning("SIGHUP: no configuration file (--config) to re-read: ignored")
            return
        try:
            new = build_run_config(path, self.flags)
            plan = config_layers.plan_reload(SCHEMA, self.running.effective, new.effective)
            # The live changes over the running restart-only values: checked as a whole (a
            # second peer for a leaf, say) before any of it is applied.
            running = RunConfig(path, plan.running, node_config(plan.running, path))
            node.reconfigure(running.node)
        except ConfigError as exc:
            node.counters[stats.CONFIG_RELOAD_FAILURES] += 1
            log.error("SIGHUP: %s; the running configuration is kept", exc)
            return
        for key, (old, value) in plan.live.items():
            log.info("SIGHUP: %s: %s -> %s (applied)", key, _shown(old), _shown(value))
        for key, (old, value) in plan.restart.items():
            log.warning("SIGHUP: %s: %s -> %s needs a restart: not applied (running %s)",
                        key, _shown(old), _shown(value), _shown(old))
        node.counters[stats.CONFIG_RESTART_PENDING] = len(plan.restart)
        node.counters[stats.CONFIG_RELOADS] += 1
        self.running = running
        log.info("SIGHUP: %s re-read: %d change(s) applied, %d need a restart", path,
                 len(plan.live), len(plan.restart))
        set_log_level(running.effective["log_level"])  # last: the lines above at the old one


def set_log_level(level: str) -> None:
    assert level in LOG_LEVELS
    logging.getLogger().setLevel(level.upper())


def _shown(value: Any) -> str:
    return "(none)" if value is None else repr(value)


def use_node_key_for_agent(run: RunConfig) -> None:
    """The agent authenticates with this node's own key: an operator bound to this node
    (kvstore.curve.NodeSecurity), the one client that may write status/<name>/."""
    key_file = run.effective["key_file"]
    if key_file:
        os.environ[KEY_FILE_ENV] = key_file
        os.environ[SERVER_KEY_ENV] = key_file

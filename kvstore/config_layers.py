"""One effective configuration from defaults, a TOML file and the command line (I/O-free).

DESIGN.md "Operating it": a node's configuration is one frozen value built from three layers in
this order of precedence (default < file < flag), each value remembering which layer gave it, so
that `kvmesh node run --check` can print it with its source and a SIGHUP can tell what changed.

A setting is declared once (`Setting`): its key, its default (whose type is the setting's type),
whether it applies live on SIGHUP or needs a restart, and whether it names a file (relative to
the configuration file when written there). kvstore declares the node's settings
(kvstore/config.py), kvmesh adds the agent's `[agent]` section (kvmesh/node_config.py); this
module knows neither.

Keys are flat and dotted: `name`, `agent.http`, and `peers.n2` for a member of a section of free
names (declared as `peers.*`). A TOML document flattens to them, and renders back from them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal

Source = Literal["default", "file", "flag"]
ANY_NAME = "*"  # the last part of a section of free names: `peers.*`


class ConfigError(ValueError):
    """Invalid configuration: the message (one line) names the file and the offending key."""


@dataclass(frozen=True)
class Setting:
    key: str  # "name", "agent.http", or "peers.*" (a section of free names)
    default: Any  # its type is the setting's: str, bool, int, float, tuple (of strings)
    live: bool = False  # applied on SIGHUP without a restart
    path: bool = False  # a file or directory: relative in a file means relative to the file
    choices: tuple[str, ...] = ()  # the only values a string may take (empty: any)
    help: str = ""

    @property
    def section(self) -> str:
        """"peers" for "peers.*" and "agent" for "agent.http"; "" for a top-level key."""
        return self.key.rpartition(".")[0]

    @property
    def free_names(self) -> bool:
        return self.key.endswith("." + ANY_NAME)

    def check(self, key: str, value: Any, where: str) -> Any:
        """`value` as this setting's type (a TOML array becomes a tuple), or ConfigError."""
        kind = type(self.default)
        if kind is bool:
            if not isinstance(value, bool):
                raise ConfigError(f"{where}: {key} must be true or false, got {value!r}")
        elif kind is int:
            if not isinstance(value, int) or isinstance(value, bool):
                raise ConfigError(f"{where}: {key} must be an integer, got {value!r}")
        elif kind is float:
            if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(
                    value):
                raise ConfigError(f"{where}: {key} must be a number, got {value!r}")
            value = float(value)
        elif kind is tuple:
            if not isinstance(value, list | tuple) or not all(
                    isinstance(item, str) for item in value):
                raise ConfigError(f"{where}: {key} must be a list of strings, got {value!r}")
            value = tuple(value)
        elif not isinstance(value, str):
            raise ConfigError(f"{where}: {key} must be a string, got {value!r}")
        elif self.choices and value not in self.choices:
            raise ConfigError(f"{where}: {key} must be one of {', '.join(self.choices)},"
                              f" got {value!r}")
        return value


class Schema:
    """The declared settings, in the order `render` prints them."""

    def __init__(self, settings: Iterable[Setting]) -> None:
        self.settings = tuple(settings)
        self._by_key = {s.key: s for s in self.settings}
        self.sections = {s.section for s in self.settings if s.section}

    def __add__(self, other: Schema) -> Schema:
        return Schema((*self.settings, *other.settings))

    def find(self, key: str) -> Setting | None:
        # A free name may hold dots itself (a peer named after its host: peers.h1.example.org).
        section = key.partition(".")[0]
        return self._by_key.get(key) or self._by_key.get(f"{section}.{ANY_NAME}")

    def flatten(self, document: Mapping[str, Any], where: str) -> dict[str, Any]:
        """A parsed TOML document as dotted keys, each checked against its declaration; an
        unknown key, or a section given as a value, is a ConfigError naming `where`."""
        flat: dict[str, Any] = {}
        unknown: list[str] = []
        for top, value in document.items():
            if top in self.sections:
                if not isinstance(value, dict):
                    raise ConfigError(f"{where}: {top} must be a table ([{top}])")
                items = [(f"{top}.{name}", item) for name, item in value.items()]
            else:
                items = [(top, value)]
            for key, item in items:
                setting = self.find(key)
                if setting is None:
                    unknown.append(key)
                elif setting.free_names and not key.partition(".")[2]:
                    raise ConfigError(f"{where}: {key}: a name may not be empty")
                else:
                    flat[key] = setting.check(key, item, where)
        if unknown:
            raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)}")
        return flat

    def is_live(self, key: str) -> bool:
        setting = self.find(key)
        return setting is not None and setting.live


@dataclass(frozen=True)
class Effective:
    """The configuration in force: every declared key's value and the layer it came from."""

    values: Mapping[str, Any]
    sources: Mapping[str, Source]

    def __getitem__(self, key: str) -> Any:
        return self.values[key]

    def section(self, name: str) -> dict[str, Any]:
        """The keys under `name.` (without that prefix)."""
        prefix = name + "."
        return {k[len(prefix):]: v for k, v in self.values.items() if k.startswith(prefix)}

    def given(self, key: str) -> bool:
        return self.sources.get(key, "default") != "default"

    def with_default(self, key: str, value: Any) -> Effective:
        """A copy whose `key` is `value` if no file or flag gave it (a default that depends on
        other settings: the data directory is named after the node)."""
        if self.given(key):
            return self
        return Effective(MappingProxyType({**self.values, key: value}), self.sources)

    def with_value(self, key: str, value: Any, source: Source) -> Effective:
        return Effective(MappingProxyType({**self.values, key: value}),
                         MappingProxyType({**self.sources, key: source}))


def layer(schema: Schema, file: Mapping[str, Any], flags: Mapping[str, Any]) -> Effective:
    """Defaults < file < flags (both already checked: `Schema.flatten`). A section of free names
    (peers) is merged name by name: a flag adds or replaces one member."""
    values: dict[str, Any] = {}
    sources: dict[str, Source] = {}
    for setting in schema.settings:
        if not setting.free_names:
            values[setting.key], sources[setting.key] = setting.default, "default"
    for source, given in (("file", file), ("flag", flags)):
        for key, value in given.items():
            values[key] = value
            sources[key] = source  # type: ignore[assignment]  # one of the two literals
    return Effective(MappingProxyType(values), MappingProxyType(sources))


# ---------------------------------------------------------------------- printing


def render(schema: Schema, effective: Effective) -> str:
    """TOML of every value, each line ending in `# default`, `# file` or `# flag` (tomllib
    reads it back to the same values)."""
    lines: list[str] = []
    by_section: dict[str, list[str]] = {}
    for key in _ordered_keys(schema, effective):
        setting = schema.find(key)
        assert setting is not None
        name = key[len(setting.section) + 1:] if setting.section else key
        line = f"{_toml_key(name)} = {_toml_value(effective[key])}  # {effective.sources[key]}"
        by_section.setdefault(setting.section, []).append(line)
    lines += by_section.pop("", [])
    for section in sorted(schema.sections, key=_section_order(schema)):
        lines += ["", f"[{section}]", *by_section.get(section, [])]
    return "\n".join(lines) + "\n"


def _ordered_keys(schema: Schema, effective: Effective) -> list[str]:
    keys: list[str] = []
    for setting in schema.settings:
        if setting.free_names:
            keys += sorted(f"{setting.section}.{name}" for name in
                           effective.section(setting.section))
        elif setting.key in effective.values:
            keys.append(setting.key)
    return keys


def _section_order(schema: Schema) -> Any:
    first = {s.section: i for i, s in reversed(list(enumerate(schema.settings)))}
    return lambda section: first[section]


def _toml_key(name: str) -> str:
    bare = name and all(c.isascii() and (c.isalnum() or c in "-_") for c in name)
    return name if bare else json.dumps(name)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, tuple | list):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    # JSON's string escapes are all valid in a TOML basic string.
    return json.dumps(str(value), ensure_ascii=False)


# ---------------------------------------------------------------------- SIGHUP


@dataclass(frozen=True)
class Reload:
    """What a re-read file changes: `live` is applied, `restart` is not (each key -> (running
    value, file value); None where the key is absent: a peer added or removed). `running` is
    the configuration in force afterwards: the new live values, the old restart-only ones."""

    live: Mapping[str, tuple[Any, Any]]
    restart: Mapping[str, tuple[Any, Any]]
    running: Effective


def plan_reload(schema: Schema, running: Effective, new: Effective) -> Reload:
    live: dict[str, tuple[Any, Any]] = {}
    restart: dict[str, tuple[Any, Any]] = {}
    values = dict(running.values)
    sources = dict(running.sources)
    for key in sorted(set(running.values) | set(new.values)):
        old_value, new_value = running.values.get(key), new.values.get(key)
        if old_value == new_value:
            if key in new.sources:
                sources[key] = new.sources[key]  # the same value, from another layer now
            continue
        if not schema.is_live(key):
            restart[key] = (old_value, new_value)
            continue
        live[key] = (old_value, new_value)
        if key in new.values:
            values[key], sources[key] = new_value, new.sources[key]
        else:
            del values[key], sources[key]
    return Reload(MappingProxyType(live), MappingProxyType(restart),
                  Effective(MappingProxyType(values), MappingProxyType(sources)))

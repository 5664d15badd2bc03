"""``linux/sysctl/<name>``: networking sysctls of the namespace, on an allow-list.

Only the names in ``GLOBAL`` and ``PER_LINK`` (``net.ipv4.conf.<dev>.<setting>``,
``net.ipv6.conf.<dev>.<setting>``; ``<dev>`` is a link, ``all`` or ``default``) can be set,
each with the values the kernel documents for it; anything else is INVALID. A per-link name
depends on its link (a kvmesh interface or a host link) and waits (PENDING) until it exists.

Ownership and restore (``southbound.linux.sysctl_originals``): before kvmesh first writes a
sysctl it records the value the namespace had, in a file that survives agent restarts; deleting
the value writes the original back and forgets it. The recorded names are kvmesh's sysctls:
Retrieve reads exactly those (so a warm restart with the same desired state writes nothing,
``sysctl -w`` behind kvmesh's back is drift a resync repairs, and a recorded sysctl no longer
desired is restored by a full resync). A write that would not change the value is skipped.

The files are read and written in the namespace by ``southbound.linux.procsys``.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import Field, ValidationInfo, field_validator

from scheduler import Dependency, Descriptor, ValueOrigin
from southbound.linux.context import PluginContext
from southbound.linux.errors import InvalidValueError, NetlinkOperationError, is_retriable_failure
from southbound.linux.interface import link_dependency
from southbound.linux.models import interface_name_problem
from southbound.linux.procsys import ProcSys, sysctl_path
from southbound.linux.sysctl_originals import SysctlOriginals, originals_file
from southbound.modelspec import ModelSpec
from southbound.validation import KEY_FIELD, StrictModel, validate

log = logging.getLogger(__name__)

NAME = "linux-sysctl"
PREFIX = "linux/sysctl/"
SHAPE = "linux/sysctl/<name>"
DEFAULT_STATE_DIR = "/var/lib/kvmesh/linux"
NAMESPACE_WIDE = ("all", "default")  # net.ipv4.conf.all.*, .default.*: no link to wait for


def _values(*allowed: int) -> tuple[str, ...]:
    return tuple(str(number) for number in allowed)


BOOLEAN = _values(0, 1)
# name -> allowed values (see the kernel's Documentation/networking/ip-sysctl.rst)
GLOBAL: dict[str, tuple[str, ...]] = {
    "net.ipv4.ip_forward": BOOLEAN,
    "net.ipv4.ip_nonlocal_bind": BOOLEAN,
    "net.ipv6.ip_nonlocal_bind": BOOLEAN,
    "net.ipv4.fib_multipath_hash_policy": _values(0, 1, 2, 3),
    "net.ipv6.fib_multipath_hash_policy": _values(0, 1, 2, 3),
}
# (prefix, setting) -> allowed values, for net.<family>.conf.<dev>.<setting>
PER_LINK: dict[tuple[str, str], tuple[str, ...]] = {
    ("net.ipv4.conf.", "rp_filter"): _values(0, 1, 2),
    ("net.ipv4.conf.", "proxy_arp"): BOOLEAN,
    ("net.ipv4.conf.", "accept_redirects"): BOOLEAN,
    ("net.ipv4.conf.", "send_redirects"): BOOLEAN,
    ("net.ipv4.conf.", "accept_local"): BOOLEAN,
    ("net.ipv4.conf.", "arp_ignore"): _values(0, 1, 2, 3, 8),
    ("net.ipv4.conf.", "arp_announce"): _values(0, 1, 2),
    ("net.ipv6.conf.", "forwarding"): BOOLEAN,
    ("net.ipv6.conf.", "disable_ipv6"): BOOLEAN,
    ("net.ipv6.conf.", "accept_ra"): _values(0, 1, 2),
    ("net.ipv6.conf.", "accept_redirects"): BOOLEAN,
    ("net.ipv6.conf.", "autoconf"): BOOLEAN,
}


@dataclass(frozen=True, slots=True)
class SysctlName:
    name: str
    path: str  # under /proc/sys
    dev: str | None  # the link a per-link name depends on
    allowed: tuple[str, ...]


def allowed_names() -> list[str]:
    """The allow-list as documented (``<dev>`` for the per-link names)."""
    return [*GLOBAL, *(f"{prefix}<dev>.{setting}" for prefix, setting in PER_LINK)]


def parse_sysctl_name(name: str) -> SysctlName | str:
    """The allow-list entry of ``name``, or what is wrong with the name (one line)."""
    if name in GLOBAL:
        return SysctlName(name, sysctl_path(name), None, GLOBAL[name])
    for (prefix, setting), allowed in PER_LINK.items():
        suffix = f".{setting}"
        if name.startswith(prefix) and name.endswith(suffix) and \
                len(name) > len(prefix) + len(suffix):
            # The device sits between the fixed parts and may itself contain dots (eth0.100).
            dev = name[len(prefix):-len(suffix)]
            problem = interface_name_problem(dev)
            if problem:
                return f"device {dev!r} in {name}: {problem}"
            path = os.path.join(sysctl_path(prefix.rstrip(".")), dev, setting)
            return SysctlName(name, path, None if dev in NAMESPACE_WIDE else dev, allowed)
    return (f"{name!r} is not on kvmesh's allow-list of networking sysctls "
            f"({', '.join(allowed_names())})")


class LinuxSysctl(StrictModel):
    """``linux/sysctl/<name>``: a networking sysctl of the namespace (allow-list: see
    docs/linux.md; per-link names such as ``net.ipv4.conf.<dev>.rp_filter`` wait for the link).
    Deleting the value restores what the namespace had before kvmesh first changed it."""

    value: str = Field(description="the value to write, as `sysctl` shows it, e.g. \"1\"")

    @field_validator("value")
    @classmethod
    def _allowed(cls, value: str, info: ValidationInfo) -> str:
        normal = " ".join(value.split())
        allowed: tuple[str, ...] = (info.context or {}).get("allowed") or ()
        if allowed and normal not in allowed:
            raise ValueError(f"must be one of {', '.join(allowed)}, got {value!r}")
        return normal


@dataclass(frozen=True, slots=True)
class SysctlSpec:
    name: str
    path: str
    dev: str | None
    value: str

    def to_value(self) -> dict[str, Any]:
        return {"value": self.value}


def sysctl_key(name: str) -> str:
    return f"{PREFIX}{name}"


def parse_sysctl(key: str, value: object) -> SysctlSpec:
    """Validate a sysctl value against its key; raise ``InvalidValueError`` naming every bad
    field (the name's problem under ``(key)``)."""
    if not key.startswith(PREFIX) or "/" in key[len(PREFIX):] or key == PREFIX:
        raise InvalidValueError(key, {KEY_FIELD: f"must be '{SHAPE}'"})
    entry = parse_sysctl_name(key[len(PREFIX):])
    problem = entry if isinstance(entry, str) else None
    model = validate(LinuxSysctl, key, value,
                     key_problems={KEY_FIELD: problem} if problem else None,
                     context={"allowed": () if isinstance(entry, str) else entry.allowed},
                     error=InvalidValueError)
    assert not isinstance(entry, str)
    return SysctlSpec(entry.name, entry.path, entry.dev, model.value)


class SysctlDescriptor:
    name = NAME

    def __init__(self, context: PluginContext) -> None:
        self.ctx = context
        self.procsys = ProcSys(context.client.netns)
        self._originals: SysctlOriginals | None = None
        self._originals_lock = threading.Lock()

    @property
    def originals(self) -> SysctlOriginals:
        """Loaded on first use: a bad file fails the sysctl operations, not the plugin."""
        with self._originals_lock:
            if self._originals is None:
                namespace_id = self.procsys.namespace_id()
                path = originals_file(self.ctx.state_dir or DEFAULT_STATE_DIR,
                                      self.ctx.client.netns, namespace_id)
                self._originals = SysctlOriginals(path, namespace_id)
            return self._originals

    @staticmethod
    def key_selector(key: str) -> bool:
        return key.startswith(PREFIX)

    def dependencies(self, key: str, value: Any) -> list[Dependency]:
        try:
            spec = parse_sysctl(key, value)
        except ValueError:
            return []
        return [] if spec.dev is None else [link_dependency(f"interface {spec.dev}", spec.dev)]

    def validate(self, key: str, value: Any) -> None:
        parse_sysctl(key, value)

    def equivalent(self, key: str, a: Any, b: Any) -> bool:
        try:
            return parse_sysctl(key, a) == parse_sysctl(key, b)
        except ValueError:
            return bool(a == b)

    def create(self, key: str, value: Any) -> None:
        spec = parse_sysctl(key, value)
        current = self.procsys.read([spec.path])[spec.path]
        if current is None:
            raise NetlinkOperationError(f"set sysctl {spec.name}", errno.ENOENT,
                                        f"{spec.path} does not exist in the namespace")
        # Recorded (and on disk) before the write: a crash in between loses nothing.
        self.originals.record(spec.name, current)
        if current != spec.value:
            self._write(spec.name, spec.path, spec.value)

    def update(self, key: str, old: Any, new: Any, metadata: Any) -> None:
        self.create(key, new)

    def delete(self, key: str, value: Any, metadata: Any) -> None:
        spec = parse_sysctl(key, value)
        original = self.originals.get(spec.name)
        if original is not None:
            current = self.procsys.read([spec.path])[spec.path]
            if current is not None and current != original:
                self._write(spec.name, spec.path, original)
        # Restored, or its link (and the setting with it) is gone.
        self.originals.forget([spec.name])

    def _write(self, name: str, path: str, value: str) -> None:
        if not self.procsys.write(path, value):
            raise NetlinkOperationError(f"set sysctl {name}", errno.ENOENT,
                                        f"{path} does not exist in the namespace")

    def retrieve(self, correlate: Sequence[tuple[str, Any, Any]]
                 ) -> list[tuple[str, Any, Any, ValueOrigin]]:
        entries = []
        for name in self.originals.names():
            entry = parse_sysctl_name(name)
            if isinstance(entry, str):
                log.warning("sysctl originals: %s is no longer allowed: %s", name, entry)
                continue
            entries.append(entry)
        current = self.procsys.read([entry.path for entry in entries])
        result: list[tuple[str, Any, Any, ValueOrigin]] = []
        gone = []
        for entry in entries:
            value = current[entry.path]
            if value is None:
                gone.append(entry.name)  # its link went away: nothing left to restore
                continue
            result.append((sysctl_key(entry.name), {"value": value}, None, ValueOrigin.FROM_NB))
        self.originals.forget(gone)
        return result


def descriptors(context: PluginContext) -> list[Descriptor]:
    sysctls = SysctlDescriptor(context)
    return [Descriptor(
        name=sysctls.name, key_selector=sysctls.key_selector, validate=sysctls.validate,
        create=sysctls.create, update=sysctls.update, delete=sysctls.delete,
        retrieve=sysctls.retrieve, dependencies=sysctls.dependencies,
        value_comparator=sysctls.equivalent, is_retriable_failure=is_retriable_failure,
    )]


MODEL: ModelSpec[PluginContext] = ModelSpec(
    "linux/sysctl", SHAPE, re.compile(r"linux/sysctl/[^/]+"), LinuxSysctl, parse_sysctl,
    descriptors,
    examples=(
        ("linux/sysctl/net.ipv4.ip_forward", {"value": "1"}),
        ("linux/sysctl/net.ipv4.conf.veth0.rp_filter", {"value": "2"}),
        ("linux/sysctl/net.ipv6.conf.all.forwarding", {"value": "1"}),
    ),
)

"""The values sysctls had before kvmesh changed them, kept in a small JSON file.

Deleting a ``linux/sysctl/<name>`` value restores what the namespace had before kvmesh first
wrote it, also after an agent restart: the original is recorded (file written and renamed into
place, mode 0600, directory 0700) *before* kvmesh writes the sysctl, and forgotten once it is
restored. The names recorded are also how kvmesh knows which sysctls are its own (Retrieve
reports only those): a sysctl kvmesh never wrote is never reported, changed back or restored.

The file is per namespace (``sysctl-originals-<netns>.json``; ``self-<inode>`` for the agent's
own namespace) and carries the namespace's identity (device and inode of its nsfs file): when
the namespace was deleted and made again, its sysctls started from the kernel's defaults and the
old records no longer apply, so they are discarded (logged). The kernel may reuse an inode
number, in which case stale records survive; they then hold the defaults a fresh namespace
starts with anyway.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
from typing import Any

log = logging.getLogger(__name__)

FORMAT = 1


def originals_file(directory: str, netns: str | None, namespace_id: str) -> str:
    label = netns if netns else f"self-{namespace_id.rsplit(':', 1)[-1]}"
    return os.path.join(directory, f"sysctl-originals-{label}.json")


class SysctlOriginals:
    """name -> original value, persisted at every change; thread-safe."""

    def __init__(self, path: str, namespace_id: str) -> None:
        self.path = path
        self.namespace_id = namespace_id
        self._lock = threading.Lock()
        self._values: dict[str, str] = self._load()

    def names(self) -> list[str]:
        with self._lock:
            return list(self._values)

    def get(self, name: str) -> str | None:
        with self._lock:
            return self._values.get(name)

    def record(self, name: str, original: str) -> None:
        """Remember ``original`` unless a value is already recorded (the first one counts)."""
        with self._lock:
            if name in self._values:
                return
            self._values[name] = original
            self._save()

    def forget(self, names: list[str]) -> None:
        with self._lock:
            if not any(name in self._values for name in names):
                return
            for name in names:
                self._values.pop(name, None)
            self._save()

    def _load(self) -> dict[str, str]:
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            return {}
        with os.fdopen(fd, encoding="utf-8") as handle:
            try:
                data: Any = json.load(handle)
            except ValueError as exc:
                raise ValueError(f"{self.path}: not a sysctl originals file: {exc}") from exc
        values = data.get("originals") if isinstance(data, dict) else None
        if not isinstance(values, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in values.items()):
            raise ValueError(f"{self.path}: not a sysctl originals file")
        if data.get("netns_id") != self.namespace_id:
            log.warning("%s: recorded for another namespace (%s, now %s): its %d originals "
                        "are discarded", self.path, data.get("netns_id"), self.namespace_id,
                        len(values))
            return {}
        return dict(values)

    def _save(self) -> None:
        directory = os.path.dirname(self.path) or "."
        os.makedirs(directory, mode=0o700, exist_ok=True)
        document = {"format": FORMAT, "netns_id": self.namespace_id, "originals": self._values}
        # mkstemp creates the file 0600 with O_EXCL; the rename replaces the old file atomically.
        fd, temporary = tempfile.mkstemp(prefix=".sysctl-", dir=directory)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump(document, handle, indent=1, sort_keys=True)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temporary, self.path)
        except BaseException:
            os.unlink(temporary)
            raise

"""Values per state and the oldest FAILED value of every node, kept up to date from the
publication stream (I/O-free): what the Cluster view shows, without reading and decoding every
`status/` key of the mesh for each render (100 000 of them take seconds).

Fed with the events of `GET /stream?prefix=status/&snapshot=1` (kvmesh.agent.sse) by the
agent's stream hub: the snapshot, `synced`, then the changes. Until `synced` (and after the
stream is lost: a `dropped` event) it is not `ready` and the console reads the mesh instead.
Written on the REST server's loop, read by its worker threads: one lock.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable
from typing import Any

Event = tuple[str, dict[str, Any]]


class StatusIndex:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: dict[str, tuple[str, str, float]] = {}  # key -> (state, error, time)
        self._counts: dict[str, Counter[str]] = {}  # node -> state -> values
        self._failed: dict[str, tuple[str, str, float]] = {}  # the FAILED ones of _values
        self._synced = threading.Event()
        self.started = False  # a subscription feeds it (or is being made)

    @property
    def ready(self) -> bool:
        return self._synced.is_set()

    def wait_ready(self, timeout: float) -> bool:
        return self._synced.wait(timeout)

    def apply(self, events: Iterable[Event]) -> None:
        with self._lock:
            for kind, data in events:
                if kind == "synced":
                    self._synced.set()
                elif kind == "dropped":
                    self._synced.clear()
                    self.started = False
                    self._values.clear()
                    self._counts.clear()
                    self._failed.clear()
                elif kind in ("value", "tombstone", "expired"):
                    self._set(data["key"], data.get("value") if kind == "value" else None)

    def _set(self, key: str, record: Any) -> None:
        parts = key.split("/", 2)
        if len(parts) < 3:
            return
        node = parts[1]
        old = self._values.pop(key, None)
        self._failed.pop(key, None)
        if old is not None:
            self._counts[node][old[0]] -= 1
        if isinstance(record, dict) and "b64" not in record:
            entry = (str(record.get("state", "?")), str(record.get("error") or ""),
                     float(record.get("time") or 0.0))
            self._values[key] = entry
            self._counts.setdefault(node, Counter())[entry[0]] += 1
            if entry[0] == "FAILED":
                self._failed[key] = entry

    def summary(self) -> dict[str, tuple[Counter[str], tuple[str, str, float] | None]]:
        """node -> (values per state, the oldest FAILED value: model key, error, since)."""
        with self._lock:
            out: dict[str, tuple[Counter[str], tuple[str, str, float] | None]] = {
                node: (+counts, None) for node, counts in self._counts.items() if +counts}
            for key, (_state, error, when) in self._failed.items():
                _status, node, model_key = key.split("/", 2)
                counts, oldest = out[node]
                if oldest is None or when < oldest[2]:
                    out[node] = (counts, (model_key, error, when))
            return out

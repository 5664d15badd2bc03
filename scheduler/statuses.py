"""The published value statuses: written by the worker thread, read from any thread.

Statuses are immutable (``ValueStatus`` is a NamedTuple); the table that holds them is not, so
every read and every write takes the table's lock. The lock is held only for dict operations,
never during a transaction: readers do not wait for a running transaction.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping

from scheduler.api import Key, ValueStatus


class StatusTable:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._statuses: dict[Key, ValueStatus] = {}

    def get(self, key: Key) -> ValueStatus | None:
        with self._lock:
            return self._statuses.get(key)

    def previous(self, keys: Iterable[Key]) -> dict[Key, ValueStatus]:
        """The current statuses of ``keys`` (those that have one)."""
        statuses = self._statuses
        with self._lock:
            return {key: found for key in keys if (found := statuses.get(key)) is not None}

    def all(self) -> list[ValueStatus]:
        """Every status, in no particular order: a new list (the statuses are immutable)."""
        with self._lock:
            return list(self._statuses.values())

    def publish(self, updates: Mapping[Key, ValueStatus | None]) -> None:
        """Set (or, for None, drop) the statuses of a finished transaction, all at once."""
        statuses = self._statuses
        with self._lock:
            for key, status in updates.items():
                if status is None:
                    statuses.pop(key, None)
                else:
                    statuses[key] = status

    def __len__(self) -> int:
        with self._lock:
            return len(self._statuses)

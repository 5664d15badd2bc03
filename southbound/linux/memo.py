"""A small cache of parsed values, so one dict is validated once, not once per callback.

The scheduler hands the same value object to ``validate``, ``dependencies``,
``derived_values``, ``create`` and the comparator. Entries are keyed by ``(key, id(value))`` and
keep a reference to the value, so an id cannot be reused while its entry lives; a hit also
checks identity. Values are never mutated by the scheduler or the descriptors (a rule of the
descriptor API), which is what makes identity a valid cache key.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

S = TypeVar("S")


class ParseCache(Generic[S]):
    def __init__(self, parse: Callable[[str, object], S], size: int = 65536) -> None:
        self._parse = parse
        self._size = size
        self._entries: OrderedDict[tuple[str, int], tuple[object, S]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str, value: object) -> S:
        """The parsed value (raises what ``parse`` raises; failures are not cached)."""
        slot = (key, id(value))
        with self._lock:
            entry = self._entries.get(slot)
            if entry is not None and entry[0] is value:
                self._entries.move_to_end(slot)
                return entry[1]
        parsed = self._parse(key, value)
        with self._lock:
            self._entries[slot] = (value, parsed)
            if len(self._entries) > self._size:
                self._entries.popitem(last=False)
        return parsed

    def put(self, key: str, value: object, parsed: S) -> None:
        """Record an already known parse result (e.g. a value Retrieve built from a spec)."""
        with self._lock:
            self._entries[(key, id(value))] = (value, parsed)
            if len(self._entries) > self._size:
                self._entries.popitem(last=False)

    def try_get(self, key: str, value: object) -> S | None:
        """The parsed value, or None when the value is invalid."""
        try:
            return self.get(key, value)
        except ValueError:
            return None

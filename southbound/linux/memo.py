"""A small cache of parsed values, so one dict is validated once, not once per callback.

The scheduler hands the same value object to ``validate``, ``dependencies``,
``derived_values``, ``create`` and the comparator. Entries are keyed by ``(key, id(value))`` and
keep a reference to the value, so an id cannot be reused while its entry lives; a hit also
checks identity. Values are never mutated by the scheduler or the descriptors (a rule of the
descriptor API), which is what makes identity a valid cache key.

No lock: single dict operations are atomic under the GIL, and a race can at worst parse a value
twice or evict an entry early.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

S = TypeVar("S")


class ParseCache(Generic[S]):
    def __init__(self, parse: Callable[[str, object], S], size: int = 65536) -> None:
        self._parse = parse
        self._size = size
        self._entries: dict[tuple[str, int], tuple[object, S]] = {}

    def get(self, key: str, value: object) -> S:
        """The parsed value (raises what ``parse`` raises; failures are not cached)."""
        entry = self._entries.get((key, id(value)))
        if entry is not None and entry[0] is value:
            return entry[1]
        parsed = self._parse(key, value)
        self.put(key, value, parsed)
        return parsed

    def put(self, key: str, value: object, parsed: S) -> None:
        """Record an already known parse result (e.g. a value Retrieve built from a spec)."""
        entries = self._entries
        entries[(key, id(value))] = (value, parsed)
        if len(entries) > self._size:
            # Oldest first (dicts keep insertion order): a bounded FIFO is enough here.
            for oldest in list(entries)[: len(entries) - self._size]:
                entries.pop(oldest, None)

    def validate(self, key: str, value: object) -> None:
        """A descriptor's ``validate``: parse (and cache) or raise the field-level error."""
        self.get(key, value)

    def equivalent(self, key: str, a: object, b: object) -> bool:
        """A descriptor's ``value_comparator``: equal canonical forms (raw equality when either
        side does not parse)."""
        first, second = self.try_get(key, a), self.try_get(key, b)
        if first is None or second is None:
            return bool(a == b)
        return first == second

    def try_get(self, key: str, value: object) -> S | None:
        """The parsed value, or None when the value is invalid."""
        try:
            return self.get(key, value)
        except ValueError:
            return None

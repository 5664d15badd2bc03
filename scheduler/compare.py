"""Value comparison for the graph walk and the refresh (one rule for both).

A comparison that raises (a broken ``value_comparator``, a value whose ``==`` raises) answers
"changed": the value is then re-applied, which is safe, where "unchanged" could leave a wrong
value in the southbound. It is never silent: each failure is logged and counted, and the engine
adds the count to the ``comparison_errors`` stat.
"""

from __future__ import annotations

import logging

from scheduler.api import Descriptor, Key, Value

log = logging.getLogger("scheduler")


class Comparisons:
    """Compares values for one walk or refresh, counting the comparisons that raised."""

    __slots__ = ("errors",)

    def __init__(self) -> None:
        self.errors = 0

    def same(self, key: Key, a: object, b: object) -> bool:
        """Whether two values (or metadata) of ``key`` are equal (``is``, then ``==``)."""
        if a is b:
            return True
        try:
            return bool(a == b)
        except Exception as exc:
            self._failed(key, "==", exc)
            return False

    def equivalent(self, descriptor: Descriptor, key: Key, a: Value, b: Value) -> bool:
        """Whether ``descriptor`` takes ``a`` and ``b`` for the same value of ``key``."""
        try:
            return descriptor.equivalent(key, a, b)
        except Exception as exc:
            self._failed(key, f"the value_comparator of descriptor {descriptor.name!r}", exc)
            return False

    def _failed(self, key: Key, comparison: str, exc: Exception) -> None:
        self.errors += 1
        log.warning(
            "comparing values of %s with %s failed (%r): treated as changed", key, comparison, exc
        )


def first(pair: tuple[Key, Value]) -> Key:
    """Sort key of (key, value) pairs, e.g. derived values."""
    return pair[0]

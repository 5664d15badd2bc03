"""Key filters of a leaf node (Open/R's KvStoreFilters with its default OR operator), sans-I/O.

A leaf stores, floods and syncs only the key-values its filters match; its peers send it only
those (docs/kvstore.md, "Leaf nodes"). A key-value matches when its key starts with one of the
key prefixes OR its originator is one of the originator ids. A leaf's filters always hold its
own name as an originator: what it originates is its own to keep, and a peer computing the
leaf's share (digests, dumps, floods) must count those keys too, or the two sides' digests
would never agree.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from kvstore.gen.kvstore_thrift.ttypes import KeyFilters
from kvstore.value import Value, is_wire_text

__all__ = ["KeyFilter", "filter_from_wire", "leaf_filter"]

# Bounds on what a peer may hand us as filters (each request carries them).
MAX_FILTER_ENTRIES = 256


@dataclass(frozen=True, slots=True)
class KeyFilter:
    """Prefixes OR originators. Hashable: a peer's filter keys a cached digest view."""

    key_prefixes: tuple[str, ...]
    originator_ids: frozenset[str]

    def matches(self, key: str, value: Value) -> bool:
        return key.startswith(self.key_prefixes) or value.originator_id in self.originator_ids

    def select(self, key_vals: Mapping[str, Value]) -> dict[str, Value]:
        """The key-values of `key_vals` this filter matches."""
        prefixes, origs = self.key_prefixes, self.originator_ids
        return {
            key: value
            for key, value in key_vals.items()
            if key.startswith(prefixes) or value.originator_id in origs
        }

    def to_wire(self) -> KeyFilters:
        return KeyFilters(
            key_prefixes=list(self.key_prefixes), originator_ids=sorted(self.originator_ids)
        )

    def describe(self) -> str:
        return (
            f"prefixes {list(self.key_prefixes)} or originators {sorted(self.originator_ids)}"
        )


def leaf_filter(name: str, prefixes: Iterable[str], originators: Iterable[str]) -> KeyFilter:
    """A leaf's filter: the configured prefixes and originators plus its own name."""
    return KeyFilter(
        tuple(sorted(set(prefixes))), frozenset(originators) | {name}
    )


def filter_from_wire(filters: KeyFilters | None) -> KeyFilter | None:
    """A peer's filters from a request or reply (None: none given); ValueError when malformed."""
    if filters is None:
        return None
    prefixes = filters.key_prefixes or []
    originators = filters.originator_ids or []
    if len(prefixes) + len(originators) > MAX_FILTER_ENTRIES:
        raise ValueError(f"too many key filters (more than {MAX_FILTER_ENTRIES})")
    for item in (*prefixes, *originators):
        if not isinstance(item, str) or not is_wire_text(item):
            raise ValueError(f"invalid key filter {item!r}")
    return KeyFilter(tuple(sorted(set(prefixes))), frozenset(originators))

"""Registered descriptors: key -> descriptor lookup, metadata maps, Retrieve ordering."""

from __future__ import annotations

import heapq
import threading
from collections.abc import ItemsView, Iterator, KeysView, Mapping, ValuesView
from graphlib import CycleError, TopologicalSorter

from scheduler.api import Descriptor, DescriptorError, Key, Metadata, Value, shown_value

_CACHE_LIMIT = 500_000


class AmbiguousKeyError(DescriptorError):
    """More than one descriptor selects the same key."""


class MetadataMap(Mapping[str, Metadata]):
    """A descriptor's metadata, label -> metadata: a live read-only view, safe from any thread.

    Live, because descriptors look up the metadata of values created earlier in the same
    transaction (e.g. an interface's sw_if_index for its address). Every lookup takes the lock
    the worker writes under; iterating, ``keys()``, ``items()``, ``values()`` and ``copy()``
    work on a copy taken under it at one instant, so a reader never sees the map change
    under it (and never gets "dictionary changed size during iteration").
    """

    __slots__ = ("_backing", "_lock")

    def __init__(self, backing: dict[str, Metadata], lock: threading.Lock) -> None:
        self._backing = backing
        self._lock = lock

    def __getitem__(self, label: str) -> Metadata:
        with self._lock:
            return self._backing[label]

    def get(self, label: str, default: Metadata = None) -> Metadata:
        with self._lock:
            return self._backing.get(label, default)

    def __contains__(self, label: object) -> bool:
        with self._lock:
            return label in self._backing

    def __len__(self) -> int:
        with self._lock:
            return len(self._backing)

    def __iter__(self) -> Iterator[str]:
        return iter(self.copy())

    def copy(self) -> dict[str, Metadata]:
        """A snapshot: a new dict, unaffected by later transactions."""
        with self._lock:
            return dict(self._backing)

    def keys(self) -> KeysView[str]:
        return self.copy().keys()

    def items(self) -> ItemsView[str, Metadata]:
        return self.copy().items()

    def values(self) -> ValuesView[Metadata]:
        return self.copy().values()

    def __repr__(self) -> str:
        return f"MetadataMap({self.copy()!r})"


class Registry:
    def __init__(self) -> None:
        self._descriptors: dict[str, Descriptor] = {}
        self._cache: dict[Key, Descriptor | None] = {}
        self._metadata: dict[str, dict[str, Metadata]] = {}
        self._metadata_lock = threading.Lock()  # readers of MetadataMap: any thread
        self._retrieve_order: list[Descriptor] = []

    def register(self, descriptor: Descriptor) -> None:
        if not isinstance(descriptor, Descriptor):
            raise DescriptorError(f"expected a Descriptor, got {type(descriptor).__name__}")
        if not descriptor.name:
            raise DescriptorError("descriptor name must not be empty")
        if descriptor.name in self._descriptors:
            raise DescriptorError(f"descriptor {descriptor.name!r} is already registered")
        if not callable(descriptor.key_selector):
            raise DescriptorError(f"descriptor {descriptor.name!r}: key_selector must be callable")
        candidate = dict(self._descriptors)
        candidate[descriptor.name] = descriptor
        order = _retrieve_order(candidate)
        self._descriptors = candidate
        self._retrieve_order = order
        self._cache.clear()
        if descriptor.with_metadata:
            with self._metadata_lock:
                self._metadata[descriptor.name] = {}

    def get(self, name: str) -> Descriptor | None:
        return self._descriptors.get(name)

    @property
    def descriptors(self) -> list[Descriptor]:
        return list(self._descriptors.values())

    def retrieve_order(self) -> list[Descriptor]:
        """Descriptors in an order where each comes after its ``retrieve_dependencies``."""
        return list(self._retrieve_order)

    def lookup(self, key: Key) -> Descriptor | None:
        """The descriptor owning ``key``; raises AmbiguousKeyError if several claim it."""
        try:
            return self._cache[key]
        except KeyError:
            pass
        owners = []
        for descriptor in self._descriptors.values():
            try:
                selected = descriptor.key_selector(key)
            except Exception as exc:
                raise DescriptorError(
                    f"key_selector of descriptor {descriptor.name!r} failed on {key!r}: {exc!r}"
                ) from exc
            if selected:
                owners.append(descriptor)
        if len(owners) > 1:
            names = ", ".join(d.name for d in owners)
            raise AmbiguousKeyError(f"key {key!r} is selected by several descriptors: {names}")
        found = owners[0] if owners else None
        if len(self._cache) >= _CACHE_LIMIT:
            self._cache.clear()
        self._cache[key] = found
        return found

    def shown(self, key: Key, value: Value) -> Value:
        """``value`` of ``key`` as its descriptor lets it be shown (``Descriptor.redact``)."""
        try:
            descriptor = self.lookup(key)
        except DescriptorError:
            return value
        return shown_value(descriptor, key, value)

    # -- metadata maps ---------------------------------------------------------------------

    def metadata_map(self, name: str) -> MetadataMap | None:
        with self._metadata_lock:
            backing = self._metadata.get(name)
        return None if backing is None else MetadataMap(backing, self._metadata_lock)

    def set_metadata(self, descriptor: Descriptor, label: str, metadata: Metadata) -> None:
        backing = self._metadata.get(descriptor.name)
        if backing is not None:
            with self._metadata_lock:
                backing[label] = metadata

    def drop_metadata(self, descriptor: Descriptor, label: str) -> None:
        backing = self._metadata.get(descriptor.name)
        if backing is not None:
            with self._metadata_lock:
                backing.pop(label, None)


def _retrieve_order(descriptors: dict[str, Descriptor]) -> list[Descriptor]:
    """Each descriptor after its `retrieve_dependencies`; among those free to go next, the
    smallest name first (Kahn's algorithm over a heap), so the order does not depend on the
    order of registration."""
    deps: TopologicalSorter[str] = TopologicalSorter()
    for name, descriptor in descriptors.items():
        # Dependencies on descriptors not registered (yet) do not constrain the order.
        deps.add(name, *(r for r in descriptor.retrieve_dependencies if r in descriptors))
    try:
        deps.prepare()
    except CycleError as exc:
        # graphlib lists the cycle with each name before the one that depends on it.
        needs = " needs ".join(repr(name) for name in reversed(exc.args[1]))
        raise DescriptorError(f"cycle in retrieve_dependencies: {needs}") from exc
    ready = list(deps.get_ready())
    heapq.heapify(ready)
    ordered = []
    while ready:
        name = heapq.heappop(ready)
        ordered.append(descriptors[name])
        deps.done(name)
        for freed in deps.get_ready():
            heapq.heappush(ready, freed)
    return ordered

"""In-memory graph of values with the indexes the planner needs, and an undo journal.

Sans-I/O: nodes, reverse-dependency indexes and a journal of first-touch snapshots, so a
simulation can run on the live graph and be rolled back in O(nodes it touched).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from sortedcontainers import SortedList

from scheduler.api import (
    Dependency,
    Descriptor,
    Key,
    Metadata,
    RetryPolicy,
    TxnOperation,
    Value,
    ValueOrigin,
    ValueState,
)

DerivedPairs = tuple[tuple[Key, Value], ...]


class Node:
    """One key-value pair of the graph and everything the scheduler knows about it."""

    __slots__ = (
        "available",
        "deps",
        "derived",
        "derived_from",
        "descriptor",
        "details",
        "error",
        "key",
        "label",
        "last_op",
        "metadata",
        "nb_seq",
        "nb_value",
        "origin",
        "relations_of",
        "retry_attempt",
        "retry_policy",
        "state",
        "value",
    )

    def __init__(
        self,
        key: Key,
        value: Value,
        descriptor: Descriptor | None,
        origin: ValueOrigin,
        derived_from: Key | None = None,
    ) -> None:
        self.key = key
        self.value = value
        self.descriptor = descriptor
        self.label = descriptor.label_of(key) if descriptor is not None else key
        self.origin = origin
        self.derived_from = derived_from
        self.metadata: Metadata = None
        self.state = ValueState.NONEXISTENT
        self.error: BaseException | None = None
        self.last_op = TxnOperation.UNDEFINED
        self.details: tuple[str, ...] = ()
        # True when the value exists in SB (created, obtained, discovered): only available
        # values satisfy dependencies.
        self.available = False
        self.deps: tuple[Dependency, ...] = ()
        self.derived: DerivedPairs = ()
        # The value object deps/derived were computed from (lets an unchanged value skip the
        # descriptor callbacks).
        self.relations_of: Value = None
        self.nb_value: Value = None
        self.nb_seq = -1
        self.retry_policy: RetryPolicy | None = None
        self.retry_attempt = 0

    def clone(self) -> Node:
        twin = Node.__new__(Node)
        for slot in Node.__slots__:
            setattr(twin, slot, getattr(self, slot))
        return twin

    @property
    def is_derived(self) -> bool:
        return self.derived_from is not None

    def __repr__(self) -> str:
        return f"Node({self.key!r}, {self.state.name}, available={self.available})"


class Graph:
    """Nodes by key plus the reverse indexes: who depends on key K, which AnyOf may match K."""

    def __init__(self) -> None:
        self.nodes: dict[Key, Node] = {}
        self.keys: SortedList = SortedList()
        self._static_dependents: dict[Key, set[Key]] = {}
        self._anyof_by_prefix: dict[str, set[Key]] = {}
        self._prefix_lengths: dict[int, int] = {}  # prefix length -> number of registrations
        self._anyof_unprefixed: dict[Key, int] = {}  # dependent key -> registrations
        self._by_descriptor: dict[str, set[Key]] = {}
        self._journal: dict[Key, Node | None] | None = None

    # -- reading ---------------------------------------------------------------------------

    def get(self, key: Key) -> Node | None:
        return self.nodes.get(key)

    def __len__(self) -> int:
        return len(self.nodes)

    def __contains__(self, key: object) -> bool:
        return key in self.nodes

    def keys_with_prefix(self, prefix: str) -> Iterator[Key]:
        for key in self.keys.irange(minimum=prefix):
            if not key.startswith(prefix):
                return
            yield key

    def keys_of_descriptor(self, name: str) -> set[Key]:
        return self._by_descriptor.get(name, set())

    def dependents_of(self, key: Key) -> set[Key]:
        """Keys whose dependencies may reference ``key`` (a superset: callers re-check)."""
        found: set[Key] = set()
        static = self._static_dependents.get(key)
        if static:
            found |= static
        if self._prefix_lengths:
            by_prefix = self._anyof_by_prefix
            for length in self._prefix_lengths:
                hit = by_prefix.get(key[:length])
                if hit:
                    found |= hit
        if self._anyof_unprefixed:
            found.update(self._anyof_unprefixed)
        return found

    # -- writing ---------------------------------------------------------------------------

    def add(self, node: Node) -> None:
        key = node.key
        if key in self.nodes:
            raise KeyError(f"node {key!r} already in the graph")
        journal = self._journal
        if journal is not None and key not in journal:
            journal[key] = None
        self.nodes[key] = node
        self._index(node)

    def remove(self, key: Key) -> Node | None:
        node = self.nodes.get(key)
        if node is None:
            return None
        journal = self._journal
        if journal is not None and key not in journal:
            journal[key] = node.clone()
        self._unindex(node)
        del self.nodes[key]
        return node

    def touch(self, node: Node) -> None:
        """Call before mutating ``node`` in place: lets a journal restore it."""
        journal = self._journal
        if journal is not None and node.key not in journal:
            journal[node.key] = node.clone()

    def set_deps(self, node: Node, deps: tuple[Dependency, ...]) -> None:
        if deps == node.deps:
            return
        self.touch(node)
        self._unindex_deps(node)
        node.deps = deps
        self._index_deps(node)

    # -- journal (simulation) --------------------------------------------------------------

    def begin_journal(self) -> None:
        if self._journal is not None:
            raise RuntimeError("journal already open")
        self._journal = {}

    def rollback(self) -> None:
        """Restore every node touched since ``begin_journal`` and close the journal."""
        journal = self._journal
        self._journal = None
        if journal is None:
            return
        for key, old in journal.items():
            current = self.nodes.pop(key, None)
            if current is not None:
                self._unindex(current)
            if old is not None:
                self.nodes[key] = old
                self._index(old)

    def end_journal(self) -> None:
        self._journal = None

    @property
    def journaling(self) -> bool:
        return self._journal is not None

    # -- indexes ---------------------------------------------------------------------------

    def _index(self, node: Node) -> None:
        self.keys.add(node.key)
        if node.descriptor is not None:
            self._by_descriptor.setdefault(node.descriptor.name, set()).add(node.key)
        self._index_deps(node)

    def _unindex(self, node: Node) -> None:
        self.keys.remove(node.key)
        if node.descriptor is not None:
            keys = self._by_descriptor.get(node.descriptor.name)
            if keys is not None:
                keys.discard(node.key)
        self._unindex_deps(node)

    def _index_deps(self, node: Node) -> None:
        key = node.key
        for dep in node.deps:
            if dep.key is not None:
                self._static_dependents.setdefault(dep.key, set()).add(key)
            elif dep.key_prefixes:
                for prefix in dep.key_prefixes:
                    self._anyof_by_prefix.setdefault(prefix, set()).add(key)
                    length = len(prefix)
                    self._prefix_lengths[length] = self._prefix_lengths.get(length, 0) + 1
            else:
                self._anyof_unprefixed[key] = self._anyof_unprefixed.get(key, 0) + 1

    def _unindex_deps(self, node: Node) -> None:
        key = node.key
        for dep in node.deps:
            if dep.key is not None:
                _discard(self._static_dependents, dep.key, key)
            elif dep.key_prefixes:
                for prefix in dep.key_prefixes:
                    _discard(self._anyof_by_prefix, prefix, key)
                    length = len(prefix)
                    left = self._prefix_lengths[length] - 1
                    if left:
                        self._prefix_lengths[length] = left
                    else:
                        del self._prefix_lengths[length]
            else:
                left = self._anyof_unprefixed[key] - 1
                if left:
                    self._anyof_unprefixed[key] = left
                else:
                    del self._anyof_unprefixed[key]

    def iter_nodes(self) -> Iterable[Node]:
        return self.nodes.values()


def _discard(index: dict[Key, set[Key]], at: Key, key: Key) -> None:
    members = index.get(at)
    if members is None:
        return
    members.discard(key)
    if not members:
        del index[at]

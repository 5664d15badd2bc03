"""Graph refresh: update the graph from what descriptors' Retrieve reports really exists in SB."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

from scheduler.api import (
    Dependency,
    Descriptor,
    Key,
    TxnOperation,
    Value,
    ValueOrigin,
    ValueState,
)
from scheduler.compare import Comparisons, first
from scheduler.graph import DerivedPairs, Graph, Node
from scheduler.registry import Registry
from scheduler.transitions import Event, settle_node
from scheduler.walk import MAX_DERIVATION_DEPTH, base_of

log = logging.getLogger("scheduler.refresh")

NB = ValueOrigin.FROM_NB
SB = ValueOrigin.FROM_SB


@dataclass
class RefreshResult:
    touched: dict[Key, None] = field(default_factory=dict)
    availability_changed: dict[Key, None] = field(default_factory=dict)
    retrieve_errors: dict[str, BaseException] = field(default_factory=dict)
    rejected: int = 0  # retrieved items refused (each logged with the reason)
    comparisons: Comparisons = field(default_factory=Comparisons)


class Refresher:
    """Runs Retrieve for descriptors and reconciles the graph with the result (no CRUD)."""

    def __init__(self, graph: Graph, registry: Registry, *, update_metadata_maps: bool) -> None:
        self.graph = graph
        self.registry = registry
        self.update_metadata_maps = update_metadata_maps
        self.result = RefreshResult()

    def refresh_all(
        self, nb_values: Mapping[Key, Value] | None = None, scope: set[str] | None = None
    ) -> RefreshResult:
        """Refresh every descriptor with Retrieve (or those named in ``scope``);
        ``nb_values`` are correlated (resync)."""
        by_descriptor: dict[str, dict[Key, Value]] = {}
        if nb_values:
            for key, value in nb_values.items():
                try:
                    descriptor = self.registry.lookup(key)
                except ValueError:
                    continue
                if descriptor is not None and value is not None:
                    by_descriptor.setdefault(descriptor.name, {})[key] = value
        for descriptor in self.registry.retrieve_order():
            if scope is not None and descriptor.name not in scope:
                continue
            if descriptor.retrieve is not None:
                self._refresh_descriptor(descriptor, by_descriptor.get(descriptor.name, {}), None)
        return self.result

    def refresh_keys(self, keys: set[Key]) -> RefreshResult:
        """Refresh only ``keys`` (base keys), e.g. after their operation failed."""
        groups: dict[str, set[Key]] = {}
        for key in keys:
            node = self.graph.get(key)
            if node is None or node.descriptor is None or node.descriptor.retrieve is None:
                continue
            groups.setdefault(node.descriptor.name, set()).add(key)
        for descriptor in self.registry.retrieve_order():
            only = groups.get(descriptor.name)
            if only:
                self._refresh_descriptor(descriptor, {}, only)
        return self.result

    # -- one descriptor --------------------------------------------------------------------

    def _refresh_descriptor(
        self, descriptor: Descriptor, nb_values: dict[Key, Value], only: set[Key] | None
    ) -> None:
        graph = self.graph
        own_keys = [
            key
            for key in graph.keys_of_descriptor(descriptor.name)
            if graph.nodes[key].derived_from is None
        ]
        correlate: dict[Key, tuple[Value, object]] = {}
        for key in own_keys:
            node = graph.nodes[key]
            if node.available:
                correlate[key] = (node.value, node.metadata)
            elif node.nb_value is not None:
                correlate[key] = (node.nb_value, None)
        for key, value in nb_values.items():
            correlate.setdefault(key, (value, None))
        if only is not None:
            correlate = {key: correlate[key] for key in only if key in correlate}
        assert descriptor.retrieve is not None
        try:
            retrieved = list(
                descriptor.retrieve(
                    [(key, value, meta) for key, (value, meta) in correlate.items()]
                )
                or ()
            )
        except Exception as exc:  # Retrieve failure is non-fatal: the graph is left as it was
            log.warning("descriptor %s: failed to retrieve values: %s", descriptor.name, exc)
            self.result.retrieve_errors[descriptor.name] = exc
            return

        seen: set[Key] = set()
        for item in retrieved:
            try:
                key, value, metadata, origin = item
            except (TypeError, ValueError):
                self._reject(descriptor, f"malformed Retrieve item {item!r}")
                continue
            if not isinstance(key, str) or not key or value is None or key in seen:
                self._reject(descriptor, f"invalid or duplicate Retrieve item for key {key!r}")
                continue
            try:
                selected = bool(descriptor.key_selector(key))
            except Exception as exc:
                self._reject(descriptor, f"key_selector failed on retrieved key {key!r}: {exc!r}")
                continue
            if not selected:
                self._reject(descriptor, f"retrieved key {key!r} not selected by the descriptor")
                continue
            if only is not None and key not in only:
                continue
            seen.add(key)
            existing = graph.get(key)
            if existing is not None and existing.derived_from is not None:
                self._reject(descriptor, f"retrieved key {key!r} is a derived value")
                continue
            if not isinstance(origin, ValueOrigin) or origin is ValueOrigin.UNKNOWN:
                if key in nb_values or (existing is not None and existing.origin is NB):
                    origin = NB
                else:
                    origin = SB
            self._refresh_value(descriptor, key, value, metadata, origin)

        for key in own_keys:
            if key in seen or (only is not None and key not in only):
                continue
            missing = graph.get(key)
            if missing is not None:
                self._not_found(missing)

    def _refresh_value(
        self, descriptor: Descriptor, key: Key, value: Value, metadata: object, origin: ValueOrigin
    ) -> None:
        graph = self.graph
        node = graph.get(key)
        if node is not None and self._unchanged(node, value, metadata):
            return  # the common case of a resync: SB holds what the graph says
        found = Event.OBTAINED if origin is SB else Event.DISCOVERED
        if node is None:
            node = Node(key, value, descriptor, origin)
            settle_node(node, found, details=None)
            graph.add(node)
            self._mark(key, availability=True)
        else:
            graph.touch(node)
            if not node.available:
                self._mark(key, availability=True)
            else:
                self._mark(key, availability=False)
            if node.state in (
                ValueState.NONEXISTENT,
                ValueState.REMOVED,
            ):
                settle_node(node, found, details=None)
                node.origin = origin
            elif node.state in (ValueState.PENDING, ValueState.MISSING):
                settle_node(node, Event.FOUND, details=None)
        node.value = value
        node.available = True
        self._set_metadata(node, metadata)
        deps, derived = self._relations(descriptor, node, value)
        graph.set_deps(node, deps)
        self._set_derived(node, value, derived)
        for dk, dv in derived:
            self._refresh_derived(node, dk, dv)

    def _unchanged(self, node: Node, value: Value, metadata: object) -> bool:
        compare = self.result.comparisons
        if not (
            node.available
            and node.state in _SETTLED
            and node.relations_of is not None
            and compare.same(node.key, value, node.value)
            and compare.same(node.key, value, node.relations_of)
        ):
            return False
        descriptor = node.descriptor
        if (
            descriptor is not None
            and descriptor.with_metadata
            and node.metadata is not metadata
            and not compare.same(node.key, metadata, node.metadata)
        ):
            return False
        nodes = self.graph.nodes
        for dk, _ in node.derived:
            derived = nodes.get(dk)
            if derived is None or not derived.available or derived.state not in _SETTLED:
                return False
        return True

    def _refresh_derived(self, base: Node, key: Key, value: Value, depth: int = 1) -> None:
        graph = self.graph
        if depth >= MAX_DERIVATION_DEPTH:
            return  # runaway derivation (a descriptor deriving from its own derived values)
        node = graph.get(key)
        if node is not None and node.derived_from != base.key:
            return  # collides with another value: skipped, as in the walk
        try:
            descriptor = self.registry.lookup(key)
        except ValueError:
            return
        if node is None:
            node = Node(key, value, descriptor, base.origin, derived_from=base.key)
            graph.add(node)
            self._mark(key, availability=True)
        else:
            graph.touch(node)
            self._mark(key, availability=not node.available)
        node.origin = base.origin
        node.value = value
        node.available = True
        if node.state not in (ValueState.FAILED, ValueState.RETRYING, ValueState.INVALID):
            # A derived value found in the SB is what its base is (CONFIGURED if the base is
            # neither OBTAINED nor DISCOVERED).
            settle_node(node, _FOUND_LIKE_BASE.get(base.state, Event.FOUND), details=None)
        deps, derived = self._relations(descriptor, node, value)
        graph.set_deps(node, deps)
        self._set_derived(node, value, derived)
        for dk, dv in derived:
            self._refresh_derived(node, dk, dv, depth + 1)

    def _set_derived(self, node: Node, value: Value, derived: DerivedPairs) -> None:
        """Derived values of ``node`` as computed from its retrieved ``value``; the NB derived
        values this leaves out (the SB does not have them) are kept when the scheduler still
        wants them (see ``_not_derived``)."""
        new_keys = {dk for dk, _ in derived}
        kept = [
            pair
            for dk, _ in node.derived
            if dk not in new_keys and (pair := self._not_derived(dk, node.key)) is not None
        ]
        if kept:
            node.derived = tuple(sorted(derived + tuple(kept), key=first))
            # The derived values are no longer those of ``value``: the walk recomputes them
            # from the NB value when it next applies the base.
            node.relations_of = None
        else:
            node.derived = derived
            node.relations_of = value

    def _not_derived(self, key: Key, base_key: Key) -> tuple[Key, Value] | None:
        """A derived value the retrieved base no longer derives: it does not exist in the SB.

        Dropped, unless NB still wants it and the scheduler knows why it is absent: it waits
        (PENDING), was refused (INVALID) or its last create/update failed (FAILED, RETRYING),
        or it was CONFIGURED and vanished (now MISSING). Those stay, unavailable, with their
        state and error, to be re-attempted (retry, resync) like failed base values. Returns
        the kept ``(key, value)`` pair.
        """
        node = self.graph.get(key)
        if node is None or node.derived_from != base_key:
            return None
        if not self._still_wanted(node):
            self._remove_tree(node)
            return None
        if node.available:
            self.graph.touch(node)
            node.available = False
            if node.state is ValueState.CONFIGURED:
                settle_node(node, Event.VANISHED, details=None)
            self._mark(key, availability=True)
            for dk, _ in node.derived:
                self._drop_derived_tree(dk, key)
            node.derived = ()
            node.relations_of = None
        return key, node.value

    def _still_wanted(self, node: Node) -> bool:
        if node.origin is not NB or node.state not in _KEPT_WHEN_NOT_FOUND:
            return False
        if node.last_op is TxnOperation.DELETE and node.state in _FAILING:
            return False  # its delete failed, yet it is gone: the goal is reached
        return base_of(self.graph, node).nb_value is not None

    def _relations(
        self, descriptor: Descriptor | None, node: Node, value: Value
    ) -> tuple[tuple[Dependency, ...], DerivedPairs]:
        if descriptor is None:
            return (), ()
        try:
            deps: tuple[Dependency, ...] = ()
            if node.origin is NB and descriptor.dependencies is not None:
                deps = tuple(descriptor.dependencies(node.key, value) or ())
            derived: DerivedPairs = ()
            if descriptor.derived_values is not None:
                pairs = descriptor.derived_values(node.key, value) or ()
                derived = tuple(
                    sorted(((dk, dv) for dk, dv in pairs if dv is not None), key=first)
                )
            if all(isinstance(dep, Dependency) for dep in deps) and all(
                isinstance(dk, str) and dk for dk, _ in derived
            ):
                return deps, derived
            reason = "malformed dependencies or derived values"
        except Exception as exc:
            reason = repr(exc)
        # The value exists in SB whatever its relations: keep it, without them.
        self._reject(descriptor, f"relations of retrieved {node.key!r} unusable: {reason}")
        return (), ()

    def _not_found(self, node: Node) -> None:
        graph = self.graph
        key = node.key
        if (
            node.origin is SB
            or node.state is ValueState.DISCOVERED
            or (node.nb_value is None and node.origin is NB)
        ):
            self._remove_tree(node)
            return
        if node.state is ValueState.UNIMPLEMENTED:
            return
        if node.available:
            graph.touch(node)
            node.available = False
            if node.state is ValueState.CONFIGURED:
                settle_node(node, Event.VANISHED, details=None)
            self._set_metadata(node, None)
            self._mark(key, availability=True)
            for dk, _ in node.derived:
                self._drop_derived_tree(dk, key)
        elif node.metadata is not None:
            graph.touch(node)
            self._set_metadata(node, None)

    def _remove_tree(self, node: Node) -> None:
        for dk, _ in node.derived:
            self._drop_derived_tree(dk, node.key)
        self._set_metadata(node, None)
        self.graph.remove(node.key)
        self._mark(node.key, availability=True)

    def _drop_derived_tree(self, key: Key, base_key: Key) -> None:
        node = self.graph.get(key)
        if node is None or node.derived_from != base_key:
            return
        self._remove_tree(node)

    def _set_metadata(self, node: Node, metadata: object) -> None:
        descriptor = node.descriptor
        if descriptor is None or not descriptor.with_metadata or node.derived_from is not None:
            node.metadata = None
            return
        node.metadata = metadata
        if self.update_metadata_maps:
            if metadata is None:
                self.registry.drop_metadata(descriptor, node.label)
            else:
                self.registry.set_metadata(descriptor, node.label, metadata)

    def _mark(self, key: Key, *, availability: bool) -> None:
        self.result.touched[key] = None
        if availability:
            self.result.availability_changed[key] = None

    def _reject(self, descriptor: Descriptor, reason: str) -> None:
        log.warning("descriptor %s: %s", descriptor.name, reason)
        self.result.rejected += 1


_SETTLED = (ValueState.CONFIGURED, ValueState.OBTAINED, ValueState.DISCOVERED)
_FOUND_LIKE_BASE = {ValueState.OBTAINED: Event.OBTAINED, ValueState.DISCOVERED: Event.DISCOVERED}
_FAILING = (ValueState.FAILED, ValueState.RETRYING)
_KEPT_WHEN_NOT_FOUND = (
    ValueState.CONFIGURED,
    ValueState.MISSING,
    ValueState.PENDING,
    ValueState.INVALID,
    *_FAILING,
)

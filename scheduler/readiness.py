"""Whether a value's dependencies are satisfied, including dependency cycles.

A dependency label is satisfied when at least one key it accepts is *available* (exists in SB).
Values of a dependency cycle (a strongly connected component of pending values) are treated as
one unit: they are ready together once every dependency leaving the cycle is satisfied.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator

from scheduler.api import Dependency, Key, ValueOrigin, ValueState
from scheduler.graph import Graph, Node


def candidate_keys(graph: Graph, dep: Dependency) -> Iterator[Key]:
    """Keys of the graph that ``dep`` accepts (available or not)."""
    if dep.key is not None:
        if dep.key in graph.nodes:
            yield dep.key
        return
    assert dep.any_of is not None
    if dep.key_prefixes:
        seen: set[Key] = set()
        for prefix in dep.key_prefixes:
            for key in graph.keys_with_prefix(prefix):
                if key not in seen and dep.any_of(key):
                    seen.add(key)
                    yield key
        return
    # No prefixes: the predicate has to be run over the whole key space (documented cost).
    for key in graph.keys:
        if dep.any_of(key):
            yield key


def satisfied(graph: Graph, dep: Dependency) -> bool:
    if dep.key is not None:
        target = graph.nodes.get(dep.key)
        return target is not None and target.available
    nodes = graph.nodes
    return any(nodes[key].available for key in candidate_keys(graph, dep))


def missing_labels(graph: Graph, node: Node) -> tuple[str, ...]:
    return tuple(dep.label for dep in node.deps if not satisfied(graph, dep))


def accepted_keys(dep: Dependency) -> tuple[Key, ...]:
    """The keys that satisfy `dep` that can be named without a graph: its key, or those of its
    prefixes its predicate accepts as whole keys (a dependency on any of a few named keys, e.g.
    a kvmesh interface or the host link of that name). Empty for a predicate over a key space
    (any address on an interface): such a dependency cannot be named key by key."""
    if dep.key is not None:
        return (dep.key,)
    return tuple(prefix for prefix in dep.key_prefixes if dep.matches(prefix))


class WaitedKeys:
    """What PENDING values wait for, by key (``__call__``), over one state of `graph` (make one
    per pass over it: it keeps what the waiting values will derive, found on first need).

    For each missing dependency of a PENDING value (those its `details` name): the keys any one
    of which would satisfy it once created: its named keys (``accepted_keys``), the values of
    the graph it accepts (desired values that wait), and, for a dependency on something a
    waiting value derives once created (an interface's address), that value's key. Readers
    outside the scheduler (`kvmesh apply --wait`, `kvmesh plan`) match them against what other
    values make (``ModelSpec.provides``); labels are for people."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self._deriving: list[tuple[Key, Key]] | None = None  # sorted (derived key, its value)

    def __call__(self, node: Node) -> tuple[tuple[Key, ...], ...]:
        if node.state is not ValueState.PENDING or not node.details:
            return ()
        groups = []
        for dep in node.deps:
            if dep.label in node.details:
                keys = dict.fromkeys((*accepted_keys(dep), *candidate_keys(self.graph, dep)))
                groups.append(tuple(keys) if keys else self._derivers(dep))
        return tuple(groups)

    def _derivers(self, dep: Dependency) -> tuple[Key, ...]:
        """The waiting values that will derive a key `dep` accepts (by its prefixes, when it
        has some: a bisection, not a scan)."""
        if self._deriving is None:
            self._deriving = sorted((key, other.key) for other in self.graph.nodes.values()
                                    if not other.available for key, _value in other.derived)
        pairs = self._deriving
        found: dict[Key, None] = {}
        for prefix in dep.key_prefixes or ("",):
            at = bisect.bisect_left(pairs, (prefix,))
            while at < len(pairs) and pairs[at][0].startswith(prefix):
                if dep.matches(pairs[at][0]):
                    found[pairs[at][1]] = None
                at += 1
        return tuple(found)


def absent_labels(graph: Graph, node: Node) -> tuple[str, ...]:
    """The labels of `node`'s unsatisfied dependencies that nothing in the graph provides or
    will provide: no key of the graph is accepted, nor any value a waiting value will derive
    once created (an interface's addresses). Nothing desired and nothing found in the
    southbound could ever satisfy them. Cost: a scan of the waiting values (plans only)."""
    unsatisfied = [dep for dep in node.deps if not satisfied(graph, dep)
                   and next(candidate_keys(graph, dep), None) is None]
    if not unsatisfied:
        return ()
    to_derive = [key for other in graph.nodes.values() if not other.available
                 for key, _value in other.derived]
    return tuple(dep.label for dep in unsatisfied
                 if not any(dep.matches(key) for key in to_derive))


def _is_cycle_candidate(node: Node | None) -> bool:
    return (
        node is not None
        and not node.available
        and node.state is ValueState.PENDING
        and node.origin is ValueOrigin.FROM_NB
    )


def is_ready(graph: Graph, node: Node) -> bool:
    """All dependencies satisfied, or satisfied together with the node's dependency cycle."""
    if not node.deps or node.origin is ValueOrigin.FROM_SB:
        return True
    unsatisfied = [dep for dep in node.deps if not satisfied(graph, dep)]
    if not unsatisfied:
        return True
    # Fast path: a cycle is only possible through a pending value this node waits for.
    nodes = graph.nodes
    if not any(
        key == node.key or _is_cycle_candidate(nodes.get(key))
        for dep in unsatisfied
        for key in candidate_keys(graph, dep)
    ):
        return False
    return _ready_with_cycle(graph, node)


def _ready_with_cycle(graph: Graph, node: Node) -> bool:
    nodes = graph.nodes
    # Who waits for whom, as reverse edges (key -> the keys waiting for it), over the pending
    # values reached from `node`.
    waited_by: dict[Key, set[Key]] = {}
    stack = [node]
    explored = {node.key}
    while stack:
        current = stack.pop()
        for dep in current.deps:
            if dep.matches(node.key):
                # Back to the node being checked (even if it exists: it is what is in question).
                waited_by.setdefault(node.key, set()).add(current.key)
            if satisfied(graph, dep):
                continue
            for key in candidate_keys(graph, dep):
                target = nodes.get(key)
                if key == node.key or _is_cycle_candidate(target):
                    waited_by.setdefault(key, set()).add(current.key)
                    if key not in explored:
                        explored.add(key)
                        assert target is not None
                        stack.append(target)
    component = _waiting_for(node.key, waited_by)
    if len(component) == 1 and node.key not in waited_by.get(node.key, ()):
        return False
    # Greatest fixpoint: drop members with a dependency met neither outside nor inside the unit.
    members = set(component)
    changed = True
    while changed and node.key in members:
        changed = False
        for key in list(members):
            member = nodes[key]
            for dep in member.deps:
                if satisfied(graph, dep):
                    continue
                if not any(candidate in members for candidate in candidate_keys(graph, dep)):
                    members.discard(key)
                    changed = True
                    break
    return node.key in members


def _waiting_for(key: Key, waited_by: dict[Key, set[Key]]) -> set[Key]:
    """`key` and the keys waiting for it, directly or not. Every key in `waited_by` was reached
    from `key`, so these are exactly `key`'s strongly connected component: its dependency
    cycle (no graph library needed for one component)."""
    found = {key}
    stack = [key]
    while stack:
        for waiter in waited_by.get(stack.pop(), ()):
            if waiter not in found:
                found.add(waiter)
                stack.append(waiter)
    return found

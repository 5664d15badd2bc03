"""NB values the southbound refuses together (``Descriptor.conflicts``), found before a walk.

A transaction (NB, resync or plan) that names a key of a descriptor with ``conflicts`` runs it
over that descriptor's NB values as they will be after the transaction: the graph's, with the
transaction's own over them. The walk validates the keys that give way as INVALID
(``ConflictError``); the values the transaction does not name whose verdict changes (one now
gives way, or no longer has to) are applied again with their NB value, so in the same
transaction a value that gives way is removed and one that no longer has to is created. Which
value gives way is the descriptor's rule, over the values alone: the arrival order of the
values does not change it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

from scheduler.api import ConflictError, Descriptor, Key, Value, ValueState
from scheduler.graph import Graph
from scheduler.registry import Registry

log = logging.getLogger("scheduler")


@dataclass
class Verdicts:
    """The conflicts of one transaction."""

    refused: dict[Key, str] = field(default_factory=dict)  # key -> why it gives way
    # NB values the transaction does not name whose verdict changes: applied again.
    reapply: dict[Key, Value] = field(default_factory=dict)


def find_conflicts(graph: Graph, registry: Registry, values: Mapping[Key, Value]) -> Verdicts:
    """The verdicts for a transaction applying ``values`` (None deletes) to ``graph``."""
    verdicts = Verdicts()
    if not any(d.conflicts is not None for d in registry.descriptors):
        return verdicts  # no descriptor has a rule: nothing to look up per key
    named: dict[str, tuple[Descriptor, dict[Key, Value]]] = {}
    for key, value in values.items():
        try:
            descriptor = registry.lookup(key)
        except ValueError:
            continue  # no single owner: the walk rejects the key
        if descriptor is not None and descriptor.conflicts is not None:
            named.setdefault(descriptor.name, (descriptor, {}))[1][key] = value
    for descriptor, changes in named.values():
        _judge(graph, descriptor, changes, values, verdicts)
    return verdicts


def _judge(graph: Graph, descriptor: Descriptor, changes: Mapping[Key, Value],
           values: Mapping[Key, Value], verdicts: Verdicts) -> None:
    assert descriptor.conflicts is not None
    after: dict[Key, Value] = {}
    before: dict[Key, str] = {}  # keys that gave way, with why
    for key in graph.keys_of_descriptor(descriptor.name):
        node = graph.nodes[key]
        if node.derived_from is not None or node.nb_value is None:
            continue  # derived, or not an NB value (obtained)
        after[key] = node.nb_value
        if node.state is ValueState.INVALID and isinstance(node.error, ConflictError):
            before[key] = str(node.error)
    for key, value in changes.items():
        if value is None:
            after.pop(key, None)
        else:
            after[key] = value
    try:
        refused = {key: str(why) for key, why in descriptor.conflicts(after).items()
                   if key in after}
    except Exception:  # a broken rule must not stop the transaction: its values go ahead
        log.exception("conflicts of descriptor %r failed: no value refused", descriptor.name)
        return
    verdicts.refused.update(refused)
    for key in refused.keys() | before.keys():
        if key in after and key not in values and refused.get(key) != before.get(key):
            verdicts.reapply[key] = after[key]

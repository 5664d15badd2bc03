"""One nftables table as kvmesh applies and reads it: the I/O-free core of the nftables model.

* ``TableSpec``: the canonical form of a ``linux/nftables/<family>/<table>`` value (family and
  table implied by the key and left out of the objects; chains and sets ordered by name; rules
  grouped by chain, in their order) and its ``digest``.
* ``replace_transaction``: the one nftables transaction that replaces the table as a whole.
* The ownership marker: a regular chain ``kvmesh-owner`` holding one inert rule whose comment
  carries ``d=<digest of the desired value>`` and, once recorded, ``r=<digest of the table as the
  kernel lists it>`` (the baseline). A table without it is not kvmesh's. nftables 1.0.6's JSON
  API neither writes nor lists table comments, so the marker is a chain.
* ``baseline_digest``: the digest of a listed table without its marker and without what changes
  on its own (counters, quota use, element expiry, elements of dynamic/timeout sets): equal to the
  recorded baseline exactly when nobody changed the table since kvmesh applied it.

Only nftables' JSON objects are handled, never its rule language: nft itself parses and checks
the expressions.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic_core import to_json

FAMILIES = ("ip", "ip6", "inet", "arp", "bridge", "netdev")
MARKER_CHAIN = "kvmesh-owner"
MARKER_TAG = "kvmesh"
_IMPLIED = frozenset({"family", "table", "handle"})
_VOLATILE_SET_FLAGS = frozenset({"dynamic", "timeout"})
_TABLE_ITEMS = ("chain", "set", "map", "rule", "counter", "quota", "limit", "ct helper",
                "ct timeout", "ct expectation", "flowtable", "secmark", "synproxy")

Obj = dict[str, Any]


# The fields of each kind of object in a fixed order (unknown ones follow, sorted): the digest
# does not depend on the order an operator wrote them in.
CHAIN_FIELDS = ("name", "type", "hook", "prio", "policy", "dev")
SET_FIELDS = ("name", "type", "policy", "flags", "elem", "timeout", "gc-interval", "size")
RULE_FIELDS = ("chain", "expr", "comment")


def _json(data: object) -> str:
    """Compact JSON (pydantic-core's serialiser: several times faster than ``json`` on a table
    of thousands of rules)."""
    return to_json(data).decode()


def digest(data: object) -> str:
    return _hash(_json(data))


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _element(item: Mapping[str, Any], order: Sequence[str]) -> Obj:
    """A chain/set/rule without what the key implies and without null (= absent) fields, its
    fields in a fixed order."""
    result = {name: item[name] for name in order if item.get(name) is not None}
    if len(result) < len(item):
        result.update((name, item[name]) for name in sorted(item)
                      if name not in result and name not in _IMPLIED
                      and item[name] is not None)
    return result


@dataclass(frozen=True)
class TableSpec:
    """A table's canonical form. Equal specs mean equal tables (dict equality: key order does
    not matter); ``digest`` is what the marker records."""

    family: str
    name: str
    chains: tuple[Obj, ...]
    sets: tuple[Obj, ...]
    rules: tuple[Obj, ...]
    # Of ``body``. Keys inside expressions and set elements keep the order they were written
    # in: the same table written with those keys in another order has another digest.
    digest: str = field(compare=False)
    # The nft commands adding the chains, sets and rules, as JSON text (the items of a JSON
    # array): serialised once, for the digest and for every transaction that applies the spec.
    body: str = field(compare=False, repr=False)

    def to_value(self) -> Obj:
        return {"family": self.family, "name": self.name, "chains": list(self.chains),
                "sets": list(self.sets), "rules": list(self.rules)}

    def devices(self) -> list[str]:
        """The links the table's chains hook on (netdev ``dev``), each once."""
        found: dict[str, None] = {}
        for chain in self.chains:
            dev = chain.get("dev")
            for name in [dev] if isinstance(dev, str) else dev or ():
                found[str(name)] = None
        return list(found)


def table_spec(family: str, name: str, value: Mapping[str, Any]) -> TableSpec:
    """The canonical form of a table value (already validated, or read back from the kernel)."""
    chains = sorted((_element(chain, CHAIN_FIELDS) for chain in value.get("chains") or ()),
                    key=lambda chain: str(chain.get("name")))
    sets = sorted((_element(item, SET_FIELDS) for item in value.get("sets") or ()),
                  key=lambda item: str(item.get("name")))
    # Rules keep their order within a chain; the order between chains means nothing to nftables.
    rules = sorted((_element(rule, RULE_FIELDS) for rule in value.get("rules") or ()),
                   key=lambda rule: str(rule.get("chain")))
    where = {"family": family, "table": name}
    # Chains and sets before the rules that name them.
    commands = [{"add": {"chain": {**where, **chain}}} for chain in chains]
    commands += [{"add": {"set": {**where, **item}}} for item in sets]
    commands += [{"add": {"rule": {**where, **rule}}} for rule in rules]
    text = _json(commands)
    return TableSpec(family, name, tuple(chains), tuple(sets), tuple(rules), _hash(text),
                     text[1:-1])


# -- writing ----------------------------------------------------------------------------------


def document(*parts: Sequence[Obj] | str) -> str:
    """An ``nft -j -f`` document of command lists and/or ``TableSpec.body`` texts, in order."""
    items = [part if isinstance(part, str) else _json(list(part))[1:-1] for part in parts]
    return '{"nftables":[' + ",".join(item for item in items if item) + "]}"


def marker_comment(desired: str, baseline: str | None = None) -> str:
    return f"{MARKER_TAG} d={desired}" + (f" r={baseline}" if baseline else "")


def _marker_rule(family: str, table: str, comment: str) -> Obj:
    return {"family": family, "table": table, "chain": MARKER_CHAIN, "expr": [{"return": None}],
            "comment": comment}


def replace_transaction(spec: TableSpec, *, fresh: bool = False) -> str:
    """One nftables transaction (an ``nft -j -f`` document) making the table exactly ``spec``,
    with its marker.

    ``fresh``: the table must not exist yet (``create`` fails on an existing one, so a table
    someone else made is never replaced by accident); otherwise add-delete-add replaces it
    whether it exists or not."""
    table = {"family": spec.family, "name": spec.name}
    if fresh:
        head: list[Obj] = [{"create": {"table": table}}]
    else:
        head = [{"add": {"table": table}}, {"delete": {"table": table}}, {"add": {"table": table}}]
    marker = [{"add": {"chain": {"family": spec.family, "table": spec.name,
                                 "name": MARKER_CHAIN}}},
              {"add": {"rule": _marker_rule(spec.family, spec.name,
                                            marker_comment(spec.digest))}}]
    return document(head, spec.body, marker)


def delete_transaction(family: str, name: str) -> str:
    """One transaction deleting the table only if it carries kvmesh's marker: flushing a chain
    that does not exist fails (ENOENT), and with it the whole transaction."""
    return document([{"flush": {"chain": {"family": family, "table": name,
                                          "name": MARKER_CHAIN}}},
                     {"delete": {"table": {"family": family, "name": name}}}])


def baseline_transaction(family: str, name: str, marker: Marker, baseline: str) -> str:
    """Swap the marker rule (by handle) for one that also carries the baseline, in one
    transaction (``delete`` + ``add``: nft needs no rule cache for it, unlike ``replace``)."""
    where = {"family": family, "table": name, "chain": MARKER_CHAIN}
    return document([{"delete": {"rule": {**where, "handle": marker.handle}}},
                     {"add": {"rule": _marker_rule(family, name,
                                                   marker_comment(marker.desired, baseline))}}])


# -- reading ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Marker:
    handle: int
    desired: str
    baseline: str | None


def find_marker(objects: Iterable[Mapping[str, Any]]) -> Marker | None:
    """kvmesh's marker among the listed objects of one table, or None."""
    for item in objects:
        rule = item.get("rule")
        if not isinstance(rule, Mapping) or rule.get("chain") != MARKER_CHAIN:
            continue
        words = str(rule.get("comment", "")).split()
        if not words or words[0] != MARKER_TAG:
            continue
        fields = dict(word.split("=", 1) for word in words[1:] if "=" in word)
        handle = rule.get("handle")
        if "d" in fields and isinstance(handle, int):
            return Marker(handle, fields["d"], fields.get("r"))
    return None


def group_tables(objects: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], list[Obj]]:
    """The objects of ``nft -j list ruleset`` by table (family, name), in listing order."""
    tables: dict[tuple[str, str], list[Obj]] = {}
    for item in objects:
        for kind, body in item.items():
            if not isinstance(body, Mapping):
                continue
            if kind == "table":
                where = (str(body.get("family")), str(body.get("name")))
            else:
                where = (str(body.get("family")), str(body.get("table")))
            tables.setdefault(where, []).append(dict(item))
    return tables


def _is_marker(kind: str, body: Mapping[str, Any]) -> bool:
    return ((kind == "chain" and body.get("name") == MARKER_CHAIN)
            or (kind == "rule" and body.get("chain") == MARKER_CHAIN))


def _stable(node: Any) -> Any:
    """A listed object without what changes on its own: counter values, quota use, the time
    left before an element expires."""
    if isinstance(node, list):
        return [_stable(item) for item in node]
    if not isinstance(node, dict):
        return node
    result: Obj = {}
    for name, value in node.items():
        if name == "expires":
            continue
        if name == "counter" and isinstance(value, dict):
            value = {k: v for k, v in value.items() if k not in ("packets", "bytes")}
        elif name == "quota" and isinstance(value, dict):
            value = {k: v for k, v in value.items() if k not in ("used", "used_unit")}
        result[name] = _stable(value)
    return result


def _stable_object(kind: str, body: Mapping[str, Any]) -> Obj:
    result = {name: value for name, value in body.items() if name != "handle"}
    if kind in ("set", "map") and _VOLATILE_SET_FLAGS & set(result.get("flags") or ()):
        result.pop("elem", None)  # elements come and go at run time (packets, timeouts)
    return dict(_stable(result))


def stable_objects(objects: Iterable[Mapping[str, Any]]) -> list[tuple[str, Obj]]:
    """The listed table's objects (the table itself included), marker and volatile state left
    out, as (kind, body) in listing order."""
    result = []
    for item in objects:
        for kind, body in item.items():
            if isinstance(body, Mapping) and (kind == "table" or kind in _TABLE_ITEMS) \
                    and not _is_marker(kind, body):
                result.append((kind, _stable_object(kind, body)))
    return result


def baseline_digest(objects: Iterable[Mapping[str, Any]]) -> str:
    return digest(stable_objects(objects))


def readback_value(family: str, name: str, objects: Sequence[Mapping[str, Any]]) -> Obj:
    """A listed table as a value of the model (what Retrieve reports for a table that differs
    from what kvmesh applied)."""
    found: dict[str, list[Obj]] = {"chain": [], "set": [], "rule": []}
    order = {"chain": CHAIN_FIELDS, "set": SET_FIELDS, "rule": RULE_FIELDS}
    for kind, body in stable_objects(objects):
        if kind in found:
            found[kind].append(_element(body, order[kind]))
    return {"family": family, "name": name, "chains": found["chain"], "sets": found["set"],
            "rules": found["rule"]}

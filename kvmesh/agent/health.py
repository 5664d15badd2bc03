"""Every node's health from the mesh alone (sans-I/O): what `kvmesh cluster health` prints.

A node's facts are keys any node holds: its agent's record `node/<N>/agent` (alive or not:
`kvmesh.agent.liveness`; its software version), its devices `node/<N>/device/<dev>`, its value
statuses `status/<N>/...`, and its membership record `member/<N>` (a member that never ran an
agent is listed too, as down). Nothing here needs the node's agent to answer.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import msgpack

from kvmesh.agent.keys import NODE, STATUS
from kvmesh.agent.liveness import AgentLiveness, agent_liveness
from kvstore import Value

MEMBER = "member/"
# Value states that make a node unhealthy (and `kvmesh status` exit 1).
BAD_VALUE_STATES = frozenset({"FAILED", "INVALID"})
# Device states that make a node unhealthy (RECONCILING is a passing state).
BAD_DEVICE_STATES = frozenset({"FAILED", "DISCONNECTED"})
UNKNOWN_VERSION = "?"


@dataclass
class NodeHealth:
    name: str
    agent: AgentLiveness
    version: str = UNKNOWN_VERSION
    devices: dict[str, str] = field(default_factory=dict)  # device -> state
    values: Counter[str] = field(default_factory=Counter)  # value state -> count
    oldest_failed: tuple[str, dict[str, Any]] | None = None  # (model key, status record)

    @property
    def problems(self) -> list[str]:
        """Why the node is unhealthy (empty: healthy)."""
        out = []
        if self.agent.known and not self.agent.up:
            out.append("agent down")
        elif not self.agent.known and not (self.values or self.devices):
            # Nothing at all from it: a member that never ran an agent. (Statuses without a
            # record come from a 0.4.0 agent without --http, which announced none: unknown.)
            out.append("no agent")
        out += [f"device {d} {s}" for d, s in sorted(self.devices.items())
                if s in BAD_DEVICE_STATES]
        out += [f"{n} {s}" for s, n in sorted(self.values.items()) if s in BAD_VALUE_STATES]
        return out

    @property
    def healthy(self) -> bool:
        return not self.problems

    def as_json(self) -> dict[str, Any]:
        failed = None
        if self.oldest_failed is not None:
            key, record = self.oldest_failed
            failed = {"key": key, "error": record.get("error") or "",
                      "since": record.get("time")}
        return {"node": self.name, "agent": self.agent.as_json(), "version": self.version,
                "devices": dict(sorted(self.devices.items())),
                "values": dict(sorted(self.values.items())), "oldest_failed": failed,
                "healthy": self.healthy, "problems": self.problems}


def decode_record(raw: bytes | None) -> dict[str, Any] | None:
    """A msgpack map, or None (tombstone, TTL-only update, or not a map: ignored)."""
    if not raw:
        return None
    try:
        decoded = msgpack.unpackb(raw, raw=False)
    except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError):
        return None
    return decoded if isinstance(decoded, dict) else None


def _node_and_rest(key: str, prefix: str) -> tuple[str, str]:
    node, _, rest = key[len(prefix):].partition("/")
    return node, rest


def cluster_health(kvs: Mapping[str, Value], now: float,
                   extra_nodes: Iterable[str] = ()) -> list[NodeHealth]:
    """Health of every node the key-values under `node/`, `status/` and `member/` name (and
    `extra_nodes`), sorted by name."""
    nodes: dict[str, NodeHealth] = {}

    def node(name: str) -> NodeHealth:
        if name not in nodes:
            nodes[name] = NodeHealth(name, AgentLiveness(known=False, up=False))
        return nodes[name]

    for name in extra_nodes:
        node(name)
    for key in sorted(kvs):
        value = kvs[key]
        record = decode_record(value.value)
        if record is None or not key.startswith((NODE, STATUS, MEMBER)):
            continue
        if key.startswith(MEMBER):
            name = key[len(MEMBER):]
            if name and "/" not in name and record.get("state") != "removed":
                node(name)
            continue
        prefix = NODE if key.startswith(NODE) else STATUS
        name, rest = _node_and_rest(key, prefix)
        if not name or not rest:
            continue
        health = node(name)
        if prefix == STATUS:
            _count_status(health, rest, record)
        elif rest == "agent":
            health.agent = agent_liveness(record, value.ttl_ms, now)
            health.version = str(record.get("version") or UNKNOWN_VERSION)
        elif rest.startswith("device/"):
            health.devices[rest[len("device/"):]] = str(record.get("state", "?"))
    return [nodes[name] for name in sorted(nodes)]


def _count_status(health: NodeHealth, model_key: str, record: dict[str, Any]) -> None:
    state = str(record.get("state", "?"))
    health.values[state] += 1
    if state != "FAILED":
        return
    since = record.get("time")
    if health.oldest_failed is None or (
            isinstance(since, int | float)
            and since < (health.oldest_failed[1].get("time") or float("inf"))):
        health.oldest_failed = (model_key, record)

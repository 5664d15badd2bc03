"""The mesh key space shared by every node (documented in README "Key space").

config/<node>/<model key>   desired state for one node (msgpack map; empty value = tombstone)
status/<node>/<model key>   state of that value on that node, published by its agent (with TTL)
node/<node>/device/<dev>    reconciliation state of a southbound device (e.g. KNOWN)
node/<node>/agent           the node's agent: its versions ("version", "protocol") and REST
                            address ("http", "tls") when it has one (with TTL, while it runs)

DESIGN (docs/compatibility.md, rules 3 and 5): a new feature's keys go under a new prefix or a
new model key, which agents of older releases leave alone; records only gain fields, and readers
ignore fields they do not know (a 0.4.0 agent's record has no "version").
"""

from __future__ import annotations

CONFIG = "config/"
STATUS = "status/"
NODE = "node/"


def config_prefix(node: str) -> str:
    return f"{CONFIG}{node}/"


def status_prefix(node: str) -> str:
    return f"{STATUS}{node}/"


def config_key(node: str, model_key: str) -> str:
    return f"{CONFIG}{node}/{model_key}"


def status_key(node: str, model_key: str) -> str:
    return f"{STATUS}{node}/{model_key}"


def device_key(node: str, device: str) -> str:
    return f"{NODE}{node}/device/{device}"


def agent_key(node: str) -> str:
    """Where a node's agent announces itself (its REST address)."""
    return f"{NODE}{node}/agent"


def model_key_of(prefixed_key: str, prefix: str) -> str | None:
    """The model key under `prefix`, or None when the key is not under it."""
    if not prefixed_key.startswith(prefix):
        return None
    rest = prefixed_key[len(prefix):]
    return rest or None


def device_of(model_key: str) -> str:
    """Southbound device that owns a model key: its first path element (`linux`, `vpp`)."""
    return model_key.split("/", 1)[0]


def validate_node_name(node: str) -> None:
    if not node or "/" in node or node.strip() != node:
        raise ValueError(f"invalid node name {node!r}: must be non-empty, without '/' or spaces")


def agent_leaf_prefixes(node: str) -> tuple[str, ...]:
    """What the agent of `node` reads and writes: a leaf running it keeps exactly these
    (`kvmesh node run --agent --leaf`; docs/kvstore.md, "Leaf nodes")."""
    return (config_prefix(node), status_prefix(node), f"{NODE}{node}/", f"revision/{node}/")

"""Writing a change of one node's desired state as one batch, with its revision record.

Used by `kvmesh apply` / `config rollback` (the CLI) and by the agent's confirm timer: the
changed `config/<N>/...` keys, the new `revision/<N>/<REV>` record, the expiry of the
oldest revisions and any `extra` key-values go out in one KEY_SET, so the mesh never holds a
change without its revision (or a rollback without the mark on the revision it undoes).
"""

from __future__ import annotations

import getpass
import os
import socket
import time
from collections.abc import Iterable, Mapping
from typing import Any

from kvmesh.agent import revisions
from kvmesh.agent.desired import decode_config_value, encode_config_value
from kvmesh.agent.keys import config_key
from kvstore import KvStoreClient, Value, make_value


class WriteRefused(RuntimeError):
    """The mesh refused part of the batch."""


def who_am_i(what: str = "kvmesh") -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return f"{user}@{socket.gethostname()} ({what}, pid {os.getpid()})"


def node_revisions(client: KvStoreClient, node: str) -> dict[int, tuple[Value, dict[str, Any]]]:
    """The node's kept revisions: rev -> (mesh value, record)."""
    out = {}
    for key, value in client.dump(prefix=revisions.revision_prefix(node)).items():
        record = revisions.decode(value.value)
        rev = revisions.revision_of(key, node)
        if record is not None and rev is not None:
            out[rev] = (value, record)
    return out


def desired_values(client: KvStoreClient, node: str,
                   model_keys: Iterable[str]) -> dict[str, dict[str, Any] | None]:
    """What `node`'s desired state holds for these model keys now (None: absent)."""
    keys = {config_key(node, model_key): model_key for model_key in model_keys}
    held = client.get(list(keys))
    out: dict[str, dict[str, Any] | None] = dict.fromkeys(keys.values())
    for key, value in held.items():
        try:
            out[keys[key]] = decode_config_value(value.value or b"")
        except ValueError:
            out[keys[key]] = None
    return out


def write_node_change(client: KvStoreClient, node: str,
                      writes: Mapping[str, dict[str, Any] | None],
                      before: Mapping[str, dict[str, Any] | None], *, who: str,
                      description: str, confirm_timeout_s: float | None = None,
                      extra: Mapping[str, Value] | None = None) -> int:
    """Write `writes` (model key -> value, None deletes) to `node`'s desired state with a new
    revision; returns its number."""
    originator = client.node_info().name
    kept = node_revisions(client, node)
    rev = max(kept, default=0) + 1
    keys = [config_key(node, model_key) for model_key in writes]
    held = client.get(keys)
    batch: dict[str, Value] = {}
    for model_key, value in writes.items():
        key = config_key(node, model_key)
        current = held.get(key)
        batch[key] = make_value(encode_config_value(value),
                                version=1 if current is None else current.version + 1,
                                originator_id=originator)
    record = revisions.new_revision(rev, who, time.time(), before, writes, confirm_timeout_s,
                                    description)
    batch[revisions.revision_key(node, rev)] = make_value(
        revisions.encode(record), version=1, originator_id=originator)
    for old in revisions.expired_revisions(kept, rev):
        batch[revisions.revision_key(node, old)] = make_value(
            b"", version=kept[old][0].version + 1, originator_id=originator,
            ttl_ms=revisions.EXPIRED_TTL_MS)
    batch.update(extra or {})
    refused = client.set(batch)
    if refused:
        raise WriteRefused(f"{node}: the mesh refused {len(refused)} key(s): " + "; ".join(
            f"{k}: {r}" for k, r in sorted(refused.items())))
    return rev


def mark(client: KvStoreClient, value: Value, record: Mapping[str, Any], state: str) -> Value:
    """The revision's mesh value re-written with confirm state `state` (one version up)."""
    return make_value(revisions.encode(revisions.with_confirm_state(record, state)),
                      version=value.version + 1, originator_id=client.node_info().name)

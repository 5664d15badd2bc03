"""Waiting for the agents to report on written desired state (`kvmesh apply --wait`).

After a write, each node's agent publishes a status for every value under `status/<node>/`.
``wait_settled`` follows those statuses on the publication stream (re-dumping now and then:
the stream may miss what was published while the subscription connected) until every written
value settled or the deadline passed. The states are the scheduler's (``scheduler.ValueState``),
not strings re-declared here.

PENDING is final (the value may wait for something that never comes), unless it waits only for
what a value written with it makes: the Linux end of a Linux-CP pair, which the node's Linux
watcher reports a moment after VPP made it. The status says what a PENDING value waits for by key
(``waits_for_keys``), the model registry what each value makes (``ModelSpec.provides``), and
``kvmesh.provided`` the rule: such a value is followed while each provider written to its node
in this apply is CONFIGURED or not reported on yet (``hold_pending``), until its status changes
or the deadline passes. A status without the keys (an older agent's) is final, as it always was.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from kvmesh.agent.keys import STATUS, status_prefix
from kvmesh.agent.status import decode_status, waits_for_keys
from kvmesh.provided import waiting_for_providers
from kvmesh.statefile import NodeDiff
from kvstore import KvStoreClient, Publication
from scheduler import ValueState

# RETRYING counts as settled (as FAILED): the value failed; the node keeps retrying on its own.
SETTLED_STATES = frozenset({ValueState.CONFIGURED, ValueState.FAILED, ValueState.RETRYING,
                            ValueState.INVALID, ValueState.PENDING, ValueState.UNIMPLEMENTED})
GONE_STATES = frozenset({ValueState.REMOVED, ValueState.NONEXISTENT})
POLL_S = 0.2  # longest wait for the stream before re-checking the deadline
REDUMP_S = 1.0

Statuses = dict[str, dict[str, Any]]  # model key -> status record
#: node -> model key -> (settled, the last status record or None)
Settled = dict[str, dict[str, tuple[bool, dict[str, Any] | None]]]
Rows = dict[str, tuple[bool, dict[str, Any] | None]]  # one node's: model key -> (settled, status)


def _state_of(record: Mapping[str, Any]) -> ValueState | None:
    return ValueState.__members__.get(str(record.get("state")))


def status_snapshot(client: KvStoreClient, node: str) -> Statuses:
    """The statuses `node`'s agent published, by model key."""
    prefix = status_prefix(node)
    out = {}
    for key, value in client.dump(prefix=prefix).items():
        record = decode_status(value.value)
        if record is not None:
            out[key[len(prefix):]] = record
    return out


def settled(wanted: dict[str, Any] | None, before: dict[str, Any] | None,
            now: dict[str, Any] | None) -> bool:
    """Has the agent reported on this write? A new status (another transaction than before)
    in a final state; for a removal, the status gone."""
    if wanted is None:
        return now is None or _state_of(now) in GONE_STATES
    if now is None or _state_of(now) not in SETTLED_STATES:
        return False
    return before is None or now.get("seq") != before.get("seq")


def hold_pending(rows: Rows, written: Mapping[str, Any]) -> Rows:
    """One node's `rows` with its settled PENDING values that wait for their providers held
    back (not settled): those every missing dependency of which a value `written` to the node
    in this apply makes, while that value is CONFIGURED or not reported on yet
    (``kvmesh.provided``)."""
    waiting = {}
    for key, (done, record) in rows.items():
        if done and record is not None and _state_of(record) is ValueState.PENDING:
            waits = waits_for_keys(record)
            if waits is not None:
                waiting[key] = waits
    if not waiting:
        return rows

    def live(maker: str) -> bool:
        done, record = rows.get(maker, (True, None))
        return not done or (record is not None and _state_of(record) is ValueState.CONFIGURED)

    from kvmesh.agent.models import provided_by  # every model: only when waiting for values

    provided = provided_by({key: value for key, value in written.items() if value is not None})
    coming = waiting_for_providers(waiting, provided, live)
    return {key: (done and key not in coming, record) for key, (done, record) in rows.items()}


def _take(publication: Publication, prefixes: Mapping[str, str],
          statuses: dict[str, Statuses]) -> None:
    """Fold one publication into `statuses` (other nodes' keys and TTL refreshes skipped)."""
    for node, prefix in prefixes.items():
        for key, value in (publication.key_vals or {}).items():
            if not key.startswith(prefix) or value.value is None:
                continue  # another node's, or a TTL refresh
            record = decode_status(value.value)
            if record is None:  # a tombstone: the value's status is gone
                statuses[node].pop(key[len(prefix):], None)
            else:
                statuses[node][key[len(prefix):]] = record
        for key in publication.expired_keys or ():
            if key.startswith(prefix):
                statuses[node].pop(key[len(prefix):], None)


def wait_settled(client: KvStoreClient, diffs: Mapping[str, NodeDiff],
                 before: Mapping[str, Statuses], timeout_s: float,
                 progress: Callable[[str], None] | None = None) -> Settled:
    """Follow the statuses of the written nodes until every write in `diffs` settled (see
    ``settled``; `before`: each node's statuses before the write) or `timeout_s` passed.
    `progress` is told a one-line summary ("n2: 3/4 settled") whenever it changes."""
    deadline = time.monotonic() + timeout_s
    writes = {node: d.writes() for node, d in diffs.items() if not d.empty}
    prefixes = {node: status_prefix(node) for node in writes}
    subscription = client.subscribe(prefix=STATUS)
    try:
        statuses = {node: status_snapshot(client, node) for node in writes}
        next_dump = time.monotonic() + REDUMP_S
        shown = ""
        while True:
            result = {}
            for node, keys in writes.items():
                result[node] = hold_pending(
                    {key: (settled(value, before[node].get(key), statuses[node].get(key)),
                           statuses[node].get(key)) for key, value in keys.items()}, keys)
            line = "  ".join(f"{node}: {sum(d for d, _r in rows.values())}/{len(rows)} settled"
                             for node, rows in result.items())
            if progress is not None and line != shown:
                progress(line)
                shown = line
            left = deadline - time.monotonic()
            if left <= 0 or all(d for rows in result.values() for d, _r in rows.values()):
                return result
            publication = subscription.recv(timeout_s=min(POLL_S, left))
            drain_until = time.monotonic() + POLL_S  # a busy stream must not starve the check
            while publication is not None:
                _take(publication, prefixes, statuses)
                publication = (subscription.recv(timeout_s=0)
                               if time.monotonic() < drain_until else None)
            if time.monotonic() >= next_dump:
                statuses = {node: status_snapshot(client, node) for node in writes}
                next_dump = time.monotonic() + REDUMP_S
    finally:
        subscription.close()

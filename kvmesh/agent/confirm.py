"""Confirm/rollback of this node's revisions (thread `agent-confirm`): a revision left
unconfirmed past its confirm timeout is rolled back here (see ``kvmesh.agent.revisions``), so it
happens even when the operator's CLI died. The revisions also feed the config-to-applied
latency histogram (their write times)."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from kvmesh.agent.config import AgentConfig
from kvmesh.agent.config_writer import (
    desired_values,
    mark,
    node_revisions,
    who_am_i,
    write_node_change,
)
from kvmesh.agent.counters import AgentCounters
from kvmesh.agent.metrics import AgentMetrics
from kvmesh.agent.revisions import ROLLED_BACK, ConfirmTimer, revision_key, rollback_values
from kvstore import KvStoreClient, KvStoreError

log = logging.getLogger("kvmesh.agent")

CONFIRM_POLL_S = 0.5  # how often the agent looks for revisions due for rollback


class ConfirmWatcher:
    def __init__(self, config: AgentConfig, counters: AgentCounters,
                 metrics: AgentMetrics) -> None:
        self.config = config
        self._counters = counters
        self._metrics = metrics

    def run(self, stop: threading.Event) -> None:
        timer = ConfirmTimer()
        client: KvStoreClient | None = None
        seen_rev = -1  # revisions already taken into the config-to-applied histogram
        while not stop.wait(CONFIRM_POLL_S):
            try:
                client = client or KvStoreClient(self.config.kv_url)
                kept = node_revisions(client, self.config.node)
                for rev in sorted(r for r in kept if r > seen_rev):
                    record = kept[rev][1]
                    for key, change in record["changes"].items():
                        if change.get("after") is not None:
                            self._metrics.written(key, float(record["time"]))
                seen_rev = max(kept, default=seen_rev)
                due = timer.due({rev: record for rev, (_v, record) in kept.items()},
                                time.monotonic())
                for rev in due:
                    self._roll_back(client, rev, *kept[rev])
                    timer.forget(rev)
            except KvStoreError as exc:
                log.warning("confirm timer: KvStore %s: %s (retrying)", self.config.kv_url, exc)
                if client is not None:
                    client.close()
                client = None
        if client is not None:
            client.close()

    def _roll_back(self, client: KvStoreClient, rev: int, value: Any,
                   record: dict[str, Any]) -> None:
        node = self.config.node
        writes = rollback_values(record)
        current = desired_values(client, node, writes)
        new_rev = write_node_change(
            client, node, writes, current, who=who_am_i(f"agent {node}"),
            description=f"rollback of revision {rev}: not confirmed in time",
            extra={revision_key(node, rev): mark(client, value, record, ROLLED_BACK)})
        self._counters.count("confirm_rollbacks")
        log.warning("revision %d not confirmed in time: rolled back (revision %d)", rev, new_rev)

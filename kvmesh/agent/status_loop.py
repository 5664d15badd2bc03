"""Publishing what the agent's parts report (``kvmesh.agent.events``) under `status/<node>/`
and `node/<node>/`, refreshing TTLs (thread `agent-status`, with its own KvStore client)."""

from __future__ import annotations

import logging
import queue
import threading
import time

from kvmesh.agent.config import AgentConfig
from kvmesh.agent.counters import AgentCounters
from kvmesh.agent.events import (
    AgentAnnounced,
    DeviceStateChanged,
    StatusEvent,
    ValueRefused,
    ValueStatusChanged,
)
from kvmesh.agent.keys import agent_key, device_key, status_prefix
from kvmesh.agent.metrics import AgentMetrics
from kvmesh.agent.status import StatusPublisher
from kvstore import KvStoreClient, KvStoreError
from scheduler import ValueState

log = logging.getLogger("kvmesh.agent")
# Longest the thread sleeps with nothing to do: events and `wake` end the wait at once, a TTL
# refresh ends it when due; the bound only matters if stop is set without `wake`.
IDLE_WAIT_S = 1.0


class StatusPublishing:
    """Takes events from any thread (`post`); `run` publishes them until `stop` is set."""

    def __init__(self, config: AgentConfig, counters: AgentCounters,
                 metrics: AgentMetrics) -> None:
        self.config = config
        self.publisher = StatusPublisher(config.node, ttl_ms=config.status_ttl_ms,
                                         heartbeat_ms=config.heartbeat_ms)
        self._counters = counters
        self._metrics = metrics
        self._events: queue.SimpleQueue[StatusEvent | None] = queue.SimpleQueue()

    def post(self, event: StatusEvent) -> None:
        self._events.put(event)

    def wake(self) -> None:
        """End the thread's wait now (the stop event was set)."""
        self._events.put(None)

    def run(self, stop: threading.Event) -> None:
        client = KvStoreClient(self.config.kv_url)
        prefix = status_prefix(self.config.node)
        seeded = False
        try:
            while not stop.is_set():
                try:
                    if not seeded:
                        self.publisher.seed(client.dump(prefix=prefix))
                        seeded = True
                    self._collect(timeout=min(self.publisher.refresh_due_in(time.monotonic()),
                                              IDLE_WAIT_S))
                    out = self.publisher.take(time.monotonic())
                    if out:
                        client.set(out)
                        self._counters.count("statuses_published", len(out))
                except KvStoreError as exc:
                    self._counters.count("kvstore_errors")
                    log.warning("publishing statuses: %s (retrying)", exc)
                    stop.wait(1.0)
        finally:
            client.close()

    def _collect(self, timeout: float) -> None:
        """Every event posted within `timeout` (and what is queued after it) to the publisher.

        An idle agent waits here: blocking until something happens, not polling, keeps its
        CPU at rest (issue 21)."""
        try:
            event = self._events.get(timeout=timeout)
        except queue.Empty:
            return
        while True:
            self._take(event)
            try:
                event = self._events.get_nowait()
            except queue.Empty:
                return

    def _take(self, event: StatusEvent | None) -> None:
        node = self.config.node
        match event:
            case None:
                pass  # `wake`: the loop looks at its stop event
            case ValueStatusChanged(status):
                self.publisher.on_status(status)
                if status.state is ValueState.CONFIGURED and status.derived_from is None:
                    self._metrics.configured(status.key, time.time())
            case DeviceStateChanged():
                self.publisher.publish(device_key(node, event.device), event.record())
            case AgentAnnounced(record):
                self.publisher.publish(agent_key(node), record, heartbeat=True)
            case ValueRefused(model_key, reason):
                self.publisher.refuse(model_key, reason)

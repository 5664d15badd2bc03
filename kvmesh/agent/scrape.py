"""What /metrics reads at scrape time: the KvStore node's counters, the scheduler's stats,
the agent's counters and the reconciliation states, with the histograms ``AgentMetrics``
observes as things happen."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping
from typing import Any

from kvmesh.agent.config import AgentConfig
from kvmesh.agent.counters import AgentCounters
from kvmesh.agent.metrics import (
    AgentMetrics,
    Family,
    HistogramFamily,
    MetricFamily,
    flat_counters,
    flood_batch_histogram,
    kvstore_families,
)
from kvmesh.agent.recon import DeviceState, ReconciliationManager
from kvstore import KvStoreClient, KvStoreError, NodeInfo, version
from scheduler import KVScheduler, ValueState

log = logging.getLogger("kvmesh.agent")


class MetricsScrape:
    def __init__(self, config: AgentConfig, scheduler: KVScheduler,
                 recon: ReconciliationManager, counters: AgentCounters) -> None:
        self.config = config
        self.scheduler = scheduler
        self.recon = recon
        self._counters = counters
        self.metrics = AgentMetrics(self._snapshot)
        self._txn_seen_start: float | None = None  # only scrapes touch it (REST server thread)

    def text(self) -> str:
        self._observe_transactions()
        return self.metrics.text()

    def _observe_transactions(self) -> None:
        """Transaction durations into their histogram, from the history (at scrape time: a
        transaction trimmed from the history before a scrape — 10 000 kept — is not seen)."""
        records = self.scheduler.transaction_history(since=self._txn_seen_start)
        fresh = [r for r in records if r.seq > self.metrics.last_txn_seq and r.end is not None]
        if fresh:
            self.metrics.observe_transactions(fresh)
            self._txn_seen_start = max(r.start for r in fresh)

    def _snapshot(self) -> list[Family]:
        families, extra = self._kvstore_families()
        sched = _numbers(self.scheduler.stats())
        families += flat_counters("kvmesh_scheduler", sched, help_prefix="scheduler stat ")
        families += flat_counters("kvmesh_agent", self._counters.snapshot(),
                                  help_prefix="agent counter ")
        families += self._recon_families()
        families += self._value_families()
        families.append(MetricFamily(
            "kvmesh_agent_build_info", "gauge",
            "Always 1; the labels say the agent's software version and KvStore protocol")
            .add(1, version=version.__version__, protocol=str(version.PROTOCOL_VERSION)))
        return [*families, *extra]

    def _value_families(self) -> list[MetricFamily]:
        """This node's values by state (every state, 0 included: alerts compare it), and which
        node the agent serves (label node, value 1: for joins and dashboards)."""
        counts = Counter(s.state.name for s in self.scheduler.get_value_statuses())
        values = MetricFamily("kvmesh_scheduler_values", "gauge",
                              "Values known to this node's scheduler, by state")
        for state in ValueState:
            values.add(counts.get(state.name, 0), state=state.name)
        info = MetricFamily("kvmesh_agent_info", "gauge", "1, with the node's name and version")
        info.add(1, node=self.config.node, version=version.__version__)
        return [values, info]

    def _kvstore_families(self) -> tuple[list[MetricFamily], list[HistogramFamily]]:
        families: list[MetricFamily] = []
        extra: list[HistogramFamily] = []
        up = MetricFamily("kvmesh_kvstore_up", "gauge",
                          "1 when this scrape read the local KvStore node's counters")
        try:
            with KvStoreClient(self.config.kv_url, timeout_s=2.0) as client:
                kv = client.counters()
                info = client.node_info(refresh=True)
            up.add(1)
            families += kvstore_families(kv)
            families.append(node_build_info(info))
            histogram = flood_batch_histogram(kv)
            if histogram is not None:
                extra.append(histogram)
        except KvStoreError as exc:
            # The scrape still answers (scheduler, agent, recon), and says what is missing.
            up.add(0)
            self._counters.count("metrics_kvstore_unreachable")
            log.warning("/metrics: KvStore %s did not answer (%s): its counters are left out "
                        "of this scrape (kvmesh_kvstore_up 0)", self.config.kv_url, exc)
        families.append(up)
        return families, extra

    def _recon_families(self) -> list[MetricFamily]:
        dev = MetricFamily("kvmesh_recon_device_known", "gauge", "1 when the device is KNOWN")
        for name, state in self.recon.devices().items():
            dev.add(1 if state is DeviceState.KNOWN else 0, device=name)
        per_service = {
            "successes": MetricFamily("kvmesh_recon_successes", "counter",
                                      "Successful reconciliation runs"),
            "failures": MetricFamily("kvmesh_recon_failures", "counter",
                                     "Failed reconciliation runs"),
            "cancellations": MetricFamily("kvmesh_recon_cancellations", "counter",
                                          "Reconciliation runs cancelled by a disconnect"),
        }
        for device, services in self.recon.status().items():
            for service, st in services.items():
                for field, family in per_service.items():
                    value = st[field]
                    if isinstance(value, int):
                        family.add(value, device=device, service=service)
        return [dev, *per_service.values()]


def node_build_info(info: NodeInfo) -> MetricFamily:
    """The node's versions as an info metric (a 0.4.0 node reports none: "?" and protocol 1)."""
    return MetricFamily(
        "kvmesh_kvstore_build_info", "gauge",
        "Always 1; the labels say the KvStore node's software version and protocol range"
    ).add(1, version=info.version or "?", protocol=str(info.protocol or 1),
          min_protocol=str(info.min_protocol or info.protocol or 1))


def _numbers(stats: Mapping[str, Any], prefix: str = "") -> dict[str, float]:
    """Flatten nested stats into `a.b` -> number (non-numbers dropped)."""
    out: dict[str, float] = {}
    for key, value in stats.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(_numbers(value, f"{name}."))
        elif isinstance(value, int | float) and not isinstance(value, bool):
            out[name] = value
    return out

"""The agent's /metrics, exposed through prometheus_client (text format 0.0.4).

Two kinds of metrics:

* snapshots read at scrape time (the KvStore's and the scheduler's counters, agent counters,
  device states): described as ``MetricFamily`` and turned into prometheus_client families;
* histograms observed as things happen (``AgentMetrics``): transaction duration,
  config-to-applied latency, and the KvStore's flood batch sizes (kept by the KvStore node as
  bucket counters, see kvstore.batch_sizes, and exposed here as a cumulative histogram).
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
    UnknownMetricFamily,
)
from prometheus_client.registry import Collector

from kvstore import stats

_INVALID = re.compile(r"[^a-zA-Z0-9_:]")
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
MAX_TRACKED_KEYS = 100_000


def metric_name(*parts: str) -> str:
    """Join parts into a valid metric name (`kvstore.sent_key_vals` -> `kvstore_sent_key_vals`)."""
    name = _INVALID.sub("_", "_".join(p for p in parts if p))
    return name if not name[:1].isdigit() else f"_{name}"


@dataclass
class MetricFamily:
    name: str
    kind: str  # "counter" | "gauge" | "untyped"
    help: str
    samples: list[tuple[dict[str, str], float]] = field(default_factory=list)

    def add(self, value: float, **labels: str) -> MetricFamily:
        self.samples.append((labels, value))
        return self

    def to_prometheus(self) -> Metric:
        names = sorted({name for labels, _v in self.samples for name in labels})
        kinds = {"counter": CounterMetricFamily, "gauge": GaugeMetricFamily}
        family = kinds.get(self.kind, UnknownMetricFamily)(self.name, self.help, labels=names)
        for labels, value in self.samples:
            family.add_metric([str(labels.get(name, "")) for name in names], float(value))
        return family


class _Snapshot(Collector):
    def __init__(self, collect: Callable[[], Iterable[Metric]]) -> None:
        self._collect = collect

    def collect(self) -> Iterator[Metric]:
        yield from self._collect()


def render(families: Iterable[MetricFamily]) -> str:
    """Exposition text of `families` alone."""
    registry = CollectorRegistry()
    registry.register(_Snapshot(lambda: [f.to_prometheus() for f in families if f.samples]))
    return generate_latest(registry).decode()


def flat_counters(prefix: str, counters: Mapping[str, float], gauges: Iterable[str] = (),
                  help_prefix: str = "") -> list[MetricFamily]:
    """One family per flat counter (`a.b.c` -> `<prefix>_a_b_c`); names in `gauges` are gauges."""
    gauge_set = set(gauges)
    families = []
    for key in sorted(counters):
        value = counters[key]
        if not isinstance(value, int | float) or stats.kind_of(key) is stats.Kind.HISTOGRAM:
            continue
        kind = "gauge" if key in gauge_set else "counter"
        families.append(MetricFamily(metric_name(prefix, key), kind, f"{help_prefix}{key}")
                        .add(value))
    return families


def kvstore_families(counters: Mapping[str, float]) -> list[MetricFamily]:
    """A KvStore node's counters (COUNTERS_GET) as families `kvmesh_<name>`, of the kind and
    with the help kvstore.stats declares. The batch size counters are left out (see
    `flood_batch_histogram`); a name the node reports but this agent's kvstore does not
    declare (a newer node) is exported untyped rather than guessed."""
    families = []
    for key in sorted(counters):
        value = counters[key]
        declared = stats.lookup(key)
        if not isinstance(value, int | float) or (
                declared is not None and declared.kind is stats.Kind.HISTOGRAM):
            continue
        kind, help = ((declared.kind.value, declared.help) if declared is not None
                      else ("untyped", f"KvStore counter {key} (not declared here)"))
        families.append(MetricFamily(metric_name("kvmesh", key), kind, help).add(value))
    return families


def flood_batch_histogram(counters: Mapping[str, float]) -> Metric | None:
    """The KvStore's flood batch size bucket counters as a cumulative histogram."""
    if stats.FLOOD_BATCH_SIZE_COUNT not in counters:
        return None
    buckets: list[tuple[str, float]] = []
    total = 0.0
    for bound in stats.BATCH_SIZE_BOUNDS:
        total += counters.get(stats.FLOOD_BATCH_SIZE_BUCKET(bound), 0)
        buckets.append((str(float(bound)), total))
    total += counters.get(stats.FLOOD_BATCH_SIZE_BUCKET("inf"), 0)
    buckets.append(("+Inf", total))
    return HistogramMetricFamily(
        "kvmesh_kvstore_flood_batch_size", "Key-values per batch the KvStore node flooded to "
        "its peers", buckets=buckets, sum_value=counters.get(stats.FLOOD_BATCH_SIZE_SUM, 0))


class AgentMetrics:
    """The agent's registry: histograms observed as things happen, plus a snapshot collector."""

    def __init__(self, snapshot: Callable[[], Iterable[Metric]]) -> None:
        self.registry = CollectorRegistry()
        self.txn_duration = Histogram(
            "kvmesh_scheduler_transaction_duration_seconds",
            "Duration of the scheduler's transactions (NB, resync, retry, SB notification)",
            registry=self.registry, buckets=LATENCY_BUCKETS)
        self.config_to_applied = Histogram(
            "kvmesh_config_to_applied_seconds",
            "From the time a change was written (its revision's time: kvmesh apply, rollback, "
            "REST POST /configuration) to the value's CONFIGURED status on this node",
            registry=self.registry, buckets=LATENCY_BUCKETS)
        self.registry.register(_Snapshot(snapshot))
        self._lock = threading.Lock()
        self._last_txn_seq = 0
        self._written: OrderedDict[str, float] = OrderedDict()  # key -> write time
        self._applied: OrderedDict[str, float] = OrderedDict()  # key -> CONFIGURED time

    def text(self) -> str:
        return generate_latest(self.registry).decode()

    def observe_transactions(self, records: Iterable[object]) -> None:
        """Observe the durations of finished transactions not seen yet (from the history)."""
        with self._lock:
            for record in records:
                seq, start, end = (getattr(record, "seq", 0), getattr(record, "start", None),
                                   getattr(record, "end", None))
                if seq <= self._last_txn_seq or end is None or start is None:
                    continue
                self._last_txn_seq = seq
                self.txn_duration.observe(max(0.0, end - start))

    @property
    def last_txn_seq(self) -> int:
        return self._last_txn_seq

    def written(self, key: str, at: float) -> None:
        """A change of `key` was written at `at` (its revision's time)."""
        self._meet(key, at, written=True)

    def configured(self, key: str, at: float) -> None:
        """`key`'s status became CONFIGURED at `at`."""
        self._meet(key, at, written=False)

    def _meet(self, key: str, at: float, written: bool) -> None:
        """Either event may be seen first: the other one, when already seen, completes the
        observation; else this one waits for it."""
        mine, other = (self._written, self._applied) if written else (self._applied,
                                                                     self._written)
        with self._lock:
            seen = other.pop(key, None)
            if seen is not None:
                start, end = (at, seen) if written else (seen, at)
                if end >= start:
                    self.config_to_applied.observe(end - start)
                    return
            _bounded_put(mine, key, at)


def _bounded_put(table: OrderedDict[str, float], key: str, value: float) -> None:
    table[key] = value
    table.move_to_end(key)
    while len(table) > MAX_TRACKED_KEYS:
        table.popitem(last=False)

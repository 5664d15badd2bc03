"""The agent's /metrics (Prometheus text format 0.0.4).

Two kinds of metrics:

* snapshots read at scrape time (the KvStore's and the scheduler's counters, agent counters,
  device states): described as ``MetricFamily``;
* histograms (``HistogramFamily``): observed as things happen (``AgentMetrics``: transaction
  duration, config-to-applied latency), and the KvStore's flood batch sizes (kept by the
  KvStore node as bucket counters, see kvstore.batch_sizes, exposed as a cumulative histogram).

The families are plain data; prometheus_client writes the text (kvmesh.agent.exposition),
imported at the first scrape: an agent nobody scrapes does not load it.
"""

from __future__ import annotations

import bisect
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence

# The families are re-exported: they are built here (kvmesh.agent.metric_families says why they
# live apart).
from kvmesh.agent.metric_families import Family as Family
from kvmesh.agent.metric_families import HistogramFamily as HistogramFamily
from kvmesh.agent.metric_families import MetricFamily as MetricFamily
from kvstore import stats

_INVALID = re.compile(r"[^a-zA-Z0-9_:]")
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
MAX_TRACKED_KEYS = 100_000


def metric_name(*parts: str) -> str:
    """Join parts into a valid metric name (`kvstore.sent_key_vals` -> `kvstore_sent_key_vals`)."""
    name = _INVALID.sub("_", "_".join(p for p in parts if p))
    return name if not name[:1].isdigit() else f"_{name}"




def render(families: Iterable[Family]) -> str:
    """Exposition text of `families`."""
    from kvmesh.agent.exposition import text  # prometheus_client: loaded when first scraped

    return text(families)


class Histogram:
    """Observations counted into fixed buckets (what prometheus_client's Histogram keeps,
    without loading it). Not locked: its owner (AgentMetrics) holds a lock around it."""

    def __init__(self, name: str, help: str, bounds: Sequence[float]) -> None:
        self.name, self.help = name, help
        self._bounds = tuple(bounds)
        self._counts = [0] * (len(self._bounds) + 1)  # the last one: above every bound
        self._sum = 0.0
        self._created = time.time()

    def observe(self, value: float) -> None:
        # A value equal to a bound counts in that bound's bucket (le: "less or equal").
        self._counts[bisect.bisect_left(self._bounds, value)] += 1
        self._sum += value

    def family(self) -> HistogramFamily:
        labels = [str(float(bound)) for bound in self._bounds] + ["+Inf"]
        buckets: list[tuple[str, float]] = []
        total = 0
        for label, count in zip(labels, self._counts, strict=True):
            total += count
            buckets.append((label, total))
        return HistogramFamily(self.name, self.help, buckets, self._sum, self._created)


_MILLISECONDS = re.compile(r"_ms(?=_|$)")


def in_base_units(name: str, value: float) -> tuple[str, float]:
    """A KvStore counter in milliseconds (`kvstore.uptime_ms` -> `..._uptime_seconds`) in
    seconds, Prometheus's base unit (what `promtool check metrics` asks for); others as they
    are."""
    seconds = _MILLISECONDS.sub("_seconds", name)
    return (name, value) if seconds == name else (seconds, value / 1000)


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
    """A KvStore node's counters (COUNTERS_GET) as families `kvmesh_<name>` (milliseconds as
    seconds: `in_base_units`), of the kind and with the help kvstore.stats declares. The batch
    size counters are left out (see `flood_batch_histogram`); a name the node reports but
    this agent's kvstore does not declare (a newer node) is exported untyped rather than
    guessed."""
    families = []
    # Every counter this agent's kvstore declares is exported, 0 until the node reports it: a
    # series that appears only at its first event breaks rate() and the alerts and dashboards
    # written against it (packaging/), and a typo in them would look like a quiet counter.
    everything = {**dict.fromkeys(stats.STATS, 0), **counters}
    for key in sorted(everything):
        value = everything[key]
        declared = stats.lookup(key)
        if not isinstance(value, int | float) or (
                declared is not None and declared.kind is stats.Kind.HISTOGRAM):
            continue
        kind, help = ((declared.kind.value, declared.help) if declared is not None
                      else ("untyped", f"KvStore counter {key} (not declared here)"))
        name, value = in_base_units(metric_name("kvmesh", key), value)
        families.append(MetricFamily(name, kind, help).add(value))
    return families


def flood_batch_histogram(counters: Mapping[str, float]) -> HistogramFamily | None:
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
    return HistogramFamily(
        "kvmesh_kvstore_flood_batch_size", "Key-values per batch the KvStore node flooded to "
        "its peers", buckets, counters.get(stats.FLOOD_BATCH_SIZE_SUM, 0))


class AgentMetrics:
    """The agent's metrics: histograms observed as things happen, then what `snapshot` reads
    at scrape time."""

    def __init__(self, snapshot: Callable[[], Iterable[Family]]) -> None:
        self._snapshot = snapshot
        self.txn_duration = Histogram(
            "kvmesh_scheduler_transaction_duration_seconds",
            "Duration of the scheduler's transactions (NB, resync, retry, SB notification)",
            LATENCY_BUCKETS)
        self.config_to_applied = Histogram(
            "kvmesh_config_to_applied_seconds",
            "From the time a change was written (its revision's time: kvmesh apply, rollback, "
            "REST POST /configuration) to the value's CONFIGURED status on this node",
            LATENCY_BUCKETS)
        self._lock = threading.Lock()
        self._last_txn_seq = 0
        self._written: OrderedDict[str, float] = OrderedDict()  # key -> write time
        self._applied: OrderedDict[str, float] = OrderedDict()  # key -> CONFIGURED time

    def text(self) -> str:
        with self._lock:
            observed = [self.txn_duration.family(), self.config_to_applied.family()]
        return render([*observed, *self._snapshot()])

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

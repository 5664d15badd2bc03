"""The Prometheus text format (0.0.4) of the agent's metric families, by prometheus_client.

The only module of the agent that imports prometheus_client (~12 MiB of RSS): kvmesh.agent.metrics
loads it at the first /metrics scrape, so an agent nobody scrapes never pays for it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
    UnknownMetricFamily,
)
from prometheus_client.samples import Sample

from kvmesh.agent.metric_families import Family, HistogramFamily, MetricFamily


def text(families: Iterable[Family]) -> str:
    """Exposition text of `families` (a family without samples is left out)."""
    registry = CollectorRegistry()
    registry.register(_Families([_metric(f) for f in families if _has_samples(f)]))
    return generate_latest(registry).decode()


class _Families:
    """A collector of families already built (the registry asks it once, at `generate_latest`)."""

    def __init__(self, metrics: list[Metric]) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        yield from self._metrics


def _has_samples(family: Family) -> bool:
    return bool(family.samples) if isinstance(family, MetricFamily) else True


def _metric(family: Family) -> Metric:
    if isinstance(family, MetricFamily):
        return _flat(family)
    return _histogram(family)


def _flat(family: MetricFamily) -> Metric:
    names = sorted({name for labels, _v in family.samples for name in labels})
    kinds = {"counter": CounterMetricFamily, "gauge": GaugeMetricFamily}
    metric = kinds.get(family.kind, UnknownMetricFamily)(family.name, family.help, labels=names)
    for labels, value in family.samples:
        metric.add_metric([str(labels.get(name, "")) for name in names], float(value))
    return metric


def _histogram(family: HistogramFamily) -> Metric:
    metric = HistogramMetricFamily(family.name, family.help, buckets=family.buckets,
                                   sum_value=family.sum)
    if family.created is not None:
        # What prometheus_client's own Histogram reports: when the series started.
        metric.samples.append(Sample(f"{family.name}_created", {}, family.created))
    return metric

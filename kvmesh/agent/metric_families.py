"""The agent's metric families as plain data: what kvmesh.agent.metrics builds and
kvmesh.agent.exposition writes (a module of its own, so that neither imports the other)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class MetricFamily:
    name: str
    kind: str  # "counter" | "gauge" | "untyped"
    help: str
    samples: list[tuple[dict[str, str], float]] = field(default_factory=list)

    def add(self, value: float, **labels: str) -> MetricFamily:
        self.samples.append((labels, value))
        return self


@dataclass(frozen=True)
class HistogramFamily:
    """One histogram without labels: cumulative `buckets` (upper bound as text, e.g. "0.5" or
    "+Inf", count), the `sum` of the observations, and `created` (epoch seconds) if known."""

    name: str
    help: str
    buckets: list[tuple[str, float]]
    sum: float
    created: float | None = None


Family = MetricFamily | HistogramFamily

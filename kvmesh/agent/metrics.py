"""Prometheus text exposition (format 0.0.4) of the node's counters.

Written by hand because the format is small and stable; the test suite checks the output with
prometheus_client's own parser.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

_INVALID = re.compile(r"[^a-zA-Z0-9_:]")


def metric_name(*parts: str) -> str:
    """Join parts into a valid metric name (`kvstore.sent_key_vals` -> `kvstore_sent_key_vals`)."""
    name = _INVALID.sub("_", "_".join(p for p in parts if p))
    return name if not name[:1].isdigit() else f"_{name}"


def _escape_label(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _format_value(value: float) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


@dataclass
class MetricFamily:
    name: str
    kind: str  # "counter" | "gauge" | "untyped"
    help: str
    samples: list[tuple[dict[str, str], float]] = field(default_factory=list)

    def add(self, value: float, **labels: str) -> MetricFamily:
        self.samples.append((labels, value))
        return self


def render(families: Iterable[MetricFamily]) -> str:
    lines: list[str] = []
    for fam in families:
        if not fam.samples:
            continue
        # Counters carry the conventional _total suffix; in the 0.0.4 text format the HELP and
        # TYPE lines must name the sample exactly.
        sample_name = f"{fam.name}_total" if fam.kind == "counter" else fam.name
        lines.append(f"# HELP {sample_name} {fam.help.replace(chr(10), ' ')}")
        lines.append(f"# TYPE {sample_name} {fam.kind}")
        for labels, value in fam.samples:
            label_text = ""
            if labels:
                inner = ",".join(
                    f'{k}="{_escape_label(str(v))}"' for k, v in sorted(labels.items())
                )
                label_text = "{" + inner + "}"
            lines.append(f"{sample_name}{label_text} {_format_value(value)}")
    return "\n".join(lines) + "\n"


def flat_counters(prefix: str, counters: Mapping[str, float], gauges: Iterable[str] = (),
                  help_prefix: str = "") -> list[MetricFamily]:
    """One family per flat counter (`a.b.c` -> `<prefix>_a_b_c`); names in `gauges` are gauges."""
    gauge_set = set(gauges)
    families = []
    for key in sorted(counters):
        value = counters[key]
        if not isinstance(value, int | float):
            continue
        kind = "gauge" if key in gauge_set else "counter"
        families.append(MetricFamily(metric_name(prefix, key), kind, f"{help_prefix}{key}")
                        .add(value))
    return families

"""packaging/: the Prometheus alerting rules and the Grafana dashboard, checked against a live
agent (a typo in a metric name would otherwise be an alert that never fires, a blank panel)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from kvmesh import cluster

REPO = Path(__file__).resolve().parents[1]
RULES = REPO / "packaging" / "prometheus" / "kvmesh-rules.yml"
DASHBOARD = REPO / "packaging" / "grafana" / "kvmesh.json"
# Series Prometheus makes itself (not on /metrics).
PROMETHEUS_OWN = {"up"}
# The alerts the issue asks for (packaging/prometheus/kvmesh-rules.yml).
ALERTS = {"KvmeshAgentDown", "KvmeshKvStoreUnreachable", "KvmeshPeerNotInitialized",
          "KvmeshValuesFailed", "KvmeshConfigToAppliedSlow", "KvmeshAntiEntropyRepairing"}
_IDENT = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_STRINGS = re.compile(r'"[^"]*"')
_BRACES = re.compile(r"\{[^}]*\}|\[[^\]]*\]")


def _promtool() -> str:
    found = shutil.which("promtool")
    assert found, "promtool is missing: run tools/setup.sh (Debian package prometheus)"
    return found


def metric_names(expr: str) -> set[str]:
    """The metric names an expression reads: kvmesh_* identifiers and Prometheus's own
    series, outside label matchers, ranges and strings."""
    bare = _BRACES.sub(" ", _STRINGS.sub(" ", expr))
    return {name for name in _IDENT.findall(bare)
            if name.startswith("kvmesh_") or name in PROMETHEUS_OWN}


def rule_exprs() -> list[str]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule["expr"] for group in groups for rule in group["rules"]]


def dashboard_exprs() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    exprs += [v["definition"] for v in dashboard["templating"]["list"] if "definition" in v]
    return exprs


@pytest.mark.process
def test_the_rules_pass_promtool_and_name_every_asked_alert() -> None:
    out = subprocess.run([_promtool(), "check", "rules", str(RULES)], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS: 6 rules found" in out.stdout
    groups = yaml.safe_load(RULES.read_text())["groups"]
    assert {rule["alert"] for group in groups for rule in group["rules"]} == ALERTS


def test_the_metric_names_are_read_out_of_expressions() -> None:
    assert metric_names('histogram_quantile(0.99, sum by (instance, le) (rate('
                        'kvmesh_x_bucket{instance=~"$instance"}[$__rate_interval]))) > 1'
                        ) == {"kvmesh_x_bucket"}
    assert metric_names('up{job="kvmesh"} == 0') == {"up"}
    assert metric_names('label_values(kvmesh_kvstore_up, instance)') == {"kvmesh_kvstore_up"}


@pytest.fixture(scope="module")
def live_metrics(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """/metrics of a live agent in a 2-node loopback cluster (peers, so peer gauges too)."""
    run_dir = tmp_path_factory.mktemp("packaging") / "run"
    try:
        state = cluster.up(2, "chain", run_dir=run_dir, namespaces=False, timeout=90)
        yield cluster.agent_rest(state, "n1").request("GET", "/metrics").decode()
    finally:
        cluster.down(run_dir)


@pytest.mark.process
def test_a_live_agents_metrics_pass_promtool(live_metrics: str) -> None:
    out = subprocess.run([_promtool(), "check", "metrics"], input=live_metrics,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.process
def test_every_metric_the_rules_and_the_dashboard_read_is_on_a_live_agent(
    live_metrics: str,
) -> None:
    exposed = {line.split("{")[0].split(" ")[0] for line in live_metrics.splitlines()
               if line and not line.startswith("#")}
    wanted: dict[str, set[str]] = {}
    for source, exprs in (("rules", rule_exprs()), ("dashboard", dashboard_exprs())):
        for expr in exprs:
            for name in metric_names(expr):
                wanted.setdefault(name, set()).add(source)
    assert len(wanted) > 15  # the extraction found the expressions' metrics
    missing = {name: sorted(sources) for name, sources in wanted.items()
               if name not in exposed and name not in PROMETHEUS_OWN}
    assert not missing, missing
    # Values by state: every state is a series, 0 included (the FAILED alert compares it).
    assert 'kvmesh_scheduler_values{state="FAILED"} 0.0' in live_metrics

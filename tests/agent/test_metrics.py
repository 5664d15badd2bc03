"""Prometheus exposition: the output must parse with prometheus_client's reference parser."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from kvmesh.agent.metrics import MetricFamily, flat_counters, metric_name, render


def test_metric_names_are_sanitised() -> None:
    assert metric_name("kvmesh", "kvstore.received_publications") == (
        "kvmesh_kvstore_received_publications")
    assert metric_name("9lives", "a-b") == "_9lives_a_b"


def test_rendered_text_parses_with_labels_and_types() -> None:
    fams = flat_counters("kvmesh", {"kvstore.sent_key_vals": 12, "kvstore.num_keys": 3},
                         gauges=["kvstore.num_keys"])
    fams.append(MetricFamily("kvmesh_recon_successes", "counter", "Successful runs")
                .add(2, device="vpp", service='we"ird\nname'))
    fams.append(MetricFamily("kvmesh_sched_value_state", "gauge", "Values per state")
                .add(1.5, state="PENDING"))
    parsed = {f.name: f for f in text_string_to_metric_families(render(fams))}
    assert parsed["kvmesh_kvstore_sent_key_vals"].type == "counter"
    assert parsed["kvmesh_kvstore_sent_key_vals"].samples[0].value == 12
    assert parsed["kvmesh_kvstore_num_keys"].type == "gauge"
    recon = parsed["kvmesh_recon_successes"].samples[0]
    assert recon.labels == {"device": "vpp", "service": 'we"ird\nname'} and recon.value == 2
    assert parsed["kvmesh_sched_value_state"].samples[0].value == 1.5

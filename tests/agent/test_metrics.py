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


def test_flood_batch_sizes_become_a_cumulative_histogram() -> None:
    from kvmesh.agent.metrics import flood_batch_histogram
    from kvmesh.agent.metrics import render as render_families
    from kvstore.batch_sizes import count_batch

    counters: dict[str, int] = {}
    for size in (1, 1, 3, 700, 20000):
        count_batch(counters, size)
    family = flood_batch_histogram(counters)
    assert family is not None
    parsed = {f.name: f for f in text_string_to_metric_families(render_families([family]))}
    samples = {(s.name, s.labels.get("le")): s.value
               for s in parsed["kvmesh_kvstore_flood_batch_size"].samples}
    assert samples[("kvmesh_kvstore_flood_batch_size_bucket", "1.0")] == 2
    assert samples[("kvmesh_kvstore_flood_batch_size_bucket", "5.0")] == 3
    assert samples[("kvmesh_kvstore_flood_batch_size_bucket", "1000.0")] == 4
    assert samples[("kvmesh_kvstore_flood_batch_size_bucket", "+Inf")] == 5
    assert samples[("kvmesh_kvstore_flood_batch_size_sum", None)] == 20705
    # the raw bucket counters are not exported as counters of their own
    assert "batch_size" not in render_families(flat_counters("kvmesh", counters))


def test_agent_histograms_transactions_and_config_to_applied() -> None:
    from types import SimpleNamespace

    from kvmesh.agent.metrics import AgentMetrics

    metrics = AgentMetrics(lambda: [])
    metrics.observe_transactions([SimpleNamespace(seq=1, start=10.0, end=10.2),
                                  SimpleNamespace(seq=2, start=11.0, end=None)])
    metrics.observe_transactions([SimpleNamespace(seq=1, start=10.0, end=10.2)])  # seen
    metrics.written("a", 100.0)
    metrics.configured("a", 100.5)  # write seen first
    metrics.configured("b", 200.3)
    metrics.written("b", 200.0)  # status seen first
    metrics.configured("c", 1.0)  # no write known: nothing observed
    parsed = {f.name: f for f in text_string_to_metric_families(metrics.text())}
    txn = {s.name: s.value for s in
           parsed["kvmesh_scheduler_transaction_duration_seconds"].samples}
    assert txn["kvmesh_scheduler_transaction_duration_seconds_count"] == 1
    latency = {(s.name, s.labels.get("le")): s.value
               for s in parsed["kvmesh_config_to_applied_seconds"].samples}
    assert latency[("kvmesh_config_to_applied_seconds_count", None)] == 2
    assert latency[("kvmesh_config_to_applied_seconds_bucket", "0.25")] == 0
    assert latency[("kvmesh_config_to_applied_seconds_bucket", "0.5")] == 2


def test_agent_histograms_read_as_prometheus_client_histograms_would() -> None:
    """The agent counts its histograms itself (prometheus_client loads at the first scrape):
    the exposition is that of prometheus_client's own Histogram given the same observations."""
    import prometheus_client

    from kvmesh.agent.metrics import LATENCY_BUCKETS, Histogram

    ours = Histogram("h_seconds", "Some durations", LATENCY_BUCKETS)
    registry = prometheus_client.CollectorRegistry()
    reference = prometheus_client.Histogram("h_seconds", "Some durations", registry=registry,
                                            buckets=LATENCY_BUCKETS)
    for value in (0.0, 0.005, 0.0051, 0.3, 1.0, 59.9, 60.0, 61.0, 1e9):  # bounds, above all
        ours.observe(value)
        reference.observe(value)

    def samples(text: str) -> dict[tuple[str, str | None], float]:
        return {(s.name, s.labels.get("le")): s.value
                for f in text_string_to_metric_families(text) for s in f.samples}

    got = samples(render([ours.family()]))
    want = samples(prometheus_client.generate_latest(registry).decode())
    assert got.keys() == want.keys()
    created = ("h_seconds_created", None)
    assert abs(got.pop(created) - want.pop(created)) < 5  # both: when the histogram was made
    assert got == want


def test_a_scrape_without_the_kvstore_says_so() -> None:
    """The KvStore node not answering leaves its counters out of /metrics, visibly: the gauge
    kvmesh_kvstore_up is 0 and the agent counts it, instead of the families just vanishing."""
    from kvmesh.agent.agent import Agent, AgentConfig
    from kvstore.node_ports import free_tcp_port

    agent = Agent(AgentConfig(node="m1", kv_url=f"tcp://127.0.0.1:{free_tcp_port()}"))
    try:
        parsed = {f.name: f for f in text_string_to_metric_families(agent.rest.metrics_text())}
        assert parsed["kvmesh_kvstore_up"].samples[0].value == 0
        assert agent.counters["metrics_kvstore_unreachable"] == 1
        assert not any(name.startswith("kvmesh_kvstore_") and name != "kvmesh_kvstore_up"
                       for name in parsed)
    finally:
        agent.scheduler.close()


def test_kvstore_families_take_kind_and_help_from_the_declarations() -> None:
    from kvmesh.agent.metrics import in_base_units, kvstore_families
    from kvstore import stats
    from kvstore.batch_sizes import count_batch

    counters = {stats.NUM_KEYS: 3, stats.SENT_KEY_VALS: 12, stats.UPTIME_MS: 5,
                stats.NUM_PEERS_IN("INITIALIZED"): 1, stats.ERRORS("TOO_LARGE"): 2,
                stats.FULL_SYNC_DURATION_MS_LAST: 7, "kvstore.from_a_newer_node": 1}
    count_batch(counters, 3)
    parsed = {f.name: f for f in text_string_to_metric_families(
        render(kvstore_families(counters)))}
    kinds = {name: family.type for name, family in parsed.items()}
    # Every declared fixed counter is there, 0 when the node has not reported it yet.
    assert parsed["kvmesh_kvstore_peer_silent"].samples[0].value == 0
    assert parsed["kvmesh_kvstore_sent_key_vals"].samples[0].value == 12
    assert parsed["kvmesh_kvstore_uptime_seconds"].samples[0].value == 0.005
    kinds = {name: kind for name, kind in kinds.items()
             if name not in {in_base_units(metric_name("kvmesh", stat), 0)[0]
                             for stat in stats.STATS}
             or name in {"kvmesh_kvstore_num_keys", "kvmesh_kvstore_sent_key_vals",
                         "kvmesh_kvstore_uptime_seconds",
                         "kvmesh_kvstore_full_sync_duration_seconds_last"}}
    assert kinds == {
        "kvmesh_kvstore_num_keys": "gauge",
        "kvmesh_kvstore_sent_key_vals": "counter",
        "kvmesh_kvstore_uptime_seconds": "gauge",  # in seconds: Prometheus's base unit
        "kvmesh_kvstore_num_peers_INITIALIZED": "gauge",
        "kvmesh_kvstore_errors_TOO_LARGE": "counter",
        "kvmesh_kvstore_full_sync_duration_seconds_last": "gauge",
        "kvmesh_kvstore_from_a_newer_node": "unknown",
    }  # and the batch size counters are the histogram's, not families of their own
    assert parsed["kvmesh_kvstore_num_keys"].documentation == stats.NUM_KEYS.help
    assert parsed["kvmesh_kvstore_errors_TOO_LARGE"].documentation == stats.ERRORS.help


def test_every_declared_kvstore_counter_becomes_a_family_of_its_kind() -> None:
    from kvmesh.agent.metrics import in_base_units, kvstore_families
    from kvstore import stats

    families = {f.name: f for f in kvstore_families(dict.fromkeys(stats.STATS, 1))}
    for name, stat in stats.STATS.items():
        family = families.get(in_base_units(metric_name("kvmesh", name), 1)[0])
        if stat.kind is stats.Kind.HISTOGRAM:
            assert family is None
        else:
            assert family is not None and family.kind == stat.kind.value, name

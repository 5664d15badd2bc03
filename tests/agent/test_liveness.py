"""An agent's liveness read from the mesh: heartbeat refreshes of its record, and what a reader
concludes from the record's remaining TTL (reported: a dead agent's statuses were shown as
current for ~5 min, then vanished)."""

from __future__ import annotations

from kvmesh.agent.liveness import MISSED_HEARTBEATS, agent_liveness, format_age
from kvmesh.agent.status import StatusPublisher, decode_status
from kvstore import TTL_INFINITY
from scheduler import ValueOrigin, ValueState, ValueStatus


def test_the_agent_record_is_a_heartbeat_refreshed_apart_from_the_statuses() -> None:
    pub = StatusPublisher("n1", ttl_ms=400_000, heartbeat_ms=10_000)
    pub.publish("node/n1/agent", {"http": "h:1"}, heartbeat=True)
    pub.on_status(ValueStatus(key="a/x", state=ValueState.CONFIGURED, origin=ValueOrigin.FROM_NB))
    first = pub.take(now=0.0)
    record = decode_status(first["node/n1/agent"].value)
    assert record == {"http": "h:1", "heartbeat_ms": 10_000, "ttl_ms": 400_000}
    assert pub.refresh_due_in(now=0.0) == 10.0  # the heartbeat, not the statuses' 100 s
    beat = pub.take(now=10.0)
    assert list(beat) == ["node/n1/agent"] and beat["node/n1/agent"].value is None
    assert beat["node/n1/agent"].ttl_ms == 400_000
    assert pub.take(now=15.0) == {}
    assert set(pub.take(now=100.0)) == {"node/n1/agent", "status/n1/a/x"}  # everything


def test_a_reader_tells_up_from_down_by_the_remaining_ttl() -> None:
    record = {"heartbeat_ms": 10_000, "ttl_ms": 86_400_000}
    now = 1_000_000.0
    fresh = agent_liveness(record, 86_400_000 - 25_000, now)
    assert fresh.known and fresh.up and fresh.last_seen == now - 25
    late = MISSED_HEARTBEATS * 10_000 + 1
    down = agent_liveness(record, 86_400_000 - late, now)
    assert not down.up and down.last_seen == now - late / 1000
    assert down.describe(now).startswith("down since ") and "(30s ago)" in down.describe(now)
    assert agent_liveness(None, None, now).describe(now) == "no agent record"
    assert agent_liveness(record, TTL_INFINITY, now).up
    # A 0.4.0 agent's record says nothing: it refreshed every 75 s with a 300 s TTL.
    assert agent_liveness({"http": "h:1"}, 300_000 - 200_000, now).up
    assert not agent_liveness({"http": "h:1"}, 300_000 - 230_000, now).up
    assert (format_age(5), format_age(300), format_age(7300)) == ("5s", "5m00s", "2h01m")


def test_cluster_health_from_key_values_alone() -> None:
    import msgpack

    from kvmesh.agent.health import cluster_health
    from kvstore import Value

    def kv(record: dict[str, object], ttl_ms: int = TTL_INFINITY) -> Value:
        return Value(version=1, originator_id="x", value=msgpack.packb(record), ttl_ms=ttl_ms)

    day = 86_400_000
    beat: dict[str, object] = {"heartbeat_ms": 10_000, "ttl_ms": day}
    kvs = {
        "node/n1/agent": kv({**beat, "version": "0.5.0"}, day - 1_000),
        "node/n1/device/linux": kv({"device": "linux", "state": "KNOWN"}),
        "status/n1/a/ok": kv({"state": "CONFIGURED"}),
        "status/n1/a/bad": kv({"state": "FAILED", "error": "late", "time": 20.0}),
        "status/n1/a/worse": kv({"state": "FAILED", "error": "early", "time": 10.0}),
        "node/n2/agent": kv(beat, day - 60_000),  # a minute without a refresh
        "status/n2/a/ok": kv({"state": "CONFIGURED"}),
        "status/n3/a/ok": kv({"state": "CONFIGURED"}),  # a 0.4.0 agent without --http
        "member/n4": kv({"name": "n4", "state": "active"}),  # never ran an agent
        "member/n5": kv({"name": "n5", "state": "removed"}),
        "status/n6/a/tomb": Value(version=2, originator_id="n6", value=b""),
    }
    health = {n.name: n for n in cluster_health(kvs, now=1000.0)}
    assert sorted(health) == ["n1", "n2", "n3", "n4"]
    n1 = health["n1"]
    assert n1.version == "0.5.0" and n1.devices == {"linux": "KNOWN"}
    assert dict(n1.values) == {"CONFIGURED": 1, "FAILED": 2}
    assert n1.oldest_failed is not None and n1.oldest_failed[0] == "a/worse"
    assert n1.problems == ["2 FAILED"]
    assert health["n2"].problems == ["agent down"] and health["n2"].version == "?"
    assert health["n2"].agent.last_seen == 1000.0 - 60
    assert health["n3"].healthy and not health["n3"].agent.known
    assert health["n4"].problems == ["no agent"]
    assert health["n1"].as_json()["oldest_failed"] == {"key": "a/worse", "error": "early",
                                                       "since": 10.0}

"""Status publication: versions, TTL refreshes, tombstones, restart continuity."""

from __future__ import annotations

from kvmesh.agent.status import TOMBSTONE_TTL_MS, StatusPublisher, decode_status, status_record
from kvstore.gen.kvstore_thrift.ttypes import Value
from scheduler import TxnOperation, ValueOrigin, ValueState, ValueStatus


def st(key: str, state: ValueState, **kw) -> ValueStatus:
    return ValueStatus(key=key, state=state, origin=kw.pop("origin", ValueOrigin.FROM_NB), **kw)


def test_status_change_publishes_a_new_version_with_the_record() -> None:
    pub = StatusPublisher("n2", ttl_ms=60_000)
    pub.on_status(st("linux/route/main/10.9.0.0/24/veth0", ValueState.PENDING,
                     details=("linux/interface/veth0",), last_op=TxnOperation.CREATE, seq=4))
    out = pub.take(now=0.0)
    value = out["status/n2/linux/route/main/10.9.0.0/24/veth0"]
    assert (value.version, value.originator_id, value.ttl_ms) == (1, "n2", 60_000)
    record = decode_status(value.value)
    assert record is not None
    assert record["state"] == "PENDING" and record["details"] == ["linux/interface/veth0"]
    assert record["last_op"] == "CREATE" and record["seq"] == 4
    pub.on_status(st("linux/route/main/10.9.0.0/24/veth0", ValueState.CONFIGURED))
    assert pub.take(now=1.0)["status/n2/linux/route/main/10.9.0.0/24/veth0"].version == 2


def test_refresh_is_ttl_only_and_due_every_quarter_ttl() -> None:
    pub = StatusPublisher("n1", ttl_ms=40_000)
    pub.on_status(st("a/x", ValueState.CONFIGURED))
    pub.take(now=100.0)
    assert pub.take(now=105.0) == {}  # not due yet (every 10 s)
    refresh = pub.take(now=110.0)["status/n1/a/x"]
    assert refresh.value is None and refresh.version == 1 and refresh.ttl_version == 1
    # what the status thread sleeps for when nothing happens (it does not poll)
    assert pub.refresh_due_in(now=112.5) == 7.5 and pub.refresh_due_in(now=121.0) == 0.0


def test_the_idle_status_thread_waits_for_events_and_wakes_for_stop() -> None:
    import threading
    import time

    from kvmesh.agent.config import AgentConfig
    from kvmesh.agent.counters import AgentCounters
    from kvmesh.agent.events import AgentAnnounced
    from kvmesh.agent.metrics import AgentMetrics
    from kvmesh.agent.status_loop import StatusPublishing

    status = StatusPublishing(AgentConfig(node="n1", kv_url="tcp://127.0.0.1:9"),
                              AgentCounters(), AgentMetrics(lambda: []))

    def waits(timeout: float) -> float:
        started = time.monotonic()
        status._collect(timeout)
        return time.monotonic() - started

    threading.Timer(0.2, status.post, [AgentAnnounced({"http": "h:1"})]).start()
    assert waits(30.0) < 10  # an event ends the wait...
    assert status.publisher.take(0.0)  # ...and is taken
    threading.Timer(0.2, status.wake).start()
    assert waits(30.0) < 10  # so does wake (the agent's stop)
    assert status.publisher.take(1.0) == {}


def test_removed_value_becomes_a_short_lived_tombstone_once() -> None:
    pub = StatusPublisher("n1")
    pub.on_status(st("a/x", ValueState.CONFIGURED))
    pub.take(now=0.0)
    pub.on_status(st("a/x", ValueState.REMOVED))
    tomb = pub.take(now=1.0)["status/n1/a/x"]
    assert tomb.value == b"" and tomb.version == 2 and tomb.ttl_ms == TOMBSTONE_TTL_MS
    assert decode_status(tomb.value) is None
    pub.on_status(st("a/x", ValueState.REMOVED))
    assert "status/n1/a/x" not in pub.take(now=2.0)


def test_obtained_values_are_not_published() -> None:
    pub = StatusPublisher("n1")
    pub.on_status(st("linux/interface/host/eth0", ValueState.OBTAINED, origin=ValueOrigin.FROM_SB))
    pub.on_status(st("linux/interface/host/eth0/address/10.0.0.1/24", ValueState.OBTAINED,
                     origin=ValueOrigin.FROM_SB, derived_from="linux/interface/host/eth0"))
    assert pub.take(now=0.0) == {}


def test_restart_continues_versions_and_finds_stale_keys() -> None:
    pub = StatusPublisher("n1")
    pub.seed({
        "status/n1/a/x": Value(version=7, originator_id="n1", value=b"\x80", ttl_version=3),
        "status/n1/a/old": Value(version=2, originator_id="n1", value=b"\x80"),
        "status/n2/a/x": Value(version=9, originator_id="n2", value=b"\x80"),
    })
    assert pub.stale_keys({"a/x"}) == ["status/n1/a/old"]
    pub.on_status(st("a/x", ValueState.CONFIGURED))
    assert pub.take(now=0.0)["status/n1/a/x"].version == 8


def test_refusals_survive_the_schedulers_removed_and_are_withdrawn() -> None:
    from kvmesh.agent.status import StatusPublisher, decode_status
    from scheduler import ValueOrigin, ValueState, ValueStatus

    pub = StatusPublisher("n1")
    pub.refuse("linux/interface/a", "not valid msgpack")
    out = pub.take(0.0)
    record = decode_status(out["status/n1/linux/interface/a"].value)
    assert record is not None and record["state"] == "INVALID"
    assert record["error"] == "not valid msgpack"
    # The refused value is not desired, so the scheduler removes it: the refusal stays.
    pub.on_status(ValueStatus("linux/interface/a", ValueState.REMOVED, origin=ValueOrigin.FROM_NB))
    assert "status/n1/linux/interface/a" not in pub.take(0.0)
    # An obtained key refused by the scheduler (a reserved key) is published too.
    pub.on_status(ValueStatus("linux/interface/host/lo", ValueState.INVALID,
                              error=ValueError("read-only"), origin=ValueOrigin.FROM_SB))
    assert "status/n1/linux/interface/host/lo" in pub.take(0.0)
    pub.refuse("linux/interface/a", None)
    pub.refuse("linux/interface/host/lo", None)
    gone = pub.take(0.0)
    assert gone["status/n1/linux/interface/a"].value == b""
    assert gone["status/n1/linux/interface/host/lo"].value == b""


def test_a_pending_status_says_what_it_waits_for_by_key_in_a_field_old_readers_skip() -> None:
    """`waits_for_keys` (what `kvmesh apply --wait` matches against what other values make) is
    an extra map key: only a status that has something to say carries it, so every other record
    is as an older release wrote it."""
    waiting = ValueStatus(key="linux/interface/be0", state=ValueState.PENDING,
                          details=("existing link be0",), seq=3,
                          waits_for=(("linux/interface/host/be0",), ()))
    record = status_record(waiting, now=1.0)
    assert record["waits_for_keys"] == [["linux/interface/host/be0"], []]
    assert record["details"] == ["existing link be0"]
    configured = status_record(waiting._replace(state=ValueState.CONFIGURED, waits_for=()), 1.0)
    assert "waits_for_keys" not in configured
    assert set(record) - set(configured) == {"waits_for_keys"}

"""The console's cluster view from mesh dumps, I/O-free (kvmesh.agent.ui.cluster_view)."""

from __future__ import annotations

import shutil
import subprocess

import msgpack
import pytest

from kvmesh.agent.ui.cluster_view import build_nodes, edges, map_dot
from kvstore import Value


def v(record: dict | None) -> Value:
    raw = b"" if record is None else msgpack.packb(record)
    return Value(version=1, originator_id="x", value=raw, ttl_ms=1000, ttl_version=0)


def dumps() -> tuple[dict, dict, dict]:
    members = {"member/n1": v({"name": "n1", "role": "peer", "peers": ["n2"]}),
               "member/gone": v({"name": "gone", "state": "removed"})}
    nodes = {"node/n1/agent": v({"http": "10.0.0.1:8080", "version": "0.5.0"}),
             "node/n1/device/linux": v({"device": "linux", "state": "KNOWN"}),
             "node/n1/peers": v({"peers": {"n2": "INITIALIZED"}, "leaf": False}),
             "node/n2/peers": v({"peers": {"n1": "SYNCING", "l1": "INITIALIZED"},
                                 "leaf": False}),
             "node/l1/peers": v({"peers": {"n2": "INITIALIZED"}, "leaf": True}),
             "node/n3/agent": v(None)}  # a tombstone: not an agent
    statuses = {"status/n2/a": v({"state": "FAILED", "error": "boom", "time": 20.0}),
                "status/n2/b": v({"state": "FAILED", "error": "older", "time": 10.0}),
                "status/n2/c": v({"state": "CONFIGURED"}),
                "status/n1/d": v(None)}
    return members, nodes, statuses


def test_every_node_the_mesh_names_with_its_facts() -> None:
    rows = build_nodes(*dumps())
    assert list(rows) == ["l1", "n1", "n2", "n3"]  # a removed member is not listed
    n1, n2 = rows["n1"], rows["n2"]
    assert (n1.role, n1.member_role, n1.version, n1.agent) == ("full", "peer", "0.5.0",
                                                               "10.0.0.1:8080")
    assert n1.devices == {"linux": "KNOWN"} and n1.health == "ok"
    assert n2.counts == {"FAILED": 2, "CONFIGURED": 1}
    assert n2.oldest_failed == ("b", "older", 10.0)
    assert n2.version == "?" and n2.agent is None and n2.health == "down"
    assert rows["l1"].role == "leaf" and rows["n3"].role == "?"
    # n1 says INITIALIZED, n2 says SYNCING: the better of the two
    assert edges(rows) == {("n1", "n2"): "INITIALIZED", ("l1", "n2"): "INITIALIZED"}


@pytest.mark.skipif(shutil.which("dot") is None, reason="needs Graphviz")
def test_map_says_health_in_words_groups_leaves_and_is_valid_dot() -> None:
    rows = build_nodes(*dumps())
    dot = map_dot(rows, "n1")
    assert 'subgraph "cluster_n2"' in dot and "n2 and its leaves" in dot
    assert "n1 (this agent)\\nfull · ok" in dot and "2 failed/invalid" in dot
    assert 'label="INITIALIZED"' in dot
    svg = subprocess.run(["dot", "-Tsvg"], input=dot.encode(), capture_output=True, check=True)
    assert b"<svg" in svg.stdout and b"down" in svg.stdout


def test_status_index_follows_snapshot_and_changes() -> None:
    from kvmesh.agent.sse import value_event
    from kvmesh.agent.ui.status_index import StatusIndex

    index = StatusIndex()
    assert not index.ready
    index.apply([value_event("status/n2/a", v({"state": "FAILED", "error": "e1", "time": 5.0})),
                 value_event("status/n2/b", v({"state": "CONFIGURED"})),
                 ("synced", {"keys": 2})])
    assert index.ready
    counts, oldest = index.summary()["n2"]
    assert counts == {"FAILED": 1, "CONFIGURED": 1} and oldest == ("a", "e1", 5.0)
    index.apply([value_event("status/n2/a", v({"state": "CONFIGURED"})),
                 value_event("status/n2/b", v(None)),  # a tombstone: the value went
                 value_event("status/n3/c", v({"state": "FAILED", "error": "e3", "time": 1.0})),
                 ("expired", {"key": "status/n9/x"})])
    summary = index.summary()
    assert summary["n2"] == ({"CONFIGURED": 1}, None)
    assert summary["n3"][1] == ("c", "e3", 1.0)
    index.apply([("expired", {"key": "status/n3/c"})])
    assert "n3" not in index.summary()
    index.apply([("dropped", {"reason": "lost"})])
    assert not index.ready and not index.started and index.summary() == {}

"""Every KvStore counter is declared once (kvstore/stats.py): an undeclared name is an error in
the tests, and what a node reports is all declared."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kvstore import stats
from kvstore.config import NodeConfig
from kvstore.db import KvStoreDb
from kvstore.node import KvStoreNode
from kvstore.value import TTL_INFINITY, Value


@pytest.fixture
def strict() -> Iterator[None]:
    stats.set_strict(True)
    yield
    stats.set_strict(None)


def test_the_tests_run_in_strict_mode() -> None:
    assert stats.is_strict()  # tests/conftest.py sets KVSTORE_STRICT_COUNTERS=1


def test_a_misspelt_counter_is_an_error_in_strict_mode(strict: None) -> None:
    counters = stats.StatCounter()
    counters[stats.PEER_ADDS] += 1
    with pytest.raises(stats.UndeclaredStat, match=r"kvstore\.peer_add'"):
        counters["kvstore.peer_add"] += 1
    assert stats.SEND_FAILURE_TO("any-peer") == "kvstore.send_failure.any-peer"  # open family
    with pytest.raises(stats.UndeclaredStat):
        stats.NO_MERGE("OLD_VERSOIN")  # a closed family: only its declared reasons
    with pytest.raises(stats.UndeclaredStat):
        stats.undeclared({"kvstore.num_key": 1})
    assert counters == {"kvstore.peer_adds": 1}


def test_outside_strict_mode_an_undeclared_counter_is_logged_and_counted(
        caplog: pytest.LogCaptureFixture) -> None:
    stats.set_strict(False)
    try:
        counters = stats.StatCounter()
        counters["kvstore.not_declared_x"] += 1
        assert counters["kvstore.not_declared_x"] == 1
        assert "'kvstore.not_declared_x' is not declared" in caplog.text
        node = KvStoreNode(NodeConfig(name="s", cmd_url="tcp://127.0.0.1:*",
                                      pub_url="tcp://127.0.0.1:*"))
        node.counters["kvstore.not_declared_y"] = 3
        assert node.counter_snapshot()[stats.UNDECLARED_COUNTERS] == 1
    finally:
        stats.set_strict(None)


def test_a_stat_is_its_wire_name() -> None:
    assert stats.PEER_ADDS == "kvstore.peer_adds" and stats.PEER_ADDS.kind is stats.Kind.COUNTER
    assert stats.NUM_KEYS.kind is stats.Kind.GAUGE
    assert stats.ERRORS("TOO_LARGE") == "kvstore.errors.TOO_LARGE"
    assert stats.kind_of("kvstore.num_peers.INITIALIZED") is stats.Kind.GAUGE
    assert stats.kind_of("kvstore.send_failure.peer-a") is stats.Kind.COUNTER
    assert stats.kind_of("kvstore.flood.batch_size.le.20") is stats.Kind.HISTOGRAM
    assert stats.kind_of("kvstore.nothing") is None


def test_a_name_is_declared_once() -> None:
    with pytest.raises(ValueError, match="declared twice"):
        stats.counter("kvstore.peer_adds", "again")


def test_what_a_node_reports_is_all_declared(strict: None) -> None:
    node = KvStoreNode(NodeConfig(name="s", cmd_url="tcp://127.0.0.1:*",
                                  pub_url="tcp://127.0.0.1:*"))
    snapshot = node.counter_snapshot()  # raises in strict mode on any undeclared name
    assert snapshot[stats.UNDECLARED_COUNTERS] == 0
    assert snapshot["kvstore.store_state.EMPTY"] == 1


def test_the_core_counters_are_declared(strict: None) -> None:
    db = KvStoreDb("a")
    value = Value(1, "a", b"v", TTL_INFINITY, 0)
    db.merge({"k": value}, now_ms=0)
    db.merge({"k": value}, now_ms=0)  # NO_CHANGE
    assert not stats.undeclared(db.counters)
    assert db.counters["kvstore.no_merge.NO_CHANGE"] == 1


def test_the_counter_table_in_docs_kvstore_md_is_generated_from_the_declarations() -> None:
    from pathlib import Path

    from kvstore import counters_doc

    doc = (Path(__file__).parents[2] / "docs" / "kvstore.md").read_text()
    assert counters_doc.replace_section(doc, counters_doc.table()) == doc, (
        "docs/kvstore.md's counter table is stale: run "
        "`python -m kvstore.counters_doc --write docs/kvstore.md`")
    for name in stats.STATS:
        assert f"| `{name}` |" in doc

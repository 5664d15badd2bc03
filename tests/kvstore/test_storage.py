"""The durable store without sockets: the core's journal of durable changes, and the SQLite
data directory (round trip, compaction to one row per key, corrupt files, the lock)."""

from __future__ import annotations

import os
import sqlite3
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvstore.db import KvStoreDb
from kvstore.storage import (
    BATCH_WRITER_NICENESS,
    DB_FILE,
    CorruptStateError,
    DataDirLocked,
    DurableStore,
)
from kvstore.value import TTL_INFINITY, Value


def value(data: bytes, version: int = 1, ttl: int = TTL_INFINITY, ttl_version: int = 0,
          originator: str = "o") -> Value:
    return Value(version, originator, data, ttl, ttl_version)


def open_store(path: Path, name: str = "n1", **kwargs: object) -> DurableStore:
    store = DurableStore(path, name, "sync", **kwargs)  # type: ignore[arg-type]
    store.open()
    return store


def load(store: DurableStore) -> dict[str, Value]:
    return {key: record for chunk in store.rows() for key, record in chunk}


def write(store: DurableStore, changes: dict[str, Value | None]) -> None:
    store.submit(changes)
    assert store.flush(), store.last_error


def rows_in_file(path: Path) -> list[tuple[str, int]]:
    with sqlite3.connect(path / DB_FILE) as conn:
        return list(conn.execute("SELECT key, version FROM kv ORDER BY key"))


# ---------------------------------------------------------------------- the core's journal


def test_journal_records_durable_changes_only() -> None:
    db = KvStoreDb("me")
    db.merge({"before": value(b"x")}, 0)
    db.enable_journal()
    assert db.take_journal() == {}, "what was there before is not a change"
    db.merge({"inf": value(b"a"), "fin": value(b"b", ttl=5000)}, 0)
    journal = db.take_journal()
    assert set(journal) == {"inf"} and journal["inf"] is not None
    assert journal["inf"].value == b"a"
    # Superseded: the latest record; turned finite (higher version with a TTL): removed.
    db.merge({"inf": value(b"c", version=2)}, 1)
    db.merge({"before": value(b"y", version=2, ttl=3000)}, 1)
    journal = db.take_journal()
    assert journal["inf"] is not None and journal["inf"].value == b"c"
    assert journal["before"] is None
    # A TTL-only update to a finite TTL (`key erase`) removes it too.
    db.merge({"inf": Value(2, "o", None, 1000, 1)}, 2)
    assert db.take_journal() == {"inf": None}
    assert db.take_journal() == {}


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("abcd"), st.integers(1, 3), st.sampled_from("xy"),
                          st.sampled_from([TTL_INFINITY, TTL_INFINITY, 50, 5000]),
                          st.integers(0, 2), st.booleans())))
def test_journal_replayed_equals_the_durable_part_of_the_store(
        ops: list[tuple[str, int, str, int, int, bool]]) -> None:
    """Whatever is merged (and expires), applying the journal to what was written before gives
    exactly the store's infinite-TTL records: nothing durable is missed, nothing extra kept."""
    db = KvStoreDb("me")
    db.enable_journal()
    disk: dict[str, Value] = {}
    now = 0
    for key, version, data, ttl, ttl_version, ttl_only in ops:
        now += 20
        incoming = Value(version, "o", None if ttl_only else data.encode(), ttl, ttl_version)
        db.merge({key: incoming}, now)
        db.expire(now)
        for changed, record in db.take_journal().items():
            if record is None:
                disk.pop(changed, None)
            else:
                disk[changed] = record
    expected = dict(db.durable_records())
    assert {k: (v.version, v.value, v.ttl_version) for k, v in disk.items()} == {
        k: (v.version, v.value, v.ttl_version) for k, v in expected.items()}


# ---------------------------------------------------------------------- the data directory


def test_round_trip_one_row_per_key(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    assert load(store) == {}
    store.start()
    write(store, {"a": value(b"1"), "b": value(b"2")})
    write(store, {"a": value(b"3", version=2, ttl_version=4)})  # superseded: replaced
    write(store, {"b": None})  # left the durable part: deleted
    write(store, {f"k{i}": value(b"v" * 100) for i in range(2500)})  # several statements
    store.close()
    assert len(rows_in_file(tmp_path)) == 2501, "one row per key, nothing left behind"

    again = open_store(tmp_path)
    loaded = load(again)
    again.close()
    assert len(loaded) == 2501 and "b" not in loaded
    a = loaded["a"]
    assert (a.version, a.originator_id, a.value, a.ttl_ms, a.ttl_version, a.hash) == (
        2, "o", b"3", TTL_INFINITY, 4, None), "infinite TTL, hash left to the store"


@pytest.mark.parametrize("rows", [1, 3, 1024, 1025, 2100])
def test_batches_of_any_size_with_deletes_write_exactly_their_rows(
        tmp_path: Path, rows: int) -> None:
    """Whatever a batch holds (a statement's worth, more, a short rest that `_chunks` pads, keys
    deleted beside keys written), the table ends up with exactly the latest record per key."""
    store = open_store(tmp_path)
    store.start()
    model: dict[str, Value] = {}
    for round_ in range(3):
        changes: dict[str, Value | None] = {
            f"k{i:05d}": value(b"v%d" % (i * 7 + round_), version=round_ + 1,
                               ttl_version=round_, originator=f"o{i % 3}")
            for i in range(round_, rows + round_)
        }
        for gone in list(model)[::5]:  # a fifth of what the last round wrote leaves the table
            changes[gone] = None
        written_before = store.counters["kvstore.storage.rows_written"]
        write(store, changes)
        assert store.counters["kvstore.storage.rows_written"] - written_before == sum(
            record is not None for record in changes.values()), "padding is not counted"
        for key, record in changes.items():
            if record is None:
                model.pop(key)
            else:
                model[key] = record
    store.close()
    with sqlite3.connect(tmp_path / DB_FILE) as conn:
        on_disk = list(conn.execute("SELECT * FROM kv ORDER BY key"))
    assert on_disk == [(key, r.version, r.originator_id, r.value, r.ttl_version)
                       for key, r in sorted(model.items())]


def test_a_data_dir_of_the_first_schema_is_loaded_and_written(tmp_path: Path) -> None:
    """The file format is pinned: a database written by an earlier kvmesh (schema version 1, the
    statements it ran spelled out here) loads, and takes new writes."""
    with sqlite3.connect(tmp_path / DB_FILE) as conn:
        conn.executescript(
            "PRAGMA journal_mode=WAL;"
            "CREATE TABLE kv (key TEXT PRIMARY KEY, version INTEGER NOT NULL,"
            " originator TEXT NOT NULL, value BLOB, ttl_version INTEGER NOT NULL)"
            " STRICT, WITHOUT ROWID;"
            "CREATE TABLE meta (name TEXT PRIMARY KEY, value TEXT NOT NULL) STRICT;"
            "PRAGMA user_version=1;"
            "INSERT INTO meta VALUES ('node', 'n1');"
            "INSERT INTO kv VALUES ('old', 3, 'o', x'6f6c64', 2), ('gone', 1, 'o', x'00', 0);")
    store = open_store(tmp_path)
    old = load(store)["old"]
    assert (old.version, old.originator_id, old.value, old.ttl_ms, old.ttl_version) == (
        3, "o", b"old", TTL_INFINITY, 2)
    store.start()
    write(store, {"new": value(b"n"), "gone": None})
    store.close()
    assert rows_in_file(tmp_path) == [("new", 1), ("old", 3)]


@pytest.mark.parametrize(("durability", "niceness"), [("batch", BATCH_WRITER_NICENESS),
                                                     ("sync", 0)])
def test_only_a_batch_writer_yields_the_cpu(
        tmp_path: Path, durability: str, niceness: int) -> None:
    """A batch node's writer runs at a lower priority than the event loop; a sync node's, whose
    commits replies wait for, at the same."""
    store = DurableStore(tmp_path, "n1", durability)  # type: ignore[arg-type]
    store.open()
    store.start()
    try:
        write(store, {"k": value(b"v")})  # the writer has run: its priority is set
        assert store._thread is not None and store._thread.native_id is not None
        writer = os.getpriority(os.PRIO_PROCESS, store._thread.native_id)
        assert writer == min(19, os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
                             + niceness)
    finally:
        store.close()


def test_group_commit_reports_tickets_in_order(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    seen: list[tuple[int, str | None]] = []
    store.on_durable = lambda ticket, error: seen.append((ticket, error))
    store.start()
    tickets = [store.submit({f"k{i}": value(b"x")}) for i in range(50)]
    assert tickets == sorted(tickets) and len(set(tickets)) == 50
    assert store.submit({}) == tickets[-1], "no change: the ticket of what came before"
    assert store.flush()
    store.close()
    assert seen and seen[-1] == (tickets[-1], None)
    assert [t for t, _ in seen] == sorted(t for t, _ in seen)
    assert store.counters["kvstore.storage.commits"] <= 50


def test_garbage_file_is_refused_naming_it(tmp_path: Path) -> None:
    (tmp_path / DB_FILE).write_bytes(b"this is not an SQLite database at all" * 100)
    store = DurableStore(tmp_path, "n1")
    with pytest.raises(CorruptStateError, match=str(tmp_path / DB_FILE)):
        store.open()
    store.close()


def test_truncated_file_is_refused(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    store.start()
    write(store, {f"key/{i:06d}": value(b"v" * 200) for i in range(5000)})
    store.close()
    db_file = tmp_path / DB_FILE
    size = db_file.stat().st_size
    with open(db_file, "r+b") as fh:
        fh.truncate(size // 2)
    store = DurableStore(tmp_path, "n1")
    with pytest.raises(CorruptStateError, match="corrupt database"):
        store.open()
        load(store)
    store.close()


def test_discard_corrupt_moves_the_file_aside_and_starts_empty(tmp_path: Path) -> None:
    (tmp_path / DB_FILE).write_bytes(b"\x00garbage" * 1000)
    store = open_store(tmp_path, discard_corrupt=True)
    assert load(store) == {}
    assert store.discarded_to is not None and store.discarded_to.exists()
    store.close()


def test_another_nodes_data_dir_is_refused(tmp_path: Path) -> None:
    open_store(tmp_path, "n1").close()
    store = DurableStore(tmp_path, "n2")
    with pytest.raises(CorruptStateError, match="belongs to node 'n1'"):
        store.open()
    store.close()


def test_second_user_of_a_data_dir_is_refused(tmp_path: Path) -> None:
    first = open_store(tmp_path)
    second = DurableStore(tmp_path, "n1")
    with pytest.raises(DataDirLocked, match=r"in use by another kvmesh node \(pid \d+\)"):
        second.open()
    first.close()
    third = open_store(tmp_path)  # released with the first
    third.close()

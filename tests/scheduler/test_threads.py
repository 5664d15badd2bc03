"""Reads from other threads: what the scheduler hands out is a snapshot (or, for metadata maps, a
view whose iteration is a snapshot), and reading while transactions run never fails."""

from __future__ import annotations

import threading
from typing import Any

from scheduler import Dependency, KVScheduler, ValueState
from tests.scheduler.mocksb import MockSB, prefix_descriptor

IF = "if/"
RT = "rt/"


def setup(sched: KVScheduler, sb: MockSB) -> None:
    sched.register_descriptor(prefix_descriptor(sb, "if", IF))
    sched.register_descriptor(
        prefix_descriptor(sb, "rt", RT, deps=lambda k, v: [Dependency(label="if", key=IF + v)])
    )


def test_what_a_reader_gets_does_not_change_under_it(sched: KVScheduler, sb: MockSB) -> None:
    setup(sched, sb)
    sched.start_txn().set_value(IF + "a", {}).set_value(RT + "r", "a").commit()
    metadata = sched.get_metadata_map("if")
    keys, items, values, copy = metadata.keys(), metadata.items(), metadata.values(), dict(metadata)
    stats = sched.stats()
    by_state = stats["values_by_state"]
    statuses = sched.get_value_statuses()

    sched.start_txn().set_value(IF + "b", {}).set_value(RT + "r", None).commit()

    # What was read stays what it was...
    assert list(keys) == ["a"] and list(items) == [("a", sb.metadata[IF + "a"])]
    assert list(values) == [sb.metadata[IF + "a"]] and copy == {"a": sb.metadata[IF + "a"]}
    assert stats["transactions"] == 1 and by_state == {"CONFIGURED": 2}
    assert [(s.key, s.state) for s in statuses] == [
        (IF + "a", ValueState.CONFIGURED),
        (RT + "r", ValueState.CONFIGURED),
    ]
    # ...while the map itself is live (descriptors look up what the transaction just created)
    # and new reads see the new state.
    assert metadata.get("b") == sb.metadata[IF + "b"] and "b" in metadata and len(metadata) == 2
    assert sorted(metadata) == ["a", "b"]
    assert sched.stats()["values_by_state"] == {"CONFIGURED": 2}
    assert [s.key for s in sched.get_value_statuses()] == [IF + "a", IF + "b"]


def test_readers_during_transactions_never_fail(sb: MockSB) -> None:
    """Threads read statuses, stats, the metadata map and timelines while the worker changes
    them; a reader iterating a live dict would hit "dictionary changed size during
    iteration" here."""
    rounds, width = 30, 200
    failures: list[BaseException] = []
    done = threading.Event()
    reads = [0]

    with KVScheduler() as sched:
        setup(sched, sb)
        metadata = sched.get_metadata_map("if")

        def reader() -> None:
            try:
                while not done.is_set():
                    for label in metadata:  # a Python-level loop: switches threads mid-way
                        metadata.get(label)
                    for _label, _meta in metadata.items():
                        pass
                    statuses = sched.get_value_statuses(lambda key: key.startswith(IF))
                    assert all(s.key.startswith(IF) for s in statuses)
                    stats = sched.stats()
                    assert stats["transactions"] >= 0 and isinstance(stats["values_by_state"], dict)
                    sched.get_value_status(IF + "0")
                    sched.key_timeline(IF + "0")
                    reads[0] += 1
            except BaseException as exc:
                failures.append(exc)

        readers = [threading.Thread(target=reader) for _ in range(3)]
        for thread in readers:
            thread.start()
        try:
            for n in range(rounds):
                txn = sched.start_txn()
                for i in range(width):
                    value: Any = None if n % 2 else {"n": n}
                    txn.set_value(f"{IF}{i}", value)
                    txn.set_value(f"{RT}{i}", None if n % 2 else str(i))
                txn.commit()
        finally:
            done.set()
            for thread in readers:
                thread.join(timeout=60)
        assert not failures, failures
        assert reads[0] > 0
        stats = sched.stats()
        assert stats["transactions"] == rounds
        assert stats["values_by_state"] == {} and stats["graph_size"] == 0
        assert len(metadata) == 0 and sched.get_value_statuses() == []

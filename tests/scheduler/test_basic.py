"""Basic transactions: create/update/delete, pending, derived values, metadata, dumps."""

from __future__ import annotations

import pytest

from scheduler import Dependency, KVScheduler, TransactionError, ValueState
from tests.scheduler.mocksb import MockSB, prefix_descriptor

IFACE = "iface/"
ADDR = "addr/"
ROUTE = "route/"


def _iface_derived(key: str, value: dict) -> list[tuple[str, object]]:
    name = key[len(IFACE) :]
    return [(f"{ADDR}{name}/{ip}", {"ip": ip}) for ip in value.get("ips", ())]


def _route_deps(key: str, value: dict) -> list[Dependency]:
    return [Dependency(label="iface", key=IFACE + value["iface"])]


def setup(sched: KVScheduler, sb: MockSB) -> None:
    sched.register_descriptor(prefix_descriptor(sb, "iface", IFACE, derived=_iface_derived))
    sched.register_descriptor(prefix_descriptor(sb, "addr", ADDR, with_metadata=False))
    sched.register_descriptor(prefix_descriptor(sb, "route", ROUTE, deps=_route_deps))


def state(sched: KVScheduler, key: str) -> ValueState:
    return sched.get_value_status(key).state


def test_create_update_delete(sched: KVScheduler, sb: MockSB) -> None:
    setup(sched, sb)
    seq = sched.start_txn().set_value(IFACE + "tap0", {"ips": ["10.0.0.1/24"]}).commit()
    assert seq == 0
    assert state(sched, IFACE + "tap0") is ValueState.CONFIGURED
    assert state(sched, ADDR + "tap0/10.0.0.1/24") is ValueState.CONFIGURED
    assert sb.pop_calls() == [("create", IFACE + "tap0"), ("create", ADDR + "tap0/10.0.0.1/24")]
    assert dict(sched.get_metadata_map("iface")) == {"tap0": 1}

    sched.start_txn().set_value(IFACE + "tap0", {"ips": ["10.0.0.2/24"], "mtu": 9000}).commit()
    assert sb.pop_calls() == [
        ("delete", ADDR + "tap0/10.0.0.1/24"),
        ("update", IFACE + "tap0"),
        ("create", ADDR + "tap0/10.0.0.2/24"),
    ]
    assert state(sched, ADDR + "tap0/10.0.0.1/24") is ValueState.NONEXISTENT

    sched.start_txn().set_value(IFACE + "tap0", None).commit()
    assert sb.pop_calls() == [("delete", ADDR + "tap0/10.0.0.2/24"), ("delete", IFACE + "tap0")]
    assert state(sched, IFACE + "tap0") is ValueState.NONEXISTENT
    assert dict(sched.get_metadata_map("iface")) == {}
    assert sb.values == {}


def test_equivalent_value_is_noop(sched: KVScheduler, sb: MockSB) -> None:
    setup(sched, sb)
    sched.start_txn().set_value(IFACE + "tap0", {"ips": []}).commit()
    sb.pop_calls()
    sched.start_txn().set_value(IFACE + "tap0", {"ips": []}).commit()
    assert sb.pop_calls() == []
    record = sched.transaction_history()[-1]
    assert record.planned == [] and record.executed == []


def test_pending_until_dependency_then_repended(sched: KVScheduler, sb: MockSB) -> None:
    setup(sched, sb)
    sched.start_txn().set_value(ROUTE + "r1", {"iface": "tap0"}).commit()
    status = sched.get_value_status(ROUTE + "r1")
    assert status.state is ValueState.PENDING
    assert status.details == ("iface",)
    assert sb.pop_calls() == []

    sched.start_txn().set_value(IFACE + "tap0", {}).commit()
    assert state(sched, ROUTE + "r1") is ValueState.CONFIGURED
    assert sb.pop_calls() == [("create", IFACE + "tap0"), ("create", ROUTE + "r1")]

    sched.start_txn().set_value(IFACE + "tap0", None).commit()
    assert sb.pop_calls() == [("delete", ROUTE + "r1"), ("delete", IFACE + "tap0")]
    assert state(sched, ROUTE + "r1") is ValueState.PENDING
    assert sched.dump(view="NB") == [
        (ROUTE + "r1", {"iface": "tap0"}, None, sched.get_value_status(ROUTE + "r1").origin)
    ]


def test_create_failure_raises_transaction_error(sched: KVScheduler, sb: MockSB) -> None:
    setup(sched, sb)
    sb.fail_next(IFACE + "tap0")
    with pytest.raises(TransactionError) as info:
        sched.start_txn().set_value(IFACE + "tap0", {}).set_value(IFACE + "tap1", {}).commit()
    assert set(info.value.errors) == {IFACE + "tap0"}
    op, exc = info.value.errors[IFACE + "tap0"]
    assert op == "CREATE"
    assert "planned failure" in str(exc)
    assert state(sched, IFACE + "tap0") is ValueState.FAILED
    assert state(sched, IFACE + "tap1") is ValueState.CONFIGURED

"""A scheduler + Linux plugin over a test namespace, and the helpers the model tests share
(the ``linux`` fixture of ``conftest.py`` gives a namespace, a scheduler and the plugin)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from scheduler import KVScheduler, TxnRecord, TxnType, ValueState
from southbound.linux import LinuxPlugin, register
from tests.netns import Netns


@contextlib.contextmanager
def linux_plugin(netns: str, **options: Any) -> Iterator[tuple[KVScheduler, LinuxPlugin]]:
    """A fresh scheduler with the plugin registered in ``netns``; both closed on exit."""
    scheduler = KVScheduler()
    plugin = None
    try:
        plugin = register(scheduler, netns, **options)
        yield scheduler, plugin
    finally:
        if plugin is not None:
            plugin.close()
        scheduler.close()


def commit(scheduler: KVScheduler, values: dict[str, Any], **options: Any) -> int:
    """One NB transaction setting ``values`` (None deletes)."""
    txn = scheduler.start_txn()
    for key, value in values.items():
        txn.set_value(key, value)
    return txn.commit(**options)


def state(scheduler: KVScheduler, key: str) -> ValueState:
    return scheduler.get_value_status(key).state


def sb_values(scheduler: KVScheduler, prefix: str = "linux/") -> dict[str, Any]:
    """What Retrieve last reported (the SB view)."""
    return {item.key: item.value for item in scheduler.dump(key_prefix=prefix, view="SB")}


def last_record(scheduler: KVScheduler) -> TxnRecord:
    """The last NB transaction or resync (not an SB notification: the watcher reports changes
    to host links, e.g. the ones kvmesh makes to an existing link, at any time)."""
    return [record for record in scheduler.transaction_history()
            if record.txn_type is not TxnType.SB_NOTIFICATION][-1]


def last_ops(scheduler: KVScheduler, key: str) -> list[tuple[str, bool]]:
    """(operation, re-create?) of ``key`` in the last NB transaction or resync."""
    return [(str(op.op), op.recreate) for op in last_record(scheduler).executed
            if op.key == key]


@contextlib.contextmanager
def agent(ns: Netns) -> Iterator[tuple[KVScheduler, LinuxPlugin]]:
    """A scheduler with the Linux plugin for ``ns``, closed on exit (one agent's lifetime)."""
    with KVScheduler() as scheduler:
        plugin = register(scheduler, ns.name)
        try:
            yield scheduler, plugin
        finally:
            plugin.close()


def assert_warm_restart_writes_nothing(ns: Netns, values: dict[str, Any]) -> None:
    """Apply ``values`` with one agent; a second agent over the same namespace, resyncing the
    same desired state, finds every value CONFIGURED and sends no change request at all."""
    with agent(ns) as (first, _plugin):
        commit(first, values)
    before = ns.dump()
    with agent(ns) as (second, plugin):
        second.resync(values, kind="full")
        assert not last_record(second).executed
        assert plugin.client.generation == 0, "a change request was sent"
        assert all(state(second, key) is ValueState.CONFIGURED for key in values)
    assert ns.dump() == before


def veth_pair(a: str, b: str, **fields: Any) -> dict[str, Any]:
    """Both ends of a kvmesh veth pair, up (``fields`` apply to ``a``)."""
    return {f"linux/interface/{a}": {"type": "veth", "veth": {"peer": b}, **fields},
            f"linux/interface/{b}": {"type": "veth", "veth": {"peer": a}}}


def last_writes(scheduler: KVScheduler) -> int:
    """Southbound writes of the last transaction."""
    return scheduler.transaction_history()[-1].southbound_writes

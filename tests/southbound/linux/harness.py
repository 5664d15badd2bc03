"""A scheduler + Linux plugin over a test namespace, and the helpers the model tests share."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from scheduler import KVScheduler, ValueState
from southbound.linux import register
from southbound.linux.plugin import LinuxPlugin


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
    txn = scheduler.start_txn()
    for key, value in values.items():
        txn.set_value(key, value)
    return txn.commit(**options)


def state(scheduler: KVScheduler, key: str) -> ValueState:
    return scheduler.get_value_status(key).state


def sb_values(scheduler: KVScheduler, prefix: str) -> dict[str, Any]:
    return {item.key: item.value for item in scheduler.dump(key_prefix=prefix, view="SB")}


def veth_pair(a: str, b: str, **fields: Any) -> dict[str, Any]:
    """Both ends of a kvmesh veth pair, up (``fields`` apply to ``a``)."""
    return {f"linux/interface/{a}": {"type": "veth", "veth": {"peer": b}, **fields},
            f"linux/interface/{b}": {"type": "veth", "veth": {"peer": a}}}


def last_writes(scheduler: KVScheduler) -> int:
    """Southbound writes of the last transaction."""
    return scheduler.transaction_history()[-1].southbound_writes

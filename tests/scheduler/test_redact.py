"""`Descriptor.redact`: what the scheduler shows of a value (records, log, timelines, snapshots,
dumps) goes through it; descriptors and comparisons keep the real value."""

from __future__ import annotations

import dataclasses
import json
import logging
from typing import Any

from scheduler import REDACTED, KVScheduler
from tests.scheduler.mocksb import MockSB, prefix_descriptor

SECRET = "s3cr3t-k3y"


def hide_key(key: str, value: Any) -> Any:
    return {**value, "key": REDACTED}


def everything_shown(sched: KVScheduler, key: str) -> str:
    return "\n".join([
        json.dumps([record.as_dict() for record in sched.transaction_history()], default=str),
        "".join(record.text() for record in sched.transaction_history()),
        json.dumps([rev.as_dict() for rev in sched.key_timeline(key)], default=str),
        json.dumps([rev.as_dict() for rev in sched.graph_snapshot()], default=str),
        repr([sched.dump(view=v) for v in ("cached", "NB", "SB")]),
    ])


def test_a_redacted_field_is_shown_nowhere_but_applied(sched: KVScheduler, sb: MockSB,
                                                       caplog) -> None:
    caplog.set_level(logging.INFO, logger="scheduler.txn")
    descriptor = dataclasses.replace(prefix_descriptor(sb, "sa", "sa/"), redact=hide_key)
    sched.register_descriptor(descriptor)
    txn = sched.start_txn()
    txn.set_value("sa/1", {"spi": 1, "key": SECRET})
    txn.commit()
    txn = sched.start_txn()
    txn.set_value("sa/1", {"spi": 1, "key": SECRET + "-2"})  # an update: both sides recorded
    txn.commit()
    sched.resync({"sa/1": {"spi": 1, "key": SECRET + "-2"}}, kind="full")
    shown = everything_shown(sched, "sa/1") + caplog.text
    assert SECRET not in shown and REDACTED in shown and '"spi": 1' in shown
    assert sb.values["sa/1"]["key"] == SECRET + "-2"  # applied for real


def test_a_failing_redactor_hides_the_whole_value(sched: KVScheduler, sb: MockSB) -> None:
    def broken(key: str, value: Any) -> Any:
        raise RuntimeError("bug")

    sched.register_descriptor(dataclasses.replace(prefix_descriptor(sb, "sa", "sa/"),
                                                  redact=broken))
    txn = sched.start_txn()
    txn.set_value("sa/1", {"spi": 1, "key": SECRET})
    txn.commit()
    shown = everything_shown(sched, "sa/1")
    assert SECRET not in shown and REDACTED in shown

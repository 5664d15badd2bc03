"""The node's counters stay answerable: COUNTERS_GET carries them as i64."""

from __future__ import annotations

from kvstore import wire
from kvstore.config import NodeConfig
from kvstore.gen.kvstore_thrift.ttypes import Response
from kvstore.node import KvStoreNode
from kvstore.value import I64_MAX


def test_a_counter_outside_i64_is_clamped_counted_and_still_encodes() -> None:
    node = KvStoreNode(NodeConfig(name="c", cmd_url="tcp://127.0.0.1:*",
                                  pub_url="tcp://127.0.0.1:*"))
    node.counters["kvstore.ttl.transit_age_ms_max"] = 1 << 64  # what a bug could leave
    snapshot = node.counter_snapshot()
    assert snapshot["kvstore.ttl.transit_age_ms_max"] == I64_MAX
    assert node.counters["kvstore.counters_out_of_range"] == 1
    wire.encode(Response(counters=snapshot))  # OverflowError before the clamp

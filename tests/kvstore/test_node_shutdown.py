"""A reply due after the node closed its sockets (a durable ack landing during shutdown) is
counted and dropped, not an exception in the event loop (found by the chaos run, restart-all)."""

from __future__ import annotations

import asyncio

from kvstore.config import NodeConfig
from kvstore.node import KvStoreNode


def test_reply_after_close_is_counted_not_raised() -> None:
    async def scenario() -> KvStoreNode:
        node = KvStoreNode(NodeConfig(name="s", cmd_url="tcp://127.0.0.1:*",
                                      pub_url="tcp://127.0.0.1:*"))
        await node.start()
        node.close()
        node._send_reply([b"peer", b""], b"late ack")
        return node

    node = asyncio.run(scenario())
    assert node.counters["kvstore.send_failure.reply"] == 1

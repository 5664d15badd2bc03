"""Follow a key prefix of the local KvStore: the loop the agent's followers share.

`follow` owns one client and one subscription to `prefix` for the thread that calls it, and runs
`step(client, subscription)` until `stop`: after a KvStore error (the node restarting, say) it
logs one line, calls `on_error`, drops the subscription and, a second later, subscribes again
(what was published in between is the step's business: each follower re-dumps).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from kvstore import KvStoreClient, KvStoreError, Subscription

log = logging.getLogger("kvmesh.agent")
RETRY_S = 1.0


def follow(kv_url: str, prefix: str, stop: threading.Event,
           step: Callable[[KvStoreClient, Subscription], None], what: str = "",
           on_error: Callable[[], None] = lambda: None) -> None:
    client = KvStoreClient(kv_url)
    sub: Subscription | None = None
    try:
        while not stop.is_set():
            try:
                if sub is None:
                    sub = client.subscribe(prefix=prefix)
                step(client, sub)
            except KvStoreError as exc:
                on_error()
                log.warning("KvStore %s: %s (%sretrying)", kv_url, exc,
                            f"{what}: " if what else "")
                if sub is not None:
                    sub.close()
                    sub = None
                stop.wait(RETRY_S)
    finally:
        if sub is not None:
            sub.close()
        client.close()

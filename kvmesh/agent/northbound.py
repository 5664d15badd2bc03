"""The northbound follower: the node's desired state from its KvStore into the scheduler.

Thread `agent-nb` (with its own KvStore client) follows `config/<node>/` — a dump, then the
publication stream — and coalesces updates into transactions; a periodic re-dump guards against
a missed publication. REST POST /configuration (``apply_configuration``) goes through here too:
one lock serialises every northbound transaction, so a batch taken from the mesh before a REST
apply is not committed over it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from kvmesh.agent.config import AgentConfig
from kvmesh.agent.config_writer import WriteRefused, write_node_change
from kvmesh.agent.counters import AgentCounters
from kvmesh.agent.desired import Model, Refusals, SharedDesiredState
from kvmesh.agent.events import StatusEvent, ValueRefused
from kvmesh.agent.follow import follow
from kvmesh.agent.keys import config_prefix
from kvstore import KvStoreClient, KvStoreError, Subscription
from scheduler import KVScheduler, TransactionError

log = logging.getLogger("kvmesh.agent")
# Stream waits: with nothing pending (an idle agent wakes twice a second, not twenty times: its
# stop takes up to this long), and with changes held back for a device not KNOWN yet.
IDLE_WAIT_S = 0.5
HELD_WAIT_S = 0.05


class NorthboundFollower:
    """`may_apply(model_key)` holds a change back while its device is not KNOWN; `periodic`
    runs on this thread every `downstream_resync_s` (the periodic downstream resync)."""

    def __init__(self, config: AgentConfig, scheduler: KVScheduler, counters: AgentCounters,
                 post: Callable[[StatusEvent], None], may_apply: Callable[[str], bool],
                 periodic: Callable[[], None]) -> None:
        self.config = config
        self.scheduler = scheduler
        self.desired = SharedDesiredState(config.node, self._refused)
        self._counters = counters
        self._post = post
        self._may_apply = may_apply
        self._periodic = periodic
        self._txn_lock = threading.Lock()  # serialises northbound transactions
        self._initial_load_done = threading.Event()

    def run(self, stop: threading.Event) -> None:
        cfg = self.config
        next_redump = time.monotonic() + cfg.redump_s
        next_downstream = time.monotonic() + cfg.downstream_resync_s

        def step(client: KvStoreClient, sub: Subscription) -> None:
            nonlocal next_redump, next_downstream
            received = self._drain(sub, timeout=self._poll_timeout())
            now = time.monotonic()
            if self._initial_load_done.is_set() and now >= next_redump:
                next_redump = now + cfg.redump_s
                self._drain(sub, timeout=0)
                self.redump(client)
            self._apply_pending(quiet=received == 0)
            if now >= next_downstream:
                next_downstream = now + cfg.downstream_resync_s
                self._periodic()

        follow(cfg.kv_url, config_prefix(cfg.node), stop, step,
               on_error=lambda: self._counters.count("kvstore_errors"))

    def load_dump(self, client: KvStoreClient) -> int:
        """Take the node's desired state from a dump; returns how many values changed."""
        dump = client.dump(prefix=config_prefix(self.config.node))
        raw = {k: (v.value if v.value is not None else b"") for k, v in dump.items()}
        changed = self.desired.load_dump(raw)
        self._counters.count("redumps")
        self._initial_load_done.set()
        return changed

    def load_once(self) -> None:
        """The initial load when there is no device to reconcile (nothing to delete from: no
        need to wait for the store to be current)."""
        with KvStoreClient(self.config.kv_url) as client:
            self.load_dump(client)

    def redump(self, client: KvStoreClient) -> None:
        """The guard against a missed publication: reload the desired state from a dump; what
        it finds was missed (or crossed the dump), counted and logged so a lossy stream shows.

        Under the transaction lock: a REST apply (`apply_configuration`) applies its values
        first and writes them to the mesh after, so a dump taken in between would lack them
        and undo them in the kernel (then the stream brings them back: a flap)."""
        with self._txn_lock:
            missed = self.load_dump(client)
        if missed:
            self._counters.count("redump_repairs", missed)
            log.info("periodic re-dump found %d change(s) the stream had not brought", missed)

    def _poll_timeout(self) -> float:
        """How long to wait for the stream: briefly while a batch is open (it is applied as soon
        as the stream goes quiet), never past the end of the coalescing window; with nothing
        pending, until a publication comes (bounded: the loop also looks at its stop event and
        its re-dump and resync deadlines)."""
        first = self.desired.first_pending_at
        if first is None:
            return IDLE_WAIT_S
        left = first + self.config.coalesce_s - time.monotonic()
        if left <= 0:
            # The window is closed and what is still pending is held back (its device is not
            # KNOWN): new changes are applied as they come, and the held ones soon after their
            # device becomes KNOWN.
            return HELD_WAIT_S
        return min(self.config.quiet_s, left)

    def _drain(self, sub: Subscription, timeout: float) -> int:
        """Take every publication that arrives within `timeout` (and what is queued after it);
        returns how many there were."""
        count = 0
        publication = sub.recv(timeout_s=timeout)
        while publication is not None:
            count += 1
            raw = {k: v.value for k, v in (publication.key_vals or {}).items()}
            self.desired.update(raw, publication.expired_keys or ())
            publication = sub.recv(timeout_s=0)
        return count

    def _refused(self, refusals: Refusals) -> None:
        """Desired values refused before the scheduler (undecodable): to `status/<node>/`,
        in order with the scheduler's statuses (the same queue)."""
        for model_key, reason in refusals.items():
            if reason is not None:
                self._counters.count("nb_values_refused")
                log.warning("desired value %s refused: %s", model_key, reason)
            self._post(ValueRefused(model_key, reason))

    def _apply_pending(self, quiet: bool) -> None:
        """Commit pending changes once the stream went quiet, the coalescing window closed, or
        the batch is full; changes for devices that are not KNOWN stay pending."""
        cfg = self.config
        with self._txn_lock:
            if not self._initial_load_done.is_set():
                return
            batch = self.desired.take_batch(cfg.max_batch, cfg.coalesce_s, quiet,
                                            accept=self._may_apply)
            if not batch:
                return
            txn = self.scheduler.start_txn()
            for key, value in batch.items():
                txn.set_value(key, value)
            self._counters.count("nb_transactions")
            self._counters.count("nb_values_applied", len(batch))
            try:
                txn.commit(retry=cfg.retry,
                           description=f"northbound: {len(batch)} value(s) from the KvStore")
            except TransactionError as exc:
                self._counters.count("nb_transaction_errors")
                log.warning("northbound transaction: %s", exc)

    def apply_configuration(self, values: Mapping[str, Model], replace: bool,
                            who: str) -> dict[str, Any]:
        """REST POST /configuration: `values` (already validated) as one transaction with
        revert — all or nothing — then recorded in the mesh (desired state with a revision;
        statuses as usual). ``replace`` also removes desired values `values` does not name.
        `who`: the identity the request's credential proved (the revision's `who`)."""
        with self._txn_lock:
            current = self.desired.current()
            target: dict[str, Model | None] = dict(values)
            if replace:
                target.update({key: None for key in current if key not in values})
            changes = {key: value for key, value in target.items() if current.get(key) != value}
            if not changes:
                return {"ok": True, "seq": None, "revision": None, "changed": []}
            txn = self.scheduler.start_txn()
            for key, value in changes.items():
                txn.set_value(key, value)
            try:
                seq = txn.commit(revert=True, description=f"REST POST /configuration: "
                                                          f"{len(changes)} value(s)")
            except TransactionError as exc:
                self._counters.count("rest_transaction_errors")
                return {"ok": False, "error": str(exc),
                        "errors": {key: f"{op}: {err}" for key, (op, err) in exc.errors.items()}}
            self.desired.record_applied(changes)
            return self._record_in_mesh(seq, changes, current, who)

    def _record_in_mesh(self, seq: int, changes: Mapping[str, Model | None],
                        current: Mapping[str, Model], who: str) -> dict[str, Any]:
        node = self.config.node
        try:
            with KvStoreClient(self.config.kv_url) as client:
                rev = write_node_change(
                    client, node, changes, {key: current.get(key) for key in changes},
                    who=f"{who} (agent {node}, REST POST /configuration)",
                    description="REST POST /configuration")
        except (KvStoreError, WriteRefused) as exc:
            # Applied here but not in the mesh: the next re-dump brings the node back to
            # what the mesh says; the caller is told.
            return {"ok": False, "seq": seq, "error": f"applied, but not recorded in the "
                                                      f"mesh (it will be undone): {exc}"}
        self._counters.count("rest_transactions")
        return {"ok": True, "seq": seq, "revision": rev, "changed": sorted(changes)}

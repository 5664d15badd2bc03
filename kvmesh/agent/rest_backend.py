"""The agent's side of its REST API (``kvmesh.agent.http_api.ApiBackend``): reads of the
scheduler and the reconciliation framework, and the writes the agent's parts carry out."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from kvmesh.agent.counters import AgentCounters
from kvmesh.agent.desired import Model
from kvmesh.agent.northbound import NorthboundFollower
from kvmesh.agent.reconcile import Reconciliation
from kvmesh.agent.scrape import MetricsScrape
from kvmesh.agent.status import WAITS_FOR_KEYS
from kvstore import KvStoreClient, KvStoreError
from scheduler import KVScheduler, TransactionError, ValueState

T = TypeVar("T")


class RestBackend:
    def __init__(self, scheduler: KVScheduler, counters: AgentCounters,
                 northbound: NorthboundFollower, reconciliation: Reconciliation,
                 scrape: MetricsScrape) -> None:
        self.scheduler = scheduler
        self._counters = counters
        self._northbound = northbound
        self._reconciliation = reconciliation
        self._scrape = scrape
        self.node = northbound.config.node
        self._clients = threading.local()  # one KvStore client per worker thread

    def mesh(self) -> KvStoreClient:
        """This worker thread's client of the local KvStore (ZeroMQ sockets are not
        thread-safe; a client per request would pay a connection each time)."""
        client: KvStoreClient | None = getattr(self._clients, "client", None)
        if client is None:
            client = KvStoreClient(self._northbound.config.kv_url)
            self._clients.client = client
        return client

    def mesh_call(self, action: Callable[[KvStoreClient], T]) -> T:
        """`action` with this thread's client; a failed client is dropped (the next call makes
        a new one) and the error goes up."""
        try:
            return action(self.mesh())
        except KvStoreError:
            client = getattr(self._clients, "client", None)
            if client is not None:
                client.close()
            self._clients.client = None
            raise

    def revisions(self, node: str) -> list[Any]:
        from kvmesh.agent.revision_actions import revision_rows

        return self.mesh_call(lambda c: revision_rows(c, node))

    def confirm_revision(self, node: str, rev: int) -> Any:
        from kvmesh.agent.revision_actions import confirm_revision

        return self.mesh_call(lambda c: confirm_revision(c, node, rev))

    def rollback_revision(self, node: str, rev: int, who: str) -> Any:
        from kvmesh.agent.revision_actions import roll_back_revision

        return self.mesh_call(lambda c: roll_back_revision(c, node, rev, who))

    def txn_history(self, seq: int | None, since: float | None, until: float | None) -> list[Any]:
        return list(self.scheduler.transaction_history(since=since, until=until, seq=seq))

    def key_timeline(self, key: str) -> list[Any]:
        return list(self.scheduler.key_timeline(key))

    def graph_snapshot(self, time: float | None) -> Any:
        return self.scheduler.graph_snapshot(time)

    def dump(self, descriptor: str | None, key_prefix: str | None, view: str,
             state: str | None = None) -> Any:
        return self.scheduler.dump(descriptor=descriptor, key_prefix=key_prefix, view=view,
                                   state=None if state is None else ValueState[state])

    def value_status(self, key: str | None) -> Any:
        if key is not None:
            return self.scheduler.get_value_status(key)
        return self.scheduler.get_value_statuses()

    def graph_dot(self, txn: int | None = None) -> str:
        return self.scheduler.graph_dot(txn)

    def stats(self) -> Any:
        return {"scheduler": self.scheduler.stats(), "agent": self._counters.snapshot(),
                "devices": {d: s.value
                            for d, s in self._reconciliation.recon.devices().items()}}

    def downstream_resync(self, retry: bool) -> Any:
        """The resync's record and its failed values (a resync that ran with failures is not
        an error of the request)."""
        errors: dict[str, str] = {}
        try:
            seq = self.scheduler.resync(kind="downstream", retry=retry or None,
                                        description="downstream resync (REST)")
        except TransactionError as exc:
            if exc.seq is None:
                raise
            seq = exc.seq
            errors = {key: f"{op}: {err}" for key, (op, err) in exc.errors.items()}
        records = self.scheduler.transaction_history(seq=seq)
        return {"record": records[0] if records else {"seq": seq}, "errors": errors}

    def plan_values(self, values: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The operations a transaction of `values` (model key -> value, None deletes) would
        execute, in order; read-only (the scheduler simulates it on its graph)."""
        return [{"operation": op.op.value, "key": op.key, "flags": op.flags(),
                 "new_state": op.new_state.name, "details": list(op.details),
                 "absent": list(op.absent),
                 WAITS_FOR_KEYS: [list(keys) for keys in op.waits_for],
                 "error": None if op.error is None else str(op.error)}
                for op in self.scheduler.plan(dict(values))]

    def apply_configuration(self, values: Mapping[str, Model], replace: bool,
                            who: str) -> dict[str, Any]:
        return self._northbound.apply_configuration(values, replace, who)

    def recon_services(self) -> Any:
        return self._reconciliation.view()

    def assume_current(self) -> dict[str, Any]:
        return self._reconciliation.assume_current()

    def metrics_text(self) -> str:
        return self._scrape.text()

"""The agent's own counters (`GET /scheduler/stats` "agent", /metrics `kvmesh_agent_*`).

Counted from several threads (northbound, status, confirm, reconciliation, REST): each count
takes the one lock here, so no caller has to hold anything.
"""

from __future__ import annotations

import threading

NAMES = (
    "nb_transactions", "nb_transaction_errors", "nb_values_applied", "redumps",
    "downstream_resyncs", "kvstore_errors", "statuses_published", "drift_repairs",
    "nb_values_refused", "redump_repairs", "metrics_kvstore_unreachable", "confirm_rollbacks",
    "rest_transactions", "rest_transaction_errors",
)


class AgentCounters:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts = dict.fromkeys(NAMES, 0)

    def count(self, name: str, amount: int = 1) -> None:
        with self._lock:
            self._counts[name] += amount  # KeyError: a name missing from NAMES

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)

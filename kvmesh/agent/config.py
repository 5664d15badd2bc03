"""The agent's settings (`kvmesh agent run` options; see docs/agent.md)."""

from __future__ import annotations

from dataclasses import dataclass

from kvmesh.agent.liveness import HEARTBEAT_MS
from scheduler import RetryPolicy

DEFAULT_RETRY = RetryPolicy(period=1.0, max_count=10, exp_backoff=True)


@dataclass(frozen=True)
class AgentConfig:
    node: str
    kv_url: str
    linux_netns: str | None = None
    linux: bool = False
    linux_state_dir: str | None = None  # None: the plugin's default (/var/lib/kvmesh/linux)
    vpp_socket: str | None = None
    http: tuple[str, int] | None = None
    # REST API TLS and bearer token (kvmesh.agent.http_server; docs/security.md).
    http_cert: str | None = None
    http_key: str | None = None
    http_token_file: str | None = None  # None: the agent makes a token (kvmesh.agent.http_token)
    http_read_token_file: str | None = None  # a reader's token: reads only
    http_public_reads: bool = False  # reads without a token (writes always need one)
    http_max_streams: int = 32  # GET /stream clients at once (kvmesh.agent.stream_hub)
    coalesce_s: float = 0.05  # longest a change waits for others to join its transaction
    quiet_s: float = 0.002  # a batch is applied once the stream is quiet this long
    repair_delay_s: float = 0.2  # drift reported by a southbound is repaired this much later
    max_batch: int = 5000
    redump_s: float = 15.0  # the guard against a missed publication (what it found is counted)
    downstream_resync_s: float = 300.0
    # Statuses and node/ records outlive a dead agent this long, shown as stale
    # (kvmesh.agent.liveness); the agent record is refreshed every heartbeat_ms.
    status_ttl_ms: int = 86_400_000
    heartbeat_ms: int = HEARTBEAT_MS
    # The store is asked whether it is current this often while the agent waits for it.
    store_poll_s: float = 0.2
    # Treat the store as current from the start (`--assume-current`): see `store_is_current`.
    assume_current: bool = False
    reconnect_backoff_s: tuple[float, float] = (0.5, 30.0)
    # The node process that started this agent (`kvmesh node run --agent`): the agent stops
    # once it is no longer its parent (see `run_agent`). None: started by hand.
    parent_pid: int | None = None
    # Failed values are retried (exponential backoff from 1 s, 10 tries) before turning FAILED;
    # the periodic downstream resync catches whatever is left.
    retry: RetryPolicy = DEFAULT_RETRY

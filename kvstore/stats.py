"""Every counter and gauge of a KvStore node, declared once (name, kind, help).

A node keeps its numbers in `StatCounter`s keyed by name; COUNTERS_GET and `kvmesh counters`
show those names, the agent's /metrics turns them into Prometheus families, and
docs/kvstore.md's counter table is generated from this module (`python -m
kvstore.counters_doc`). Declaring them here, as Open/R declares its stats, is what makes those
three agree, and what keeps a typo from silently starting a new counter:

* a `Stat` *is* its name (a `str`), so call sites write `counters[stats.PEER_ADDS] += 1` and the
  wire keeps the names it always had;
* names built at run time (per command, per error code, per peer, ...) belong to a declared
  `StatFamily` (`stats.ERRORS(code)`), whose suffixes are checked when the family lists them;
* in strict mode (the tests: `KVSTORE_STRICT_COUNTERS=1`, inherited by the node processes they
  start) an undeclared name raises `UndeclaredStat`; otherwise it is logged once and counted in
  the gauge `kvstore.undeclared_counters`, so a node in production keeps serving.
"""

from __future__ import annotations

import enum
import logging
import os
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from kvstore import authz
from kvstore.batch_sizes import BOUNDS as BATCH_SIZE_BOUNDS
from kvstore.batch_sizes import PREFIX as BATCH_SIZE_PREFIX
from kvstore.gen.kvstore_thrift.ttypes import Command, PeerState
from kvstore.store_state import StoreState
from kvstore.value import NoMergeReason

log = logging.getLogger(__name__)

STRICT_ENV = "KVSTORE_STRICT_COUNTERS"


class Kind(enum.Enum):
    COUNTER = "counter"  # only goes up (until the node restarts)
    GAUGE = "gauge"  # a current level, a last or a largest value
    HISTOGRAM = "histogram"  # a bucket, the count or the sum of a histogram


class UndeclaredStat(KeyError):
    """A counter name that kvstore.stats does not declare (strict mode)."""


class Stat(str):
    """One declared counter: the string is its name on the wire."""

    kind: Kind
    help: str

    def __new__(cls, name: str, kind: Kind, help: str) -> Stat:
        stat = super().__new__(cls, name)
        stat.kind = kind
        stat.help = help
        return stat


@dataclass(frozen=True)
class StatFamily:
    """Names `<prefix><suffix>` made at run time; `values`: the possible suffixes, when known
    (None: any suffix, e.g. a peer's name)."""

    prefix: str
    label: str  # what the suffix is, for the docs: "CODE", "peer", ...
    kind: Kind
    help: str
    values: frozenset[str] | None = None

    def __call__(self, suffix: object) -> str:
        name = f"{self.prefix}{suffix}"
        if self.values is not None and str(suffix) not in self.values:
            _undeclared(name)
        return name

    @property
    def pattern(self) -> str:
        return f"{self.prefix}<{self.label}>"

    def covers(self, name: str) -> bool:
        if not name.startswith(self.prefix) or name == self.prefix:
            return False
        return self.values is None or name[len(self.prefix):] in self.values


STATS: dict[str, Stat] = {}
FAMILIES: list[StatFamily] = []


def _stat(name: str, kind: Kind, help: str) -> Stat:
    if name in STATS:
        raise ValueError(f"counter {name} declared twice")
    stat = STATS[name] = Stat(name, kind, help)
    return stat


def counter(name: str, help: str) -> Stat:
    return _stat(name, Kind.COUNTER, help)


def gauge(name: str, help: str) -> Stat:
    return _stat(name, Kind.GAUGE, help)


def family(prefix: str, label: str, kind: Kind, help: str,
           values: Iterable[str] | None = None) -> StatFamily:
    declared = StatFamily(prefix, label, kind, help,
                          None if values is None else frozenset(values))
    FAMILIES.append(declared)
    return declared


def lookup(name: str) -> Stat | StatFamily | None:
    """The declaration of `name` (a fixed name first, then the families), or None."""
    stat = STATS.get(name)
    if stat is not None:
        return stat
    for fam in FAMILIES:
        if fam.covers(name):
            return fam
    return None


def kind_of(name: str) -> Kind | None:
    declared = lookup(name)
    return None if declared is None else declared.kind


def help_of(name: str) -> str:
    declared = lookup(name)
    return "" if declared is None else declared.help


# ---------------------------------------------------------------------------------- strict mode

_strict: bool | None = None  # None: as the environment says (read when first needed)
_reported: set[str] = set()


def set_strict(strict: bool | None) -> None:
    """Undeclared names raise (True: tests) or are logged once (False: production); None:
    as KVSTORE_STRICT_COUNTERS says."""
    global _strict
    _strict = strict


def is_strict() -> bool:
    return _strict if _strict is not None else os.environ.get(STRICT_ENV) == "1"


def _undeclared(name: str) -> None:
    if is_strict():
        raise UndeclaredStat(f"counter {name!r} is not declared in kvstore/stats.py")
    if name not in _reported and len(_reported) < 1000:
        _reported.add(name)
        log.error("counter %r is not declared in kvstore/stats.py (a bug): reported anyway",
                  name)


def check(name: str) -> None:
    if lookup(name) is None:
        _undeclared(name)


def undeclared(names: Iterable[str]) -> list[str]:
    """The names among `names` that nothing declares (each one reported, see `check`)."""
    out = [name for name in names if lookup(name) is None]
    for name in out:
        _undeclared(name)
    return out


class StatCounter(Counter[str]):
    """The node's counters: a `Counter` that checks a name the first time it is read or
    incremented (`counters[name] += 1` reads it first), so the hot path pays nothing once a
    counter exists. Names only ever assigned are checked when COUNTERS_GET reads them all."""

    def __missing__(self, key: str) -> int:
        check(key)
        return 0


# ---------------------------------------------------------------------------------- requests

CMD = family("kvstore.cmd_", "command", Kind.COUNTER, "Requests per command (lower case).",
             (name.lower() for name in Command._NAMES_TO_VALUES))
MALFORMED_REQUESTS = counter(
    "kvstore.malformed_requests", "Requests answered with an error (bad input).")
ERRORS = family("kvstore.errors.", "CODE", Kind.COUNTER,
                "Requests answered with the error code CODE (see Errors).")
COUNTERS_OUT_OF_RANGE = counter(
    "kvstore.counters_out_of_range",
    "Counters found outside i64 when COUNTERS_GET was answered (a bug: they are reported "
    "clamped and logged, so the node stays observable). Should stay 0.")
UNDECLARED_COUNTERS = gauge(
    "kvstore.undeclared_counters",
    "Counter names in this reply that kvstore/stats.py does not declare (a bug, logged). "
    "Should stay 0.")
UPTIME_MS = gauge("kvstore.uptime_ms", "Milliseconds since the node started.")

# ---------------------------------------------------------------------------------- floods

RECEIVED_PUBLICATIONS = counter("kvstore.received_publications", "Floods from peers.")
RECEIVED_KEY_VALS = counter("kvstore.received_key_vals", "Key-values in floods from peers.")
RECEIVED_REDUNDANT_PUBLICATIONS = counter(
    "kvstore.received_redundant_publications", "Floods from peers that changed nothing.")
LOOPED_PUBLICATIONS = counter(
    "kvstore.looped_publications",
    "Floods dropped because this node was already on their path.")
UPDATED_KEY_VALS = counter("kvstore.updated_key_vals", "Key-values that changed the store.")
SENT_PUBLICATIONS = counter("kvstore.sent_publications", "Floods to peers, counted per peer.")
SENT_KEY_VALS = counter("kvstore.sent_key_vals", "Key-values flooded to peers, per peer.")
FLOOD_FORWARDED_PUBLICATIONS = counter(
    "kvstore.flood.forwarded_publications",
    "Peer publications flooded on as received (once, whatever the number of peers).")
FLOOD_REENCODED_LAYOUT = counter(
    "kvstore.flood.reencoded_layout",
    "Peer publications that qualified for forwarding as received but were re-encoded because "
    "of their byte layout.")
FLOOD_DROPPED_KEYS = counter(
    "kvstore.flood.dropped_keys", "Keys left out of a flood (see kvstore-core.md).")
FLOOD_BATCH_SIZE_BUCKET = family(
    f"{BATCH_SIZE_PREFIX}.le.", "bound", Kind.HISTOGRAM,
    "Floods of at most `bound` key-values (and more than the previous bound; not cumulative: "
    "the agent's /metrics makes the cumulative histogram kvmesh_kvstore_flood_batch_size).",
    [str(bound) for bound in BATCH_SIZE_BOUNDS] + ["inf"])
FLOOD_BATCH_SIZE_COUNT = _stat(
    f"{BATCH_SIZE_PREFIX}.count", Kind.HISTOGRAM, "Floods counted in the batch sizes.")
FLOOD_BATCH_SIZE_SUM = _stat(
    f"{BATCH_SIZE_PREFIX}.sum", Kind.HISTOGRAM, "Key-values of the floods counted.")
RATE_LIMIT_SUPPRESS = counter(
    "kvstore.rate_limit_suppress", "Floods buffered by the flood rate limit.")
RATE_LIMIT_KEYS = counter(
    "kvstore.rate_limit_keys", "Keys added to the rate limit's buffer (with repeats).")
RATE_LIMIT_BUFFERED_KEYS = gauge(
    "kvstore.rate_limit_buffered_keys", "Keys in the rate limit's buffer now.")
PUBLISHED_PUBLICATIONS = counter(
    "kvstore.published_publications", "Publication frames sent on the PUB socket.")
SUBSCRIPTIONS = gauge("kvstore.subscriptions", "Subscriptions on the PUB socket.")

# ---------------------------------------------------------------------------------- the store

LOADED = counter("kvstore.loaded", "Key-values loaded into the core without a merge.")
MERGE_RECEIVED = counter("kvstore.merge.received", "Key-values offered to a merge.")
MERGE_UPDATED = counter("kvstore.merge.updated", "Key-values a merge applied.")
NO_MERGE = family("kvstore.no_merge.", "REASON", Kind.COUNTER,
                  "Key-values a merge did not apply, by reason (see kvstore-core.md).",
                  (v for k, v in vars(NoMergeReason).items()
                   if k.isupper() and isinstance(v, str)))
EXPIRED_KEYS = counter("kvstore.expired_keys", "Keys the core expired.")
EXPIRED_KEY_VALS = counter("kvstore.expired_key_vals", "Keys expired here.")
TTL_QUEUE_COMPACTIONS = counter(
    "kvstore.ttl_queue_compactions", "Times the expiry queue was rebuilt without stale entries.")
TTL_QUEUE_SIZE = gauge("kvstore.ttl_queue_size", "Entries in the expiry queue.")
NUM_KEYS = gauge("kvstore.num_keys", "Keys in the store.")
NUM_FINITE_TTL_KEYS = gauge("kvstore.num_finite_ttl_keys", "Keys with a finite TTL.")
TTL_EXPIRED_IN_TRANSIT = counter(
    "kvstore.ttl.expired_in_transit", "Key-values that arrived already expired.")
TTL_CLOCK_AHEAD = counter(
    "kvstore.ttl.clock_ahead", "Peer timestamps too far in the future.")
TTL_TRANSIT_AGE_MS_MAX = gauge(
    "kvstore.ttl.transit_age_ms_max",
    "The largest time in transit seen (capped at the i64 maximum: an absurd stamp uses every "
    "finite TTL up).")

# ---------------------------------------------------------------------------------- peers, syncs

PEER_ADDS = counter("kvstore.peer_adds", "Peers added.")
PEER_DELS = counter("kvstore.peer_dels", "Peers removed.")
PEER_ADD_REFUSED = counter(
    "kvstore.peer_add_refused", "PEER_ADDs refused (over max_peers, or too few descriptors).")
PEER_FAILURES = counter("kvstore.peer_failures", "Peers that failed outside a full sync.")
PEER_SILENT = counter(
    "kvstore.peer_silent",
    "Peers marked down: nothing heard from them (keep-alive probes unanswered) for "
    "peer_timeout_ms.")
PEER_RETURNED = counter(
    "kvstore.peer_returned", "Peers marked down that answered again (then synced at once).")
NUM_PEERS_DOWN = gauge(
    "kvstore.num_peers_down", "Peers marked down now (silent: not synced, only probed).")
KEEPALIVE_SENT = counter("kvstore.keepalive.sent", "Keep-alive probes sent to peers.")
KEEPALIVE_REPLIES = counter(
    "kvstore.keepalive.replies", "Replies to keep-alive probes received from peers.")

PEER_PROTOCOL_REFUSED = counter(
    "kvstore.peer_protocol_refused",
    "Peerings refused for an incompatible KvStore protocol (kvstore/protocol.py): syncs this "
    "node started that the peer's protocol made it abandon, and DIGEST_GETs it refused.")
NUM_PEERS_REFUSED = gauge(
    "kvstore.num_peers_refused",
    "Peers refused now (incompatible protocol; PEER_DUMP says why): they stay IDLE.")
NUM_PEERS = gauge("kvstore.num_peers", "Peers.")
NUM_PEERS_IN = family("kvstore.num_peers.", "STATE", Kind.GAUGE, "Peers in the state STATE.",
                      PeerState._NAMES_TO_VALUES)
PENDING_FULL_SYNC = gauge("kvstore.pending_full_sync", "Peers not synced yet.")
INITIAL_SYNC_DONE = gauge("kvstore.initial_sync_done", "1 once every peer was synced once.")
FULL_SYNC_STARTED = counter("kvstore.full_sync.started", "Full syncs started by this node.")
FULL_SYNC_SUCCESS = counter("kvstore.full_sync.success", "Full syncs that succeeded.")
FULL_SYNC_FAILURES = counter("kvstore.full_sync.failures", "Full syncs that failed.")
FULL_SYNC_TIMEOUTS = counter("kvstore.full_sync.timeouts", "Full syncs that timed out.")
FULL_SYNC_SERVED = counter("kvstore.full_sync.served", "Full syncs this node answered.")

# Leaf nodes (docs/kvstore.md "Leaf nodes").
LEAF_REFUSED_KEY_VALS = counter(
    "kvstore.leaf.refused_key_vals",
    "Key-values a leaf did not store: they match none of its filters (never an error).")
LEAF_FLOOD_SKIPPED_KEY_VALS = counter(
    "kvstore.leaf.flood_skipped_key_vals",
    "Key-values not flooded to a leaf peer because they match none of its filters.")
LEAF_PEER_FILTERS_LEARNED = counter(
    "kvstore.leaf.peer_filters_learned", "Times a peer's leaf filters were learnt or changed.")
LEAF_FILTERED_DIGEST_BUILDS = counter(
    "kvstore.leaf.filtered_digest_builds",
    "Digest trees built over a leaf peer's share (kept current afterwards).")
LEAF_TRANSIT_REFUSED = counter(
    "kvstore.leaf.transit_refused",
    "Peers refused because a leaf takes exactly one (non-leaf) peer: never a transit node.")
LEAF_DROPPED_ON_LOAD = counter(
    "kvstore.leaf.dropped_on_load",
    "Stored key-values dropped at start because they no longer match the leaf's filters.")
FULL_SYNC_DURATION_MS_LAST = gauge(
    "kvstore.full_sync.duration_ms_last", "Duration of the last successful full sync.")
FULL_SYNC_DURATION_MS_SUM = counter(
    "kvstore.full_sync.duration_ms_sum", "Total duration of the successful full syncs.")
FULL_SYNC_DIFFERING_BUCKETS = counter(
    "kvstore.full_sync.differing_buckets", "Digest buckets found different by full syncs.")
FULL_SYNC_RECEIVED_KEY_VALS = counter(
    "kvstore.full_sync.received_key_vals", "Key-values received in full sync replies.")
FULL_SYNC_SENT_KEY_VALS = counter(
    "kvstore.full_sync.sent_key_vals", "Key-values sent back to peers after a full sync.")
FULL_SYNC_SENT_KEYS = counter(
    "kvstore.full_sync.sent_keys", "Key-values the core chose to send in full syncs.")
FULL_SYNC_REQUESTED_KEYS = counter(
    "kvstore.full_sync.requested_keys", "Keys the core asked for in full syncs.")
FULL_SYNC_STALE_REPLIES = counter(
    "kvstore.full_sync.stale_replies", "Full sync replies to a sync no longer running.")
FULL_SYNC_BAD_REPLIES = counter(
    "kvstore.full_sync.bad_replies", "Full sync replies that could not be used.")
FULL_SYNC_DIVERGENCE_RESYNCS = counter(
    "kvstore.full_sync.divergence_resyncs",
    "Full syncs started because a flood showed the peer diverged.")
FULL_SYNC_PARALLEL_CAP = gauge(
    "kvstore.full_sync.parallel_cap", "Full syncs allowed to run at once now.")
FULL_SYNC_RUNNING = gauge("kvstore.full_sync.running", "Full syncs running now.")
ANTI_ENTROPY_SYNCS = counter("kvstore.anti_entropy_syncs", "Periodic syncs.")
ANTI_ENTROPY_REPAIRS = counter(
    "kvstore.anti_entropy_repairs", "Periodic syncs that exchanged something.")

# ---------------------------------------------------------------------------------- sends

SEND_FAILURES = counter(
    "kvstore.send_failures", "Sends that failed (queue full, requester gone), all sockets.")
SEND_FAILURE_REPLY = counter("kvstore.send_failure.reply", "Replies that could not be sent.")
SEND_FAILURE_PUB = counter(
    "kvstore.send_failure.pub",
    "Publications not sent to a subscriber (moves with "
    "kvstore.subscribers.dropped_publications).")
SEND_FAILURE_TO = family("kvstore.send_failure.", "peer", Kind.COUNTER,
                         "Sends to the peer that failed.")

# ---------------------------------------------------------------------------------- connections


@dataclass(frozen=True)
class ConnectionStats:
    """The counters of one bound socket's connections (kvstore/node_conns.py)."""

    prefix: str
    accepted: Stat
    disconnected: Stat
    refused: Stat
    reaped: Stat
    accept_failed: Stat
    handshake_failed: Stat
    connected: Stat


def _connections(prefix: str, socket: str) -> ConnectionStats:
    return ConnectionStats(
        prefix,
        accepted=counter(f"{prefix}.accepted", f"Connections accepted on the {socket}."),
        disconnected=counter(f"{prefix}.disconnected", f"Connections closed on the {socket}."),
        refused=counter(f"{prefix}.refused",
                        f"New connections shut down at once on the {socket}: over its cap."),
        reaped=counter(f"{prefix}.reaped", f"The idlest connections of the {socket} shut down "
                                           "for a new one: over its cap."),
        accept_failed=counter(f"{prefix}.accept_failed", f"Accepts the kernel refused on the "
                                                         f"{socket} (e.g. no descriptor left)."),
        handshake_failed=counter(f"{prefix}.handshake_failed",
                                 f"Failed handshakes on the {socket}."),
        connected=gauge(f"{prefix}.connected", f"Connections open on the {socket}."),
    )


CLIENTS = _connections("kvstore.clients", "command socket")
SUBSCRIBERS = _connections("kvstore.subscribers", "publication socket")
SUBSCRIBERS_DROPPED_PUBLICATIONS = counter(
    "kvstore.subscribers.dropped_publications",
    "Times a subscriber's queue was found full (a publication dropped for it).")

# ---------------------------------------------------------------------------------- security

AUTH_KEY_RELOADS = counter("kvstore.auth.key_reloads", "Reloads of the authorized keys.")
AUTH_REFUSED = family("kvstore.auth.refused.", "reason", Kind.COUNTER,
                      "Connections and requests refused, by reason.",
                      (authz.UNKNOWN_KEY, authz.READER_WRITE, authz.PEER_ADMIN,
                       authz.FOREIGN_NODE_KEY, authz.MEMBER_WRITE, authz.REVOKED_KEY,
                       "handshake"))
AUTH_IGNORED_FLOOD_PATH = counter(
    "kvstore.auth.ignored_flood_path",
    "Flood paths ignored because they came from a key that may not set them.")
AUTH_PEER_KEY_CHANGES = counter(
    "kvstore.auth.peer_key_changes", "Peers whose server key changed.")
MEMBERS_ACTIVE = gauge(
    "kvstore.members.active", "Active member records (member/<name>) this node holds.")
MEMBERS_REMOVED = gauge(
    "kvstore.members.removed", "Removed member records this node holds (their keys refused).")
MEMBERS_INVALID = gauge(
    "kvstore.members.invalid", "member/ records this node cannot decode (ignored).")
MEMBER_READMISSION_DROPPED = counter(
    "kvstore.members.readmission_dropped",
    "member/<name> records dropped from what a peer or client sent because they would make a "
    "member this node holds as removed active again (removal is final).")
MEMBER_PEER_CHANGES = counter(
    "kvstore.members.peer_changes",
    "Peers added or removed because member records name (or stopped naming) them.")
AUTH_CONNECTIONS_SHUT = counter(
    "kvstore.auth.connections_shut",
    "Connections shut because their key is no longer accepted (removed from the "
    "authorized-keys directory, or its member record says removed).")

# ---------------------------------------------------------------------------------- storage

STORE_STATE = gauge(
    "kvstore.store_state", "How the node got its state: 0 EMPTY, 1 RESTORED, 2 SYNCED.")
STORE_STATE_IS = family("kvstore.store_state.", "STATE", Kind.GAUGE,
                        "1 in the node's store state.", (s.value for s in StoreState))
STORAGE_DURABLE = gauge("kvstore.storage.durable", "1 when the node stores to disk.")
STORAGE_HEALTHY = gauge("kvstore.storage.healthy", "1 while the disk takes the writes.")
STORAGE_LOADED_KEYS = gauge("kvstore.storage.loaded_keys", "Keys loaded from disk at start.")
STORAGE_LOAD_MS = gauge("kvstore.storage.load_ms", "Time taken to load the store at start.")
STORAGE_LOAD_REFUSED = counter(
    "kvstore.storage.load_refused", "Stored rows refused on load.")
STORAGE_REFUSED_SETS = counter(
    "kvstore.storage.refused_sets", "KEY_SETs refused while the disk refuses writes.")
STORAGE_ERRORS = counter("kvstore.storage.errors", "Disk errors.")
STORAGE_COMMITS = counter("kvstore.storage.commits", "Transactions written to disk.")
STORAGE_ROWS_WRITTEN = counter("kvstore.storage.rows_written", "Rows written to disk.")
STORAGE_ROWS_DELETED = counter("kvstore.storage.rows_deleted", "Rows deleted from disk.")
STORAGE_COMMIT_MS_LAST = gauge("kvstore.storage.commit_ms_last", "Duration of the last commit.")
STORAGE_COMMIT_MS_MAX = gauge("kvstore.storage.commit_ms_max", "Longest commit.")
STORAGE_PENDING_ROWS = gauge("kvstore.storage.pending_rows", "Rows waiting to be written.")
STORAGE_ACKS_WAITING = gauge(
    "kvstore.storage.acks_waiting", "KEY_SET replies waiting for their write to reach disk.")

# ---------------------------------------------------------------------------------- configuration
# SIGHUP re-reads the configuration file (docs/kvstore.md, "Reloading: SIGHUP").

CONFIG_RELOADS = counter(
    "kvstore.config.reloads", "SIGHUPs whose configuration file was read and applied.")
CONFIG_RELOAD_FAILURES = counter(
    "kvstore.config.reload_failures",
    "SIGHUPs that changed nothing: the file was unreadable or invalid, or a new peer was "
    "refused (the running configuration is kept).")
CONFIG_RESTART_PENDING = gauge(
    "kvstore.config.restart_pending",
    "Settings whose new value in the file needs a restart (not applied), as of the last SIGHUP.")

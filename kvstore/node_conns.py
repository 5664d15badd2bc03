"""Connection accounting for a node's bound sockets (command ROUTER, publication XPUB).

ZeroMQ accepts every TCP connection and never says how many there are, so a node flooded with
connections runs out of file descriptors, after which nobody gets an answer. Here a ZeroMQ
socket monitor reports each accepted and each closed connection; the node counts them and, once
a socket has more than its cap, ends one by shutting it down (`shutdown(2)` on the accepted
descriptor: ZeroMQ sees the connection end and closes the descriptor itself, so it is never
closed under ZeroMQ's feet). Which one:
- command socket (`reap_idlest`): the IDLEST other connection, the one whose last request is the
  oldest (the node reports each request's connection through `touch`; a connection that never
  sent one counts from its accept). The newcomer is always admitted, so 2000 idle connections
  cannot lock a client out: its request arrives right after its connection, before it can be
  the idlest. A reaped client has nothing in flight (it is the idlest); its ZeroMQ reconnects by
  itself, and its next request is served as a new connection's.
- publication socket: the NEWEST, at once (a subscriber that sent nothing yet is not idle in any
  sense the node can see, and long-lived subscribers are the ones to keep).
The caps are also kept within the open-file limit (`connection_caps`), so the node never runs
out of descriptors (ZeroMQ can then no longer accept anyone, the newcomer included).

The monitor also shows connections ZeroMQ drops on its own, in particular the one that sent a
message over the socket's MAXMSGSIZE: such a drop carries no reason, so it is counted with every
other disconnection (`<prefix>.disconnected`); see docs/kvstore.md.

Counters (prefix `kvstore.clients` for the command socket, `kvstore.subscribers` for the
publication socket): `.accepted`, `.disconnected`, `.refused` (the newest, over the cap),
`.reaped` (the idlest, over the cap), `.accept_failed` (the kernel refused an accept, e.g. no
descriptor left), `.handshake_failed`; gauge `.connected`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import resource
import socket
from collections import Counter, OrderedDict
from collections.abc import Callable

import zmq
from zmq.utils.monitor import parse_monitor_message

from kvstore import stats
from kvstore.config import NodeConfig
from kvstore.shell import ThrottledWarning

log = logging.getLogger("kvstore.node")

_EVENTS = (
    zmq.EVENT_ACCEPTED
    | zmq.EVENT_ACCEPT_FAILED
    | zmq.EVENT_DISCONNECTED
    | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
    | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
    | zmq.EVENT_HANDSHAKE_FAILED_AUTH
)
_HANDSHAKE_FAILED = (
    zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
    | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
    | zmq.EVENT_HANDSHAKE_FAILED_AUTH
)
# ZeroMQ heartbeats on the bound sockets: a PING after this much silence, and a connection that
# sends nothing (no PONG) for HEARTBEAT_TIMEOUT_MS after a PING is closed by ZeroMQ.
HEARTBEAT_IVL_MS = 10_000
HEARTBEAT_TIMEOUT_MS = 30_000


class ConnectionLimiter:
    """Counts a bound socket's connections (through a monitor) and refuses those over `cap`.

    The socket's one monitor (ZeroMQ keeps one per socket: a second would take the first one's
    events): CurveZMQ handshake failures it sees are also handed to `on_handshake_failed`
    (the event), for the security layer to count and log."""

    def __init__(
        self,
        sock: zmq.Socket[bytes],
        cap: int,
        counters: Counter[str],
        names: stats.ConnectionStats,
        knob: str,
        on_handshake_failed: Callable[[int], None] | None = None,
        *,
        reap_idlest: bool = False,
        before_reap: Callable[[], None] | None = None,
    ) -> None:
        self.cap = cap
        self.on_handshake_failed = on_handshake_failed
        self.connected = 0
        self.reap_idlest = reap_idlest
        # Reads the requests already queued, so that their connections are touched first (a
        # client that just sent one is not reaped with its request unanswered).
        self._before_reap = before_reap
        # Open connections by descriptor, the least recently active first (reap_idlest).
        self._idle_order: OrderedDict[int, None] = OrderedDict()
        # The key (ZAP User-Id) each connection authenticated with, once it sent something: a
        # key revoked later has its connections shut (`shut_keys`).
        self._key_of: dict[int, str] = {}
        self._counters = counters
        self._names = names
        self._knob = knob
        self._local_port = _bound_port(sock)
        self._warning = ThrottledWarning(log)  # a refused or reaped client reconnects
        self.monitor: zmq.Socket[bytes] = sock.get_monitor_socket(_EVENTS)
        self._socket = sock

    def fileno(self) -> int:
        return int(self.monitor.getsockopt(zmq.FD))

    def on_readable(self) -> None:
        """Drain every pending event (the monitor's descriptor is edge-triggered)."""
        monitor = self.monitor
        counters = self._counters
        names = self._names
        while True:
            try:
                frames = monitor.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            except zmq.ZMQError:
                return  # closed
            event = parse_monitor_message(frames)
            kind = int(event["event"])
            if kind == zmq.EVENT_ACCEPTED:
                self.connected += 1
                counters[names.accepted] += 1
                self._on_accepted(int(event["value"]))
            elif kind == zmq.EVENT_DISCONNECTED:
                self.connected = max(0, self.connected - 1)
                counters[names.disconnected] += 1
                self._idle_order.pop(int(event["value"]), None)
                self._key_of.pop(int(event["value"]), None)
            elif kind == zmq.EVENT_ACCEPT_FAILED:
                counters[names.accept_failed] += 1
                why = _errno_text(int(event["value"]))
                self._warning.warn(f"{names.prefix}: accept failed: {why}")
            elif kind & _HANDSHAKE_FAILED:
                counters[names.handshake_failed] += 1
                if self.on_handshake_failed is not None:
                    self.on_handshake_failed(kind)

    def touch(self, fd: int) -> None:
        """A request came in on connection `fd`: it becomes the last one to reap."""
        order = self._idle_order
        if fd in order:
            order.move_to_end(fd)

    def note_key(self, fd: int, user_id: str | None) -> None:
        """Connection `fd` authenticated with the key `user_id` (a secured node's ZAP User-Id)."""
        if user_id is not None:
            self._key_of[fd] = user_id

    def shut_keys(self, still_accepted: Callable[[str], bool]) -> int:
        """Shut every connection whose key is no longer accepted; how many."""
        gone = [fd for fd, key in self._key_of.items() if not still_accepted(key)]
        for fd in gone:
            del self._key_of[fd]
            self._idle_order.pop(fd, None)
            self._shut(fd)
        return len(gone)

    def _on_accepted(self, fd: int) -> None:
        self._key_of.pop(fd, None)  # a number reused before its DISCONNECTED event was read
        if not self.reap_idlest:
            if self.connected <= self.cap:
                return
            self._counters[self._names.refused] += 1
            self._shut(fd)
            self._warning.warn(f"{self._names.prefix}: connection refused: "
                               f"{self.connected - 1} open, the cap is {self._knob} = {self.cap}")
            return
        order = self._idle_order
        order.pop(fd, None)  # a number reused before its DISCONNECTED event was read
        order[fd] = None
        if len(order) <= self.cap:
            return
        if self._before_reap is not None:
            self._before_reap()
        # Out of the order at once, not when ZeroMQ reports the disconnection: the next
        # newcomer must reap another connection.
        idlest, _ = order.popitem(last=False)
        self._counters[self._names.reaped] += 1
        self._shut(idlest)
        self._warning.warn(f"{self._names.prefix}: the idlest connection was closed for a new one:"
                           f" the cap is {self._knob} = {self.cap}")

    def _shut(self, fd: int) -> None:
        """Shut the accepted connection down, if `fd` is still one of ours (same local port)."""
        try:
            sock = socket.socket(fileno=fd)
        except OSError:
            return  # already closed by ZeroMQ, or not a socket any more
        try:
            if self._ours(sock):
                sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        finally:
            sock.detach()  # the descriptor stays ZeroMQ's

    def _ours(self, sock: socket.socket) -> bool:
        """Guards against a descriptor number reused since the event (the connection closed
        and another socket got its number): only a connection to our bound port is shut."""
        if self._local_port is None:
            return sock.family == socket.AF_UNIX
        name = sock.getsockname()
        return isinstance(name, tuple) and name[1] == self._local_port

    def gauges(self) -> dict[str, int]:
        return {self._names.connected: self.connected}

    def close(self) -> None:
        with contextlib.suppress(zmq.ZMQError):
            self._socket.disable_monitor()
        self.monitor.close(linger=0)


def _bound_port(sock: zmq.Socket[bytes]) -> int | None:
    endpoint = sock.getsockopt_string(zmq.LAST_ENDPOINT)
    if not endpoint.startswith("tcp://"):
        return None
    try:
        return int(endpoint.rsplit(":", 1)[1])
    except ValueError:
        return None


def _errno_text(code: int) -> str:
    return f"{os.strerror(code)} (errno {code})"


# Descriptors kept free for everything that is not a client, subscriber or peer connection
# (ZeroMQ's own mailboxes and I/O threads, logs, the agent supervisor's pipes).
FD_RESERVE = 128
# ZeroMQ sockets beyond one per peer: command, publication, monitors and their inproc pairs.
SPARE_SOCKETS = 64


def raise_fd_limit() -> tuple[int, int]:
    """Raise the soft RLIMIT_NOFILE to the hard limit (logged, both); returns (soft, hard)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    before = soft
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError) as exc:
            log.warning("cannot raise the open-file limit from %d to %d: %s", soft, hard, exc)
    log.info("open-file limit: soft %s (was %s), hard %s", _limit_text(soft),
             _limit_text(before), _limit_text(hard))
    return soft, hard


def _limit_text(limit: int) -> str:
    return "unlimited" if limit == resource.RLIM_INFINITY else str(limit)


def connection_caps(config: NodeConfig, soft_limit: int) -> tuple[int, int]:
    """(max_clients, max_subscribers) as enforced: the configured caps, shrunk in proportion
    when they do not fit in the open-file limit beside FD_RESERVE and the configured peers
    (reaching a cap must never leave the node without a descriptor to accept a client)."""
    wanted = config.max_clients + config.max_subscribers
    if soft_limit == resource.RLIM_INFINITY:
        return config.max_clients, config.max_subscribers
    budget = soft_limit - FD_RESERVE - 2 * len(config.peers)
    if wanted <= budget:
        return config.max_clients, config.max_subscribers
    clients = max(1, budget * config.max_clients // wanted)
    subscribers = max(1, min(config.max_subscribers, budget - clients))
    log.warning(
        "open-file limit %d: max_clients %d and max_subscribers %d do not fit (with %d"
        " descriptors reserved and 2 per configured peer); enforcing %d and %d",
        soft_limit, config.max_clients, config.max_subscribers, FD_RESERVE, clients,
        subscribers,
    )
    return clients, subscribers


def fds_needed(config: NodeConfig) -> int:
    """Descriptors a node may use with every cap reached: one per client and subscriber
    connection, two per peer (its socket's mailbox and its connection), plus FD_RESERVE."""
    return config.max_clients + config.max_subscribers + 2 * config.max_peers + FD_RESERVE


def prepare_process_limits(config: NodeConfig) -> None:
    """At node start: open-file limit up, ZeroMQ's socket cap (1023 by default) above
    max_peers, and a warning when the caps cannot all be reached within the limit."""
    soft, _hard = raise_fd_limit()
    needed = fds_needed(config)
    if soft != resource.RLIM_INFINITY and needed > soft:
        log.warning(
            "open-file limit %d is below what the caps allow (%d: max_clients %d,"
            " max_subscribers %d, max_peers %d x 2, reserve %d): lower them or raise the limit",
            soft, needed, config.max_clients, config.max_subscribers, config.max_peers,
            FD_RESERVE,
        )
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()
    wanted = max(context.get(zmq.MAX_SOCKETS), config.max_peers + SPARE_SOCKETS)
    context.set(zmq.MAX_SOCKETS, wanted)
    log.info("up to %d ZeroMQ sockets", context.get(zmq.MAX_SOCKETS))


def open_fds() -> int:
    """Descriptors this process has open now (Linux /proc)."""
    return len(os.listdir("/proc/self/fd"))


def fd_limit() -> int:
    return int(resource.getrlimit(resource.RLIMIT_NOFILE)[0])

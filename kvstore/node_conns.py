"""Connection accounting for a node's bound sockets (command ROUTER, publication XPUB).

ZeroMQ accepts every TCP connection and never says how many there are, so a node flooded with
connections runs out of file descriptors, after which nobody gets an answer. Here a ZeroMQ
socket monitor reports each accepted and each closed connection; the node counts them and
refuses a connection beyond the socket's cap by shutting it down (`shutdown(2)` on the accepted
descriptor: ZeroMQ sees the connection end and closes the descriptor itself, so it is never
closed under ZeroMQ's feet). The refused peer's ZeroMQ reconnects later, by itself.

The monitor also shows connections ZeroMQ drops on its own, in particular the one that sent a
message over the socket's MAXMSGSIZE: such a drop carries no reason, so it is counted with every
other disconnection (`<prefix>.disconnected`); see docs/kvstore.md.

Counters (prefix `kvstore.clients` for the command socket, `kvstore.subscribers` for the
publication socket): `.accepted`, `.disconnected`, `.refused` (over the cap), `.accept_failed`
(the kernel refused an accept, e.g. no descriptor left), `.handshake_failed`; gauge `.connected`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import resource
import socket
import time
from collections import Counter
from collections.abc import Callable

import zmq
from zmq.utils.monitor import parse_monitor_message

from kvstore.config import NodeConfig

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
# At most one log line per this many seconds for a repeated refusal (a refused peer reconnects).
_LOG_INTERVAL_S = 5.0


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
        prefix: str,
        knob: str,
        on_handshake_failed: Callable[[int], None] | None = None,
    ) -> None:
        self.cap = cap
        self.on_handshake_failed = on_handshake_failed
        self.connected = 0
        self._counters = counters
        self._prefix = prefix
        self._knob = knob
        self._local_port = _bound_port(sock)
        self._last_log = -_LOG_INTERVAL_S
        self._unlogged = 0
        self.monitor: zmq.Socket[bytes] = sock.get_monitor_socket(_EVENTS)
        self._socket = sock

    def fileno(self) -> int:
        return int(self.monitor.getsockopt(zmq.FD))

    def on_readable(self) -> None:
        """Drain every pending event (the monitor's descriptor is edge-triggered)."""
        monitor = self.monitor
        counters = self._counters
        prefix = self._prefix
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
                counters[f"{prefix}.accepted"] += 1
                if self.connected > self.cap:
                    self._refuse(int(event["value"]))
            elif kind == zmq.EVENT_DISCONNECTED:
                self.connected = max(0, self.connected - 1)
                counters[f"{prefix}.disconnected"] += 1
            elif kind == zmq.EVENT_ACCEPT_FAILED:
                counters[f"{prefix}.accept_failed"] += 1
                self._log(f"{prefix}: accept failed: {_errno_text(int(event['value']))}")
            elif kind & _HANDSHAKE_FAILED:
                counters[f"{prefix}.handshake_failed"] += 1
                if self.on_handshake_failed is not None:
                    self.on_handshake_failed(kind)

    def _refuse(self, fd: int) -> None:
        """Shut the accepted connection down, if `fd` is still one of ours (same local port)."""
        self._counters[f"{self._prefix}.refused"] += 1
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
        self._log(
            f"{self._prefix}: connection refused: {self.connected - 1} open, the cap is"
            f" {self._knob} = {self.cap}"
        )

    def _ours(self, sock: socket.socket) -> bool:
        """Guards against a descriptor number reused since the event (the connection closed
        and another socket got its number): only a connection to our bound port is shut."""
        if self._local_port is None:
            return sock.family == socket.AF_UNIX
        name = sock.getsockname()
        return isinstance(name, tuple) and name[1] == self._local_port

    def _log(self, message: str) -> None:
        now = time.monotonic()
        if now - self._last_log < _LOG_INTERVAL_S:
            self._unlogged += 1
            return
        more = f" (and {self._unlogged} more since the last report)" if self._unlogged else ""
        log.warning("%s%s", message, more)
        self._last_log = now
        self._unlogged = 0

    def gauges(self) -> dict[str, int]:
        return {f"{self._prefix}.connected": self.connected}

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
    """Raise the soft RLIMIT_NOFILE to the hard limit; returns (soft, hard) after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError) as exc:
            log.warning("cannot raise the open-file limit from %d to %d: %s", soft, hard, exc)
    return soft, hard


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
    log.info("open-file limit %d; up to %d ZeroMQ sockets", soft, context.get(zmq.MAX_SOCKETS))


def open_fds() -> int:
    """Descriptors this process has open now (Linux /proc)."""
    return len(os.listdir("/proc/self/fd"))


def fd_limit() -> int:
    return int(resource.getrlimit(resource.RLIMIT_NOFILE)[0])

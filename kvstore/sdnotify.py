"""systemd's service notification protocol (sd_notify), without libsystemd.

A `Type=notify` unit (packaging/systemd/kvmesh@.service) hears from the node over a datagram
socket whose path systemd puts in ``$NOTIFY_SOCKET`` (a leading ``@`` names a Linux abstract
socket). The node sends:

- ``READY=1`` once it answers and, with ``--agent``, its agent has started (so ``systemctl
  start`` returns when the node is usable, and units ordered after it may rely on it);
- ``WATCHDOG=1`` every half ``$WATCHDOG_USEC``, from the node's event loop: a loop that stops
  turning (a blocking call, a deadlock) stops the keep-alives and systemd restarts the node;
- ``STOPPING=1`` when told to stop (SIGTERM, SIGINT), before the agent and the store close.

Outside systemd (no ``$NOTIFY_SOCKET``) every call is a no-op. A send that fails is logged once
and otherwise ignored: supervision must never stop the node it supervises.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
from collections.abc import Callable, Mapping

log = logging.getLogger("kvstore.sdnotify")

NOTIFY_SOCKET_ENV = "NOTIFY_SOCKET"
WATCHDOG_USEC_ENV = "WATCHDOG_USEC"
WATCHDOG_PID_ENV = "WATCHDOG_PID"
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def socket_address(value: str) -> str | bytes | None:
    """The address `$NOTIFY_SOCKET` names: a filesystem path, or an abstract name (``@name`` ->
    ``\\0name``); None for anything else (unset, empty, a relative path)."""
    if value.startswith("@") and len(value) > 1:
        return b"\0" + value[1:].encode()
    if value.startswith("/"):
        return value
    return None


def watchdog_interval_s(env: Mapping[str, str], pid: int) -> float | None:
    """How often to send WATCHDOG=1 (half the timeout systemd set, as sd_watchdog_enabled
    advises), or None when no watchdog is asked of this process."""
    usec = env.get(WATCHDOG_USEC_ENV, "")
    if not usec.isdigit() or int(usec) == 0:
        return None
    owner = env.get(WATCHDOG_PID_ENV, "")
    if owner and (not owner.isdigit() or int(owner) != pid):
        return None  # meant for another process (the one systemd started, not its child)
    return int(usec) / 2e6


class ServiceNotifier:
    """The node's side of sd_notify. `from_env()` reads the environment once."""

    def __init__(self, address: str | bytes | None, watchdog_s: float | None) -> None:
        self.address = address
        self.watchdog_s = watchdog_s if address is not None else None
        self._failed = False
        self._stopping = False

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ServiceNotifier:
        env = os.environ if env is None else env
        return cls(socket_address(env.get(NOTIFY_SOCKET_ENV, "")),
                   watchdog_interval_s(env, os.getpid()))

    @property
    def enabled(self) -> bool:
        return self.address is not None

    def send(self, message: str) -> bool:
        """One notification datagram; True when it was sent."""
        if self.address is None:
            return False
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
                sock.sendto(message.encode(), self.address)
            return True
        except OSError as exc:
            if not self._failed:
                log.warning("sd_notify to %s failed: %s (further failures not logged)",
                            os.environ.get(NOTIFY_SOCKET_ENV, "?"), exc)
                self._failed = True
            return False

    def ready(self) -> None:
        self.send("READY=1\nSTATUS=serving")

    def serving(self, stop: Callable[[], None], ready: bool = False) -> None:
        """Called on the node's running event loop once it is bound: keep-alives start, and a
        stop signal sends STOPPING=1 before `stop()` (replacing the node's own handler, which
        is `stop` alone). `ready`: nothing else to wait for, send READY=1 now."""
        if self.address is None:
            return
        if ready:
            self.ready()
        loop = asyncio.get_running_loop()

        def stopping() -> None:
            if not self._stopping:
                self._stopping = True
                self.send("STOPPING=1\nSTATUS=stopping")
            stop()

        for sig in STOP_SIGNALS:
            loop.add_signal_handler(sig, stopping)
        if self.watchdog_s is not None:
            self._keep_alive(loop, self.watchdog_s)

    def _keep_alive(self, loop: asyncio.AbstractEventLoop, interval_s: float) -> None:
        # A callback of the loop itself: it runs only while the loop turns, which is the point.
        if self._stopping:
            return
        self.send("WATCHDOG=1")
        loop.call_later(interval_s, self._keep_alive, loop, interval_s)

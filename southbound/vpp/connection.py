"""One connection to VPP's binary API through the unmodified `vpp_papi` client.

- A supervisor thread connects, subscribes to interface events, then waits for the connection to
  end (VPP went away, or a call failed at the transport level) and reconnects with exponential
  backoff. Each successful connection runs the `on_connect` callbacks, each loss the
  `on_disconnect` callbacks (in the supervisor thread), so the owner can resync after a restart.
- Calls are serialised (vpp_papi's synchronous client is not thread-safe). `call` checks `retval`
  (vpp_papi does not) and raises `VppApiError`; transport failures and timeouts raise the
  retriable `VppConnectionError` and drop the connection, because a late reply would otherwise be
  taken for the answer to a later request.
- Events (`*_event` messages) are handed to the `on_event` callbacks by a dispatcher thread, never
  in vpp_papi's reader thread.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import socket
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

from vpp_papi import VPPApiClient

from southbound.vpp.errors import (
    EAGAIN,
    VppApiError,
    VppConnectionError,
    VppError,
    VppUnsupportedError,
)

log = logging.getLogger("southbound.vpp.connection")


class _NoCallTrace(logging.Filter):
    """vpp_papi logs every request with its arguments and every reply at DEBUG: IPsec keys
    among them. Its other messages (connection trouble) pass."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(("Calling ", "Return value"))


# vpp_papi's logger for our clients: its call trace is never written, whatever the level.
PAPI_LOG = logging.getLogger("southbound.vpp.papi")
PAPI_LOG.addFilter(_NoCallTrace())

Callback = Callable[[], None]
EventCallback = Callable[[str, Any], None]


class VppConnection:
    def __init__(
        self,
        socket_path: str,
        *,
        client_name: str = "kvmesh",
        read_timeout: float = 5.0,
        backoff_initial: float = 0.05,
        backoff_max: float = 2.0,
        apidir: str | None = None,
    ) -> None:
        self.socket_path = socket_path
        self.client_name = client_name
        self.read_timeout = read_timeout
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self.apidir = apidir
        # Counted by callers, the supervisor and vpp_papi's reader thread: under their own lock.
        self._counters: Counter[str] = Counter()
        self._counters_lock = threading.Lock()
        self.generation = 0  # number of successful connections so far
        self._lock = threading.Lock()  # serialises API calls
        self._client: Any = None
        self._connected = threading.Event()
        self._stop = threading.Event()
        self._on_connect: list[Callback] = []
        self._on_disconnect: list[Callback] = []
        self._on_event: list[EventCallback] = []
        self._events: queue.Queue[tuple[str, Any] | None] = queue.Queue()
        self._supervisor = threading.Thread(
            target=self._supervise, name="vpp-connection", daemon=True
        )
        self._dispatcher = threading.Thread(target=self._dispatch, name="vpp-events", daemon=True)
        self._started = False
        self._hold_off = 0.0  # seconds to wait before the next reconnect (set by drop())

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        if not self._started:
            self._started = True
            self._dispatcher.start()
            self._supervisor.start()

    @property
    def connected(self) -> bool:
        return self._connected.is_set()

    def wait_connected(self, timeout: float | None = None) -> bool:
        return self._connected.wait(timeout)

    def close(self) -> None:
        """Disconnect and stop reconnecting (idempotent)."""
        self._stop.set()
        with self._lock:
            client, self._client = self._client, None
        self._connected.clear()
        if client is not None:
            self._disconnect(client)
        if self._started:
            self._supervisor.join(timeout=30)
            self._events.put(None)
            self._dispatcher.join(timeout=30)

    def drop(self, hold_off: float = 0.0) -> None:
        """Drop the current connection on purpose (e.g. its reconciliation failed) and
        reconnect after `hold_off` seconds; the disconnect/connect hooks run as usual."""
        self._hold_off = max(0.0, hold_off)
        with self._lock:
            client = self._client
        if client is not None:
            self._count("drops")
            self._abort(client)

    @property
    def counters(self) -> Counter[str]:
        """A copy of the counters, taken at one instant."""
        with self._counters_lock:
            return self._counters.copy()

    def _count(self, name: str) -> None:
        with self._counters_lock:
            self._counters[name] += 1

    def on_connect(self, callback: Callback) -> None:
        """Called after every (re)connection, in the supervisor thread."""
        self._on_connect.append(callback)

    def on_disconnect(self, callback: Callback) -> None:
        """Called when the connection is lost (not on `close`), in the supervisor thread."""
        self._on_disconnect.append(callback)

    def on_event(self, callback: EventCallback) -> None:
        """Called with (message name, message) for every event VPP sends."""
        self._on_event.append(callback)

    # ------------------------------------------------------------------ calls
    def call(self, name: str, **kwargs: Any) -> Any:
        """Send a request, return its reply; a non-zero retval raises VppApiError."""
        reply = self._invoke(name, kwargs)
        retval = getattr(reply, "retval", 0)
        if retval != 0:
            self._count("retval_errors")
            raise VppApiError(name, retval)
        return reply

    def dump(self, name: str, **kwargs: Any) -> list[Any]:
        """Run a dump, return its details."""
        return list(self._invoke(name, kwargs))

    def get_all(self, name: str, **kwargs: Any) -> list[Any]:
        """Run a cursor get (a `stream_msg` service such as `lcp_itf_pair_get_v2`) to its end:
        VPP answers EAGAIN with the cursor to go on from when it stopped half-way."""
        cursor, details = 0, []
        while True:
            reply, batch = self._invoke(name, {**kwargs, "cursor": cursor})
            details.extend(batch)
            if reply.retval == EAGAIN and reply.cursor != 0xFFFFFFFF:
                cursor = reply.cursor
                continue
            if reply.retval != 0:
                self._count("retval_errors")
                raise VppApiError(name, reply.retval)
            return details

    def _invoke(self, name: str, kwargs: dict[str, Any]) -> Any:
        with self._lock:
            client = self._client
            if client is None or not self._connected.is_set():
                raise VppConnectionError(f"{name}: not connected to VPP at {self.socket_path}")
            try:
                function = getattr(client.api, name)
            except AttributeError:
                raise VppUnsupportedError(
                    f"{name}: VPP at {self.socket_path} does not offer this message "
                    "(missing plugin, or a different CRC)"
                ) from None
            self._count("calls")
            try:
                return function(**kwargs)
            except OSError as exc:  # VPPIOError, transport errors, timeouts
                self._count("transport_errors")
                self._connected.clear()
                self._client = None
                self._abort(client)
                raise VppConnectionError(f"{name}: connection to VPP lost: {exc}") from exc
            except (ValueError, TypeError) as exc:  # the serializer refused the arguments
                raise VppError(f"{name}: cannot encode the request: {exc}") from exc

    # ------------------------------------------------------------------ supervisor
    def _supervise(self) -> None:
        delay = self.backoff_initial
        while not self._stop.is_set():
            try:
                client = self._open()
            except Exception as exc:
                self._count("connect_failures")
                log.debug("connecting to VPP at %s failed: %s", self.socket_path, exc)
                if self._stop.wait(delay):
                    break
                delay = min(delay * 2, self.backoff_max)
                continue
            delay = self.backoff_initial
            with self._lock:
                if self._stop.is_set():
                    self._disconnect(client)
                    break
                self._client = client
                self.generation += 1
                self._connected.set()
            self._count("connects")
            log.info("connected to VPP at %s", self.socket_path)
            self._fire(self._on_connect)
            # The reader thread ends when the socket closes: VPP went away or we dropped it.
            client.transport.message_thread.join()
            self._connected.clear()
            with self._lock:
                if self._client is client:
                    self._client = None
            self._disconnect(client)
            if self._stop.is_set():
                break
            self._count("disconnects")
            log.warning("connection to VPP at %s lost; reconnecting", self.socket_path)
            self._fire(self._on_disconnect)
            hold_off, self._hold_off = self._hold_off, 0.0
            if hold_off and self._stop.wait(hold_off):
                break

    def _open(self) -> Any:
        if self.apidir is None:
            client = VPPApiClient(
                bootstrapapi=True, server_address=self.socket_path, read_timeout=self.read_timeout,
                logger=PAPI_LOG,
            )
        else:
            client = VPPApiClient(
                apidir=self.apidir, server_address=self.socket_path, read_timeout=self.read_timeout,
                logger=PAPI_LOG,
            )
        try:
            client.connect(self.client_name)
            client.register_event_callback(self._on_vpp_message)
            reply = client.api.want_interface_events(enable_disable=1, pid=os.getpid())
            if reply.retval != 0:
                raise VppApiError("want_interface_events", reply.retval)
        except BaseException:
            self._abort(client)
            with contextlib.suppress(Exception):
                client.disconnect()
            raise
        return client

    @staticmethod
    def _abort(client: Any) -> None:
        """Wake the reader thread up by shutting the socket down (it then ends)."""
        sock = getattr(client.transport, "socket", None)
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    @staticmethod
    def _disconnect(client: Any) -> None:
        if getattr(client, "_kvmesh_closed", False):
            return
        client._kvmesh_closed = True
        with contextlib.suppress(Exception):
            client.disconnect()

    def _fire(self, callbacks: list[Callback]) -> None:
        for callback in list(callbacks):
            try:
                callback()
            except Exception:
                log.exception("VPP connection callback %r failed", callback)

    # ------------------------------------------------------------------ events
    def _on_vpp_message(self, name: str, msg: Any) -> None:
        # Runs in vpp_papi's reader thread: hand over, never block here.
        if name.endswith("_event"):
            self._count("events")
            self._events.put((name, msg))
        else:
            self._count("stray_replies")  # a reply that arrived after its call timed out

    def _dispatch(self) -> None:
        while True:
            item = self._events.get()
            if item is None:
                return
            for callback in list(self._on_event):
                try:
                    callback(*item)
                except Exception:
                    log.exception("VPP event callback %r failed", callback)

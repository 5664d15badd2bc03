"""Host-interface watcher: reports the links kvmesh does not own, from netlink events, in a thread.

For every link of the namespace that kvmesh does not own (see ``context.Ownership``) the watcher
calls ``notify("linux/interface/host/<name>", value)`` when it appears or changes, and
``notify(key, None)`` when it disappears or is renamed. Values are built by
``observe.host_value``, exactly like the host descriptor's Retrieve.

How it works: one netlink socket subscribed to link and address events, then a dump of links
and addresses on that same socket; events that arrive during the dump are applied on top of it,
so nothing is missed between "dump" and "subscribe". If the kernel drops events (ENOBUFS: the
socket buffer overflowed), the watcher opens a fresh socket and dumps again.

The kernel announces a change of link group only for a link that is up: a link that becomes
kvmesh-owned while down is retracted at its next event (or never published, when kvmesh claimed
its name while creating it).

Events for kvmesh's own links are recognised from a few header bytes (ifindex, group, name) and
skipped without a full decode: creating thousands of links through the scheduler must not be
slowed down by a watcher decoding their events.

``notify`` runs on the watcher thread; the scheduler queues the notification, so the watcher
never waits for a transaction and the scheduler never waits for the watcher.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import select
import socket as socket_flags
import threading
from collections.abc import Callable
from typing import Any

from southbound.linux import keys
from southbound.linux.context import Ownership
from southbound.linux.netlink import open_raw_socket
from southbound.linux.observe import host_value
from southbound.linux.records import Link
from southbound.linux.rtnl import (
    NLM_F_DUMP,
    NLM_F_REQUEST,
    NLMSG_DONE,
    NLMSG_ERROR,
    NLMSGHDR,
    RTM_DELADDR,
    RTM_DELLINK,
    RTM_GETADDR,
    RTM_GETLINK,
    RTM_NEWADDR,
    RTM_NEWLINK,
    address_index,
    link_identity,
    messages,
    parse_address,
    parse_link,
)

log = logging.getLogger(__name__)

Notify = Callable[[str, "dict[str, Any] | None"], None]

RTMGRP_LINK, RTMGRP_IPV4_IFADDR, RTMGRP_IPV6_IFADDR = 0x1, 0x10, 0x100
GROUPS = RTMGRP_LINK | RTMGRP_IPV4_IFADDR | RTMGRP_IPV6_IFADDR
RECEIVE_BUFFER = 1 << 18
COALESCE_SECONDS = 0.02
RESTART_SECONDS = 1.0
SOCKET_BUFFER = 16 << 20
_DUMP_PAYLOAD = {RTM_GETLINK: bytes(16), RTM_GETADDR: bytes(8)}  # ifinfomsg / ifaddrmsg


class _Snapshot:
    """Links (None = owned by kvmesh) and addresses by ifindex."""

    def __init__(self) -> None:
        self.links: dict[int, Link | None] = {}
        self.addresses: dict[int, set[str]] = {}


class HostInterfaceWatcher:
    """Watches one namespace for links kvmesh does not own; see the module doc."""

    def __init__(self, netns: str | None, ownership: Ownership, notify: Notify) -> None:
        self.netns = netns
        self.ownership = ownership
        self.notify = notify
        self.events = 0
        self.notifications = 0
        self.notify_errors = 0
        self.resyncs = 0
        self.failures = 0
        self._state = _Snapshot()
        self._fresh: _Snapshot | None = None  # being filled by a dump
        self._dump_kind = 0  # RTM_GETLINK / RTM_GETADDR while dumping, else 0
        self._dump_seq = 0
        self._published: dict[int, str] = {}
        self._values: dict[str, dict[str, Any]] = {}
        self._dirty: set[int] = set()
        self._ready = threading.Event()
        self._failure: BaseException | None = None
        self._wake_read, self._wake_write = os.pipe()
        self._stopping = False
        self._socket: Any = None
        self._thread = threading.Thread(target=self._run, name=f"kvmesh-linux-watcher-{netns}",
                                        daemon=True)

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self, timeout: float = 30.0) -> None:
        """Open the socket, start the thread and wait until the first dump has been reported."""
        try:
            self._socket = self._open_socket()
        except BaseException:
            self.close()
            raise
        self._thread.start()
        if not self._ready.wait(timeout):
            self.close()
            raise TimeoutError(f"host-interface watcher for {self.netns!r}: no initial dump "
                               f"within {timeout}s")
        if self._failure is not None:
            self.close()
            raise RuntimeError("host-interface watcher failed to start") from self._failure

    def close(self) -> None:
        """Stop the thread (within a second) and release the socket. Idempotent."""
        if self._stopping:
            return
        self._stopping = True
        with contextlib.suppress(OSError):
            os.write(self._wake_write, b"x")
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=10)
        self._close_socket()
        for fd in (self._wake_read, self._wake_write):
            with contextlib.suppress(OSError):
                os.close(fd)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def host_links(self) -> dict[str, dict[str, Any]]:
        """The host links reported so far (a copy; for diagnostics and tests)."""
        return {name: dict(value) for name, value in self._values.items()}

    # -- socket -------------------------------------------------------------------------------

    def _open_socket(self) -> Any:
        return open_raw_socket(self.netns, GROUPS, SOCKET_BUFFER)

    def _close_socket(self) -> None:
        if self._socket is not None:
            try:
                self._socket.close()
            except Exception:  # closing a broken socket must not hide the original problem
                log.debug("closing watcher socket failed", exc_info=True)
            self._socket = None

    def _start_dump(self, kind: int) -> None:
        self._dump_seq += 1
        self._dump_kind = kind
        payload = _DUMP_PAYLOAD[kind]
        self._socket.socket.send(NLMSGHDR.pack(NLMSGHDR.size + len(payload), kind,
                                               NLM_F_REQUEST | NLM_F_DUMP, self._dump_seq, 0)
                                 + payload)

    def _resync(self) -> None:
        self.resyncs += 1
        self._fresh = _Snapshot()
        self._start_dump(RTM_GETLINK)

    # -- thread -------------------------------------------------------------------------------

    def _run(self) -> None:
        buffer = bytearray(RECEIVE_BUFFER)
        view = memoryview(buffer)
        try:
            while not self._stopping:
                try:
                    if self._socket is None:
                        self._socket = self._open_socket()
                    self._resync()
                    self._watch(buffer, view)
                except Exception as exc:
                    if self._stopping:
                        return
                    if not self._ready.is_set():
                        self._failure = exc  # start() reports it
                        return
                    # Keep watching: a new socket and a full dump put the state right again.
                    self.failures += 1
                    log.exception("watcher %r failed; restarting in %ss", self.netns,
                                  RESTART_SECONDS)
                    self._close_socket()
                    if select.select([self._wake_read], [], [], RESTART_SECONDS)[0]:
                        return
        finally:
            self._ready.set()

    def _watch(self, buffer: bytearray, view: memoryview) -> None:
        while not self._stopping:
            readable, _, _ = select.select([self._socket.fileno(), self._wake_read], [], [])
            if self._wake_read in readable or self._stopping:
                return
            # Let a burst of events (kvmesh creating thousands of links) accumulate, then
            # handle it in one go: far fewer wake-ups competing with the scheduler's thread.
            # Notifications are delayed by at most this much.
            if select.select([self._wake_read], [], [], COALESCE_SECONDS)[0]:
                return
            self._drain(buffer, view)
            self._publish()

    def _drain(self, buffer: bytearray, view: memoryview) -> None:
        """Handle every datagram already queued (one wake-up per burst, not per event)."""
        sock = self._socket.socket
        while True:
            try:
                size = sock.recv_into(buffer, 0, socket_flags.MSG_DONTWAIT)
            except BlockingIOError:
                return
            except OSError as exc:
                if exc.errno != errno.ENOBUFS:
                    raise
                log.warning("watcher %r: netlink events were dropped; dumping again", self.netns)
                self._close_socket()
                self._socket = self._open_socket()
                self._resync()
                return
            self._handle_datagram(view[:size])

    def _handle_datagram(self, data: memoryview) -> None:
        for kind, _flags, seq, offset, length in messages(data):
            from_dump = seq != 0 and seq == self._dump_seq and self._dump_kind != 0
            if kind in (RTM_NEWLINK, RTM_DELLINK):
                self.events += 1
                self._on_link(kind, data, offset, length, from_dump)
            elif kind in (RTM_NEWADDR, RTM_DELADDR):
                self.events += 1
                self._on_address(kind, data, offset, length, from_dump)
            elif kind in (NLMSG_DONE, NLMSG_ERROR) and from_dump:
                self._dump_finished()

    def _on_link(self, kind: int, data: memoryview, offset: int, length: int,
                 from_dump: bool) -> None:
        index, group, name = link_identity(data, offset, length)
        record: Link | None = None
        if kind == RTM_NEWLINK and group != self.ownership.link_group and not (
            self.ownership.is_claimed(name)
        ):
            record = parse_link(data, offset, length)
        targets = [self._fresh] if from_dump else [self._state]
        if not from_dump and self._fresh is not None:
            targets.append(self._fresh)
        for snapshot in targets:
            if snapshot is None:
                continue
            if kind == RTM_DELLINK:
                snapshot.links.pop(index, None)
                snapshot.addresses.pop(index, None)
            else:
                snapshot.links[index] = record
        self._dirty.add(index)

    def _on_address(self, kind: int, data: memoryview, offset: int, length: int,
                    from_dump: bool) -> None:
        index = address_index(data, offset)
        current = self._state.links.get(index, 0)
        if current is None and not from_dump:
            return  # an address of a kvmesh link: not reported
        address = parse_address(data, offset, length)
        if address is None:
            return
        targets = [self._fresh] if from_dump else [self._state]
        if not from_dump and self._fresh is not None:
            targets.append(self._fresh)
        for snapshot in targets:
            if snapshot is None:
                continue
            if kind == RTM_NEWADDR:
                snapshot.addresses.setdefault(index, set()).add(address.cidr)
            else:
                snapshot.addresses.get(index, set()).discard(address.cidr)
        self._dirty.add(index)

    def _dump_finished(self) -> None:
        fresh = self._fresh
        assert fresh is not None
        if self._dump_kind == RTM_GETLINK:
            self._state.links = dict(fresh.links)
            self._start_dump(RTM_GETADDR)
            return
        # Link events kept both snapshots equal since the link dump ended: only addresses change.
        self._state.addresses = fresh.addresses
        self._fresh = None
        self._dump_kind = 0
        self._dirty.update(self._published)
        self._dirty.update(self._state.links)
        self._publish()
        self._ready.set()

    # -- publication --------------------------------------------------------------------------

    def _publish(self) -> None:
        if self._fresh is not None or not self._dirty:
            return  # wait for the dump to complete: partial state must not retract anything
        dirty, self._dirty = self._dirty, set()
        wanted: dict[int, tuple[str, dict[str, Any]]] = {}
        for index in dirty:
            record = self._state.links.get(index)
            if record is not None and not self.ownership.is_claimed(record.name):
                addresses = self._state.addresses.get(index, set())
                wanted[index] = (record.name, host_value(record, addresses))
        # Retractions first, so a name that moved to another ifindex ends up published.
        for index in sorted(dirty):
            old_name = self._published.get(index)
            new_name = wanted[index][0] if index in wanted else None
            if old_name is not None and old_name != new_name:
                del self._published[index]
                if self._values.pop(old_name, None) is not None:
                    self._send(keys.host_key(old_name), None)
        for index in sorted(wanted):
            name, value = wanted[index]
            self._published[index] = name
            if self._values.get(name) != value:
                self._values[name] = value
                self._send(keys.host_key(name), value)

    def _send(self, key: str, value: dict[str, Any] | None) -> None:
        self.notifications += 1
        try:
            self.notify(key, value)
        except Exception:  # a failing consumer must not kill the watcher
            self.notify_errors += 1
            log.exception("watcher %r: notification of %s failed", self.netns, key)

"""Reading and writing the sysctls of one network namespace (``/proc/sys/net/...``).

The networking sysctls are per namespace, and which namespace's a process sees under
``/proc/sys/net`` is decided by the *opening thread's* namespace (the kernel looks up the sysctl
table of ``current``'s netns when the file is opened). So for a named namespace each batch of
reads or writes runs in a short-lived helper thread that first enters the namespace with
``setns(2)`` — only that thread moves, the agent stays where it is — and the caller waits for
it. ``netns=None`` means the caller's own namespace (the agent runs inside its node's namespace):
no thread. Cheaper than ``ip netns exec NS sysctl`` (a process per call) by two orders of
magnitude. ``tests/southbound/linux/test_sysctl.py`` checks that a thread sees its namespace.
"""

from __future__ import annotations

import ctypes
import errno
import os
import threading
from collections.abc import Callable, Iterable
from typing import TypeVar

from southbound.linux.errors import NamespaceNotFoundError, NetlinkOperationError
from southbound.linux.netns import NETNS_DIR

PROC_SYS = "/proc/sys"
CLONE_NEWNET = 0x40000000
T = TypeVar("T")


def sysctl_path(name: str, root: str = PROC_SYS) -> str:
    """``net.ipv4.conf.eth0.rp_filter`` -> ``/proc/sys/net/ipv4/conf/eth0/rp_filter``.

    Only the dots that separate the fixed components are path separators: a device name may
    itself contain dots (``eth0.100``), so callers give names whose device part they parsed."""
    return os.path.join(root, *name.split("."))


class ProcSys:
    """Sysctl files of namespace ``netns`` (None: the caller's own); thread-safe."""

    def __init__(self, netns: str | None) -> None:
        self.netns = netns
        self.reads = 0
        self.writes = 0
        self.errors = 0
        self._lock = threading.Lock()

    def read(self, paths: Iterable[str]) -> dict[str, str | None]:
        """Contents of each file (whitespace-normalised), None for a file that does not exist
        (e.g. the per-link directory of a link that is gone)."""
        wanted = list(paths)

        def work() -> dict[str, str | None]:
            return {path: _read(path) for path in wanted}

        with self._lock:
            self.reads += len(wanted)
        return self._in_namespace(f"read {len(wanted)} sysctls", work)

    def write(self, path: str, value: str) -> bool:
        """Write ``value``; False when the file does not exist (its link is gone)."""
        def work() -> bool:
            try:
                with open(path, "w", encoding="ascii") as handle:
                    handle.write(value)
            except FileNotFoundError:
                return False
            return True

        with self._lock:
            self.writes += 1
        return self._in_namespace(f"write {path}", work)

    def namespace_id(self) -> str:
        """An identity of the namespace (device and inode of its nsfs file): a namespace that
        was deleted and created again under the same name gets another one."""
        path = os.path.join(NETNS_DIR, self.netns) if self.netns else "/proc/self/ns/net"
        try:
            status = os.stat(path)
        except FileNotFoundError as exc:
            raise NamespaceNotFoundError(self.netns or "") from exc
        return f"{status.st_dev}:{status.st_ino}"

    def _in_namespace(self, operation: str, work: Callable[[], T]) -> T:
        try:
            if self.netns is None:
                return work()
            return _run_in_netns(self.netns, work)
        except NamespaceNotFoundError:
            self._count_error()
            raise
        except OSError as exc:
            self._count_error()
            raise NetlinkOperationError(f"sysctl: {operation}", exc.errno or errno.EIO,
                                        exc.strerror or str(exc)) from exc

    def _count_error(self) -> None:
        with self._lock:
            self.errors += 1


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii") as handle:
            return " ".join(handle.read().split())
    except FileNotFoundError:
        return None


_libc: ctypes.CDLL | None = None


def _setns(fd: int) -> None:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))


def _run_in_netns(netns: str, work: Callable[[], T]) -> T:
    """Run ``work`` in a new thread that entered ``netns`` first; return its result (or raise
    its exception) in the caller."""
    try:
        fd = os.open(os.path.join(NETNS_DIR, netns), os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError as exc:
        raise NamespaceNotFoundError(netns) from exc
    outcome: list[T] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            _setns(fd)  # this thread only: the thread ends right after
            outcome.append(work())
        except BaseException as exc:  # handed to the caller
            failure.append(exc)

    try:
        thread = threading.Thread(target=run, name=f"sysctl-{netns}", daemon=True)
        thread.start()
        thread.join()
    finally:
        os.close(fd)
    if failure:
        raise failure[0]
    return outcome[0]

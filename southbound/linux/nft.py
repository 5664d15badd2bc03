"""Running libnftables' JSON API in a network namespace: the ``nft`` tool, ``-j``.

Thin I/O shell of the nftables model (``southbound.linux.models.nftables``): every call is one
``nft -j ...`` process, run in the plugin's namespace through ``nsenter --net=/run/netns/<ns>``
(no ``setns`` in a thread of the agent, no Python binding to install). kvmesh never parses
nftables' rule language itself: it writes and reads nftables' own JSON.

``SerialRunner`` puts the calls of one namespace in order: operations run one at a time, and
work deferred by one operation (the ownership marker's baseline, see the model) runs before any
later operation, in a background thread meanwhile.
"""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import tempfile
import threading
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from southbound.linux.errors import LinuxSouthboundError
from southbound.linux.netns import NETNS_DIR, require_netns

log = logging.getLogger(__name__)
T = TypeVar("T")

NFT_TIMEOUT_S = 60.0
# nft's messages for errnos a later attempt can get past (the kernel was busy or short of memory).
_TRANSIENT = ("Device or resource busy", "Resource temporarily unavailable",
              "No buffer space available", "Cannot allocate memory", "Interrupted system call")
_LOCATION = re.compile(r"^\S*:\d+:\d+-\d+: ")
_MAX_REASON = 400


class NftError(LinuxSouthboundError):
    """nftables refused (or could not run) a command; ``reason`` is nft's own message, on one
    line. Not retriable unless nft names a transient kernel error."""

    def __init__(self, operation: str, reason: str, *, retriable: bool | None = None) -> None:
        self.operation = operation
        self.reason = reason
        self.retriable = (any(text in reason for text in _TRANSIENT) if retriable is None
                          else retriable)
        super().__init__(f"{operation}: nft: {reason}")


def error_reason(stderr: str) -> str:
    """nft's error output as one line: its ``Error:`` lines (location prefix dropped), in order,
    without repeats; else the first non-empty line."""
    reasons: list[str] = []
    for line in stderr.splitlines():
        line = _LOCATION.sub("", line.strip())
        if line.startswith("Error: "):
            text = line[len("Error: "):].strip()
            if text not in reasons:
                reasons.append(text)
    if not reasons:
        reasons = [line.strip() for line in stderr.splitlines() if line.strip()][:1]
    reason = "; ".join(reasons) or "failed without a message"
    return reason if len(reason) <= _MAX_REASON else reason[:_MAX_REASON] + "..."


def is_absent(exc: NftError) -> bool:
    """Whether nft refused because an object does not exist (ENOENT)."""
    return "No such file or directory" in exc.reason


class Nft:
    """The ``nft`` tool in one namespace (None: the caller's own)."""

    def __init__(self, netns: str | None, *, executable: str = "nft",
                 timeout: float = NFT_TIMEOUT_S) -> None:
        if netns:
            require_netns(netns)
        self.netns = netns
        self.executable = executable
        self.timeout = timeout
        self.calls = 0
        self.errors = 0

    def _argv(self, args: Sequence[str]) -> list[str]:
        command = [self.executable, "-j", *args]
        if self.netns:
            return ["nsenter", f"--net={os.path.join(NETNS_DIR, self.netns)}", *command]
        return command

    def _run(self, operation: str, args: Sequence[str], stdin: bytes | None = None) -> bytes:
        self.calls += 1
        try:
            if stdin is None:
                result = subprocess.run(self._argv(args), stdin=subprocess.DEVNULL,
                                        capture_output=True, timeout=self.timeout, check=False)
            else:
                # From an unlinked file, not a pipe: subprocess feeds a pipe 512 bytes per
                # Python loop turn, and under another thread's load a big table then waits
                # for the GIL hundreds of times.
                with tempfile.TemporaryFile() as source:
                    source.write(stdin)
                    source.seek(0)
                    result = subprocess.run(self._argv(args), stdin=source, capture_output=True,
                                            timeout=self.timeout, check=False)
        except FileNotFoundError as exc:
            self.errors += 1
            raise NftError(operation, f"cannot run {exc.filename!r}: install nftables "
                                      "(tools/setup.sh does)", retriable=False) from None
        except subprocess.TimeoutExpired:
            self.errors += 1
            raise NftError(operation, f"no answer within {self.timeout:g} s",
                           retriable=True) from None
        if result.returncode != 0:
            self.errors += 1
            raise NftError(operation, error_reason(result.stderr.decode(errors="replace")))
        return result.stdout

    def apply(self, document: str, operation: str) -> None:
        """Run an ``{"nftables": [...]}`` document as one nftables transaction
        (``nft -j -f -``): all of it is committed, or none of it."""
        self._run(operation, ["-f", "-"], document.encode())

    def query(self, *what: str) -> list[dict[str, Any]]:
        """``nft -j list <what>``: the objects of the ``nftables`` array, metainfo left out."""
        output = self._run("list " + " ".join(what), ["list", *what])
        try:
            objects = json.loads(output)["nftables"]
        except (ValueError, KeyError, TypeError) as exc:
            raise NftError("list " + " ".join(what), f"unreadable JSON output ({exc})",
                           retriable=True) from None
        return [item for item in objects if isinstance(item, dict) and "metainfo" not in item]

    def list_table(self, family: str, name: str) -> list[dict[str, Any]] | None:
        """The objects of one table, or None when it does not exist."""
        try:
            return self.query("table", family, name)
        except NftError as exc:
            if is_absent(exc):
                return None
            raise


class SerialRunner:
    """Runs operations one at a time; deferred jobs run before any later operation (and in a
    background thread meanwhile). A failing deferred job is logged and counted."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: deque[Callable[[], None]] = deque()
        self._idle = threading.Condition()
        self._busy = 0  # deferred jobs not finished yet
        self.deferred_failures = 0

    def run(self, operation: Callable[[], T]) -> T:
        try:
            with self._lock:
                self._drain()
                return operation()
        finally:
            self._kick()  # what ``operation`` deferred starts once the lock is free

    def defer(self, job: Callable[[], None]) -> None:
        with self._idle:
            self._busy += 1
            self._pending.append(job)
        if not self._lock.locked():
            self._kick()  # else the running operation kicks it when it ends

    def _kick(self) -> None:
        with self._idle:
            if not self._pending:
                return
        threading.Thread(target=self.run, args=(lambda: None,), name="nft-deferred",
                         daemon=True).start()

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait until every deferred job has run; False on timeout."""
        with self._idle:
            return self._idle.wait_for(lambda: self._busy == 0, timeout)

    def _drain(self) -> None:
        while True:
            with self._idle:
                if not self._pending:
                    return
                job = self._pending.popleft()
            try:
                job()
            except Exception as exc:  # e.g. the namespace went away meanwhile
                self.deferred_failures += 1
                log.warning("deferred nftables job failed: %s", exc)
            finally:
                with self._idle:
                    self._busy -= 1
                    self._idle.notify_all()

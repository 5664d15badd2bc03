"""Errors of the Linux southbound and how netlink errors map onto them.

Three kinds of failure reach the scheduler:

* ``InvalidValueError`` - the value breaks the model (raised by ``validate``; the scheduler marks
  it INVALID and never retries it). It names every offending field.
* ``NetlinkOperationError`` - the kernel refused an operation. ``retriable`` tells the scheduler
  whether a later retry may succeed (transient errors such as EBUSY) or not (EINVAL, EPERM...).
* ``NamespaceNotFoundError`` - the namespace given to ``register`` does not exist.
"""

from __future__ import annotations

import errno
import os

from southbound.validation import FieldsInvalidError

# Errors a later attempt can plausibly get past: the kernel was busy or short of buffers.
# ENETUNREACH: a route whose gateway subnet exists on a link that is not up yet; it succeeds
# once the link comes up, so a later retry (or resync) is the right answer.
TRANSIENT_ERRNOS = frozenset(
    {errno.EBUSY, errno.EAGAIN, errno.ENOBUFS, errno.EINTR, errno.ETIMEDOUT, errno.ENOMEM,
     errno.ENETUNREACH}
)
# Deleting something that is already gone is a success (idempotent delete).
ABSENT_ERRNOS = frozenset({errno.ENODEV, errno.ESRCH, errno.EADDRNOTAVAIL, errno.ENOENT})


class LinuxSouthboundError(Exception):
    """Base class of every error raised by this package."""


class InvalidValueError(LinuxSouthboundError, FieldsInvalidError):
    """A value that breaks the model (``southbound.validation.FieldsInvalidError``: ``problems``
    maps each bad field to what is wrong with it; ``fields`` names them)."""


class NamespaceNotFoundError(LinuxSouthboundError, FileNotFoundError):
    """The named network namespace does not exist (kvmesh never creates one by accident)."""

    def __init__(self, netns: str) -> None:
        self.netns = netns
        super().__init__(
            errno.ENOENT, f"network namespace {netns!r} does not exist (create it with "
            f"'ip netns add {netns}'; kvmesh never creates namespaces)"
        )


class NetlinkOperationError(LinuxSouthboundError):
    """A netlink operation that failed, with the errno and whether retrying can help."""

    def __init__(self, operation: str, code: int, detail: str = "", *,
                 retriable: bool | None = None) -> None:
        self.operation = operation
        self.code = code
        self.retriable = code in TRANSIENT_ERRNOS if retriable is None else retriable
        reason = detail or (os.strerror(code) if code > 0 else "unknown error")
        name = errno.errorcode.get(code, str(code))
        super().__init__(f"{operation}: {reason} ({name})")


class UnsupportedLinkTypeError(NetlinkOperationError):
    """The kernel has no driver for the link type (e.g. no ``dummy``/``vlan`` module)."""

    def __init__(self, operation: str, kind: str, code: int) -> None:
        super().__init__(
            operation, code, f"unsupported link type {kind!r}: the kernel refused it",
            retriable=False,
        )
        self.kind = kind


class OwnershipError(NetlinkOperationError):
    """The object exists but kvmesh does not own it, or it differs from the requested one.

    Retriable: the foreign object may go away (an administrator removing it), after which a retry
    succeeds."""

    def __init__(self, operation: str, detail: str) -> None:
        super().__init__(operation, errno.EEXIST, detail, retriable=True)


class VxlanTakenError(NetlinkOperationError):
    """The kernel refused a VXLAN link (EEXIST) although its name is free: another VXLAN device
    in the namespace has the same VNI and UDP port. Not retriable: a retry fails the same way
    until that device goes (a later transaction or resync tries again)."""

    def __init__(self, operation: str, vni: int, port: int, holders: list[str]) -> None:
        holder = ", ".join(holders) if holders else "another VXLAN device"
        super().__init__(operation, errno.EEXIST,
                         f"VNI {vni} on UDP port {port} is in use by {holder} (one VXLAN "
                         "device per VNI and port in a namespace)", retriable=False)


def is_retriable_failure(exc: BaseException) -> bool:
    """The ``is_retriable_failure`` callback of every descriptor of this package."""
    if isinstance(exc, InvalidValueError):
        return False
    if isinstance(exc, NetlinkOperationError):
        return exc.retriable
    # Anything unexpected (a bug, a lost netlink socket): let the retry policy decide.
    return True

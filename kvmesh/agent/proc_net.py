"""What the kernel's TCP socket table (`/proc/net/tcp`, `/proc/net/tcp6`) of this network
namespace says: who is behind a loopback connection, and whether anyone listens on an address.

SO_PEERCRED exists for Unix sockets only; for loopback TCP the client's own socket is in the
same table with its owner's uid. The agent records that uid next to the identity a request's
token proves (revisions, logs): it says which local account sent a request, not what it may do
(the token decides that).
"""

from __future__ import annotations

import contextlib
import ipaddress
import pwd
import struct


def proc_address(host: str, port: int) -> str:
    """`host:port` as /proc/net/tcp{,6} writes it (each 32-bit word in host byte order, hex)."""
    packed = ipaddress.ip_address(host).packed
    words = struct.unpack(f"<{len(packed) // 4}I", packed)
    return "".join(f"{w:08X}" for w in words) + f":{port:04X}"


LISTEN = "0A"  # the TCP state column of a listening socket


def _table(version: int) -> str:
    with open("/proc/net/tcp" if version == 4 else "/proc/net/tcp6", encoding="ascii") as f:
        return f.read()


def is_listening(table: str, local: str) -> bool:
    """Does a socket listen on `local` (proc format)?"""
    return any(len(fields) > 3 and fields[1] == local and fields[3] == LISTEN
               for fields in (line.split() for line in table.splitlines()[1:]))


def anyone_listens(host: str, port: int) -> bool:
    """Is `host:port` (TCP) bound and listening in this network namespace? (True when the
    table cannot be read: never a reason to think an address free.)"""
    try:
        return is_listening(_table(ipaddress.ip_address(host).version),
                            proc_address(host, port))
    except (OSError, ValueError):
        return True


def find_uid(table: str, local: str, remote: str) -> int | None:
    """The uid of the socket whose local and remote addresses (proc format) are these."""
    for line in table.splitlines()[1:]:
        fields = line.split()
        if len(fields) > 7 and fields[1] == local and fields[2] == remote:
            with contextlib.suppress(ValueError):
                return int(fields[7])
    return None


def loopback_peer_uid(peer: tuple[str, int], server: tuple[str, int]) -> int | None:
    """The uid owning the client socket `peer` connected to `server` (both loopback), or None."""
    host = peer[0].removeprefix("::ffff:")
    try:
        if not ipaddress.ip_address(host).is_loopback:
            return None
        server_host = server[0].removeprefix("::ffff:")
        return find_uid(_table(ipaddress.ip_address(host).version),
                        proc_address(host, peer[1]), proc_address(server_host, server[1]))
    except (OSError, ValueError):
        return None


def describe_uid(uid: int | None) -> str:
    if uid is None:
        return ""
    try:
        return f"local uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except KeyError:
        return f"local uid {uid}"

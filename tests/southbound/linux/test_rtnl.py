"""The raw rtnetlink reader's buffer: a reply larger than it is an error, never read cut."""

from __future__ import annotations

import errno
import socket
from typing import Any

import pytest

from southbound.linux.errors import NetlinkOperationError
from southbound.linux.rtnl import RECEIVE_BUFFER, RtnlReader


class OversizedReply:
    """A socket whose next datagram is larger than the reader's buffer (what netlink reports
    under MSG_TRUNC: the datagram's real length)."""

    def __init__(self) -> None:
        self.flags: list[int] = []

    def send(self, data: bytes) -> int:
        return len(data)

    def recv_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> int:
        self.flags.append(flags)
        return len(buffer) + 100


def test_a_reply_larger_than_the_buffer_is_an_error() -> None:
    sock = OversizedReply()
    reader = RtnlReader(sock)
    with pytest.raises(NetlinkOperationError) as dumped:
        reader.links()
    assert dumped.value.code == errno.EMSGSIZE and not dumped.value.retriable
    with pytest.raises(NetlinkOperationError):
        reader.link(name="eth0")
    assert sock.flags == [socket.MSG_TRUNC] * 2
    assert RECEIVE_BUFFER >= 64 << 10  # twice the kernel's largest dump datagram

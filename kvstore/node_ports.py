"""Free loopback TCP ports for local meshes (tests, demo, benchmark).

A port taken from the kernel (bind to port 0) lies in the ephemeral range, where the kernel also
picks the local port of every outgoing connection: in a mesh whose nodes connect to each other
while others are still starting, such a port can be taken before its node binds it. Ports are
therefore drawn at random BELOW the ephemeral range and checked to be bindable.

`KVMESH_PORT_RANGE=LOW-HIGH` narrows the draw to LOW..HIGH (inclusive): processes that start
meshes side by side (the test suite's parallel workers, each given a slice of its own) then never
draw the same port, which a check for "bindable now" cannot promise between two processes (a
port is free until its node binds it).
"""

from __future__ import annotations

import os
import random
import socket
from pathlib import Path

_FALLBACK_EPHEMERAL_START = 32768
_LOWEST = 20000
PORT_RANGE_ENV = "KVMESH_PORT_RANGE"


def _ephemeral_start() -> int:
    try:
        text = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text()
        return int(text.split()[0])
    except (OSError, ValueError, IndexError):
        return _FALLBACK_EPHEMERAL_START


def _draw_range() -> tuple[int, int]:
    """(low, high exclusive) to draw from: KVMESH_PORT_RANGE when set and sane, else 20000 up
    to the ephemeral range."""
    text = os.environ.get(PORT_RANGE_ENV, "")
    low_text, sep, high_text = text.partition("-")
    if sep and low_text.isdigit() and high_text.isdigit():
        low, high = int(low_text), int(high_text)
        if 1024 <= low < high <= 65535:
            return low, high + 1
    if text:
        raise ValueError(f"{PORT_RANGE_ENV}={text!r}: expected LOW-HIGH, 1024 <= LOW < HIGH "
                         f"<= 65535")
    return _LOWEST, _ephemeral_start()


# Ports already handed out by this process: a port is free until its node binds it, so two
# calls in a row could otherwise return the same one (seen in a test: two nodes, one port).
_handed_out: set[int] = set()


def free_tcp_port(host: str = "127.0.0.1") -> int:
    """A port that can be bound on `host` now, outside the ephemeral range when possible, and
    never one this process was given before."""
    low, high = _draw_range()
    rng = random.SystemRandom()
    for _ in range(200):
        port = rng.randrange(low, high) if high > low + 100 else 0
        if port in _handed_out:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            found = int(s.getsockname()[1])
        if found in _handed_out:
            continue
        _handed_out.add(found)
        return found
    raise OSError("no free TCP port found")


def free_tcp_url(host: str = "127.0.0.1") -> str:
    return f"tcp://{host}:{free_tcp_port(host)}"

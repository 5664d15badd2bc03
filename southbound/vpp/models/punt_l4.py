"""`vpp/punt/l4/<ipv4|ipv6>/udp/<port>`: the packets VPP receives for a UDP port of its
own, sent to an application's socket.

    {"socket": "/run/dhcp/punt.sock"}

`punt_socket_register` (a new socket re-points it in place), `punt_socket_deregister`, read back
by `punt_socket_dump`. VPP 24.06 punts UDP ports to sockets, not TCP ones (it refuses them), and
not port 65535 (its "no port"): both are INVALID here. VPP keeps one registration per address
family and port. Registrations VPP has that the desired state does not name are kept OBTAINED
(VPP knows no owner of them).
"""

from __future__ import annotations

import re
from typing import Any

from scheduler import Descriptor
from southbound.modelspec import ModelSpec
from southbound.validation import KEY_FIELD, validate
from southbound.vpp.context import Context
from southbound.vpp.models import memoized
from southbound.vpp.punt_api import (
    AF,
    L4,
    PROTOCOLS,
    PuntApi,
    VppPuntSocket,
    l4_punt,
    punt_descriptor,
)

PREFIX = "vpp/punt/l4/"
DESCRIPTOR = "vpp-punt-l4"
MAX_PORT = 0xFFFE  # 0xFFFF: "Port number required"
KEY_RE = re.compile(r"vpp/punt/l4/([^/]+)/([^/]+)/([^/]+)")


class VppPuntL4(VppPuntSocket):
    """`vpp/punt/l4/<ipv4|ipv6>/udp/<port>`: send the packets VPP receives for a UDP port
    (0..65534; not TCP: VPP refuses it) to an application's unix socket."""


def punt_l4(key: str) -> tuple[str, str, str] | None:
    """(family, protocol, port) as written in a key."""
    match = KEY_RE.fullmatch(key)
    return (match[1], match[2], match[3]) if match else None


def _key_problem(key: str) -> str | None:
    parts = punt_l4(key)
    if parts is None:
        return "malformed key (vpp/punt/l4/<ipv4|ipv6>/udp/<port>)"
    af, protocol, port = parts
    if af not in AF:
        return f"address family {af!r}: ipv4 or ipv6"
    if protocol == "tcp":
        return "VPP 24.06 punts UDP ports to a socket, not TCP ones (it refuses them)"
    if protocol not in PROTOCOLS:
        return f"protocol {protocol!r}: udp"
    if not port.isdigit() or (len(port) > 1 and port[0] == "0") or int(port) > MAX_PORT:
        return f"port {port!r}: a number 0..{MAX_PORT}"
    return None


@memoized
def check_punt_l4(key: str, value: Any) -> dict[str, Any]:
    problem = _key_problem(key)
    return validate(VppPuntL4, key, value,
                    key_problems={KEY_FIELD: problem} if problem else {}).model_dump()


def _punt(api: PuntApi, key: str, for_create: bool) -> dict[str, Any]:
    af, protocol, port = punt_l4(key) or ("", "", "0")
    return l4_punt(af, protocol, int(port))


def _registered(api: PuntApi) -> list[tuple[str, str]]:
    families = {number: name for name, number in AF.items()}
    protocols = {number: name for name, number in PROTOCOLS.items()}
    result = []
    for union, socket in api.registrations(L4):
        af, protocol = families.get(int(union.l4.af)), protocols.get(int(union.l4.protocol))
        if af is not None and protocol is not None:  # else e.g. ICMPv6 types: no key names them
            result.append((f"{PREFIX}{af}/{protocol}/{union.l4.port}", socket))
    return result


def descriptors(ctx: Context) -> list[Descriptor]:
    return [punt_descriptor(ctx.api.conn, DESCRIPTOR, PREFIX, check_punt_l4, _punt,
                            _registered)]


MODEL: ModelSpec[Context] = ModelSpec(
    "vpp/punt/l4", "vpp/punt/l4/<ipv4|ipv6>/udp/<port>", KEY_RE, VppPuntL4,
    check_punt_l4, descriptors,
    examples=(("vpp/punt/l4/ipv4/udp/67", {"socket": "/run/dhcp/punt.sock"}),),
)

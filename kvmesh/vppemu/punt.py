"""Punt to sockets, as VPP 24.06 keeps it (src/vnet/ip/punt_api.c, punt.c, vlib/punt.c); no I/O.

The emulator plays a VPP started with `punt { socket /run/vpp/punt.sock }` (VPP refuses every
registration without that section), with the punt reasons VPP 24.06 allocates at start (its
IPsec ones, ids 1-4).
- A request's punt is decoded first: an unknown type, address family, IP protocol or reason
  fails. `punt_socket_register` then returns without any reply (the client times out);
  `punt_socket_deregister` answers the decoding's code (-1, INVALID_ADDRESS_FAMILY,
  INVALID_PROTOCOL); `punt_socket_dump` of an unknown type has no details.
- `punt_socket_register` refuses (-1, VPP's answer to any clib error) a header version other
  than 1, the server's own socket path, an L4 port of 65535, an L4 protocol other than UDP (or
  ICMPv6 over IPv6, the port then being the ICMPv6 type). Registering what is registered
  re-points it to the new path; the path is cut to 107 characters (sun_path). The reply
  carries the server's socket path.
- `punt_socket_deregister` of anything decodable succeeds, registered or not.
- Registrations are keyed as VPP keys them: L4 by address family and port (not protocol),
  IP protocol by family and protocol, exceptions by reason.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvmesh.vppemu import errors as E
from kvmesh.vppemu.errors import ApiError

L4, IP_PROTO, EXCEPTION = range(3)  # punt_type (API values)
UDP, ICMP6 = 17, 58
SERVER_SOCKET = "/run/vpp/punt.sock"
HEADER_VERSION = 1
SUN_PATH_MAX = 107
NO_PORT = 0xFFFF
# vlib punt reasons by id (0 is never allocated): ipsec_punt.c's, in its order.
REASONS = ("ipsec4-spi-o-udp-0", "ipsec4-no-such-tunnel", "ipsec6-no-such-tunnel",
           "ipsec6-spi-o-udp-0")
# vnet/ip/protocols.def: what ip_proto_decode accepts.
PROTOCOLS = frozenset([*range(61), 62, *range(64, 68), *range(69, 99), *range(100, 114),
                       *range(115, 144), 253, 254, 255])


@dataclass(frozen=True)
class Punt:
    """A decoded punt: its type and, by type, (af, protocol, port), (af, protocol) or
    (reason,)."""

    type: int
    af: int = 0
    protocol: int = 0
    port: int = 0
    reason: int = 0

    def key(self) -> tuple[int, ...]:
        if self.type == L4:
            return (L4, self.af, self.port)
        if self.type == IP_PROTO:
            return (IP_PROTO, self.af, self.protocol)
        return (EXCEPTION, self.reason)


def decode(punt_type: int, af: int, protocol: int, port: int, reason: int) -> Punt:
    """vl_api_punt_decode: the punt, or ApiError with the decoding's code."""
    if punt_type not in (L4, IP_PROTO, EXCEPTION):
        raise ApiError(E.PUNT_REFUSED, f"punt type {punt_type}")
    if punt_type == EXCEPTION:
        if reason > len(REASONS):
            raise ApiError(E.PUNT_REFUSED, f"punt reason {reason}")
        return Punt(EXCEPTION, reason=reason)
    if af not in (0, 1):
        raise ApiError(E.INVALID_ADDRESS_FAMILY, f"address family {af}")
    if protocol not in PROTOCOLS:
        raise ApiError(E.INVALID_PROTOCOL, f"IP protocol {protocol}")
    return Punt(punt_type, af, protocol, port if punt_type == L4 else 0)


class PuntSockets:
    def __init__(self) -> None:
        self.clients: dict[tuple[int, ...], tuple[Punt, str]] = {}

    def register(self, punt: Punt, header_version: int, pathname: str) -> None:
        if header_version != HEADER_VERSION:
            raise ApiError(E.PUNT_REFUSED, "Invalid packet descriptor version")
        if pathname == SERVER_SOCKET:
            raise ApiError(E.PUNT_REFUSED, f"Punt socket: Invalid client path: {pathname}")
        if punt.type == L4:
            if punt.port == NO_PORT:
                raise ApiError(E.PUNT_REFUSED, "Port number required")
            if punt.protocol not in (UDP, ICMP6) or (punt.protocol == ICMP6 and punt.af != 1):
                raise ApiError(E.PUNT_REFUSED, f"only UDP or ICMP6 protocol is supported, got "
                                               f"{punt.protocol}")
        self.clients[punt.key()] = (punt, pathname[:SUN_PATH_MAX])

    def deregister(self, punt: Punt) -> None:
        self.clients.pop(punt.key(), None)

    def of_type(self, punt_type: int) -> list[tuple[Punt, str]]:
        return [self.clients[key] for key in sorted(self.clients) if key[0] == punt_type]

    def snapshot(self) -> list[dict[str, object]]:
        return [{"type": p.type, "af": p.af, "protocol": p.protocol, "port": p.port,
                 "reason": p.reason, "pathname": path} for p, path in self.clients.values()]

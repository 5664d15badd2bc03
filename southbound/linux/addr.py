"""Fast parsing of IP addresses, interface addresses and networks (validation's hot path).

``ipaddress`` parses in pure Python (about 10 us per CIDR); validating thousands of values per
transaction made it the largest cost of the descriptors. These helpers use the C functions
``inet_pton``/``inet_ntop`` (strict: four decimal octets for IPv4, no leading zeros, no zone
ids) and cache results by text. They produce the same canonical text as ``ipaddress``.
"""

from __future__ import annotations

import functools
import socket
from typing import NamedTuple


class Cidr(NamedTuple):
    text: str  # canonical "address/prefixlen"
    version: int  # 4 or 6
    packed: bytes  # the address
    prefixlen: int

    @property
    def sort_key(self) -> tuple[int, bytes, int]:
        """IPv4 before IPv6, then numeric address, then prefix length."""
        return self.version, self.packed, self.prefixlen

    def contains(self, address: bytes) -> bool:
        """Whether ``address`` (packed, same family) is in this CIDR's subnet."""
        if len(address) != len(self.packed):
            return False
        bits = 8 * len(self.packed)
        shift = bits - self.prefixlen
        return (int.from_bytes(address, "big") >> shift) == (
            int.from_bytes(self.packed, "big") >> shift)

    @property
    def host_bits_zero(self) -> bool:
        bits = 8 * len(self.packed)
        mask = (1 << (bits - self.prefixlen)) - 1
        return int.from_bytes(self.packed, "big") & mask == 0


@functools.lru_cache(maxsize=65536)
def parse_address(text: str) -> tuple[int, bytes, str]:
    """(version, packed, canonical text) of an IPv4/IPv6 address; ValueError if invalid."""
    family, version = (socket.AF_INET6, 6) if ":" in text else (socket.AF_INET, 4)
    try:
        packed = socket.inet_pton(family, text)
    except (OSError, ValueError):
        raise ValueError(f"not an IPv{version} address: {text!r}") from None
    return version, packed, socket.inet_ntop(family, packed)


@functools.lru_cache(maxsize=65536)
def parse_cidr(text: str) -> Cidr:
    """An address with its mandatory "/prefixlen"; ValueError if invalid."""
    address, slash, length = text.partition("/")
    if not slash or not length.isdigit() or not length.isascii():
        raise ValueError(f"not in CIDR notation: {text!r}")
    version, packed, canonical = parse_address(address)
    prefixlen = int(length)
    if prefixlen > 8 * len(packed):
        raise ValueError(f"prefix length out of range: {text!r}")
    return Cidr(f"{canonical}/{prefixlen}", version, packed, prefixlen)


def parse_network(text: str) -> Cidr:
    """A network in CIDR notation with zero host bits; ValueError otherwise."""
    cidr = parse_cidr(text)
    if not cidr.host_bits_zero:
        raise ValueError(f"host bits set: {text!r}")
    return cidr

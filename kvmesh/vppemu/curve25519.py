"""X25519 (RFC 7748, section 5): the public key of a WireGuard private key.

VPP's wireguard plugin derives an interface's public key from its private key with OpenSSL's
X25519; the emulator reports the same public key in `wireguard_interface_details`. Written from
the RFC's description (a Montgomery ladder over GF(2^255 - 19)); no I/O, not constant-time: it
plays VPP in tests and never protects a secret.
"""

from __future__ import annotations

P = 2**255 - 19
A24 = 121665
BASE_POINT = 9
KEY_LEN = 32


def _clamp(scalar: bytes) -> int:
    k = bytearray(scalar)
    k[0] &= 248
    k[31] &= 127
    k[31] |= 64
    return int.from_bytes(k, "little")


def x25519(scalar: bytes, u: int = BASE_POINT) -> bytes:
    """The u-coordinate of `scalar` times the point `u` (the base point: the public key)."""
    if len(scalar) != KEY_LEN:
        raise ValueError(f"a scalar is {KEY_LEN} bytes")
    k = _clamp(scalar)
    x1, x2, z2, x3, z3 = u % P, 1, 0, u % P, 1
    swap = 0
    for t in reversed(range(255)):
        bit = (k >> t) & 1
        swap ^= bit
        if swap:
            x2, x3, z2, z3 = x3, x2, z3, z2
        swap = bit
        a, b = (x2 + z2) % P, (x2 - z2) % P
        aa, bb = a * a % P, b * b % P
        e = (aa - bb) % P
        c, d = (x3 + z3) % P, (x3 - z3) % P
        da, cb = d * a % P, c * b % P
        x3 = (da + cb) ** 2 % P
        z3 = x1 * (da - cb) ** 2 % P
        x2 = aa * bb % P
        z2 = e * (aa + A24 * e) % P
    if swap:
        x2, z2 = x3, z3
    return (x2 * pow(z2, P - 2, P) % P).to_bytes(KEY_LEN, "little")


def public_key(private_key: bytes) -> bytes:
    return x25519(private_key)

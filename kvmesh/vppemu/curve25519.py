"""The public key of a WireGuard private key (X25519 with the base point, RFC 7748).

VPP's wireguard plugin derives an interface's public key from its private key; the emulator
reports the same public key in `wireguard_interface_details`. WireGuard and CurveZMQ use the
same Curve25519 key pairs, so libzmq (a dependency already, for the mesh's CurveZMQ) derives
it: no hand-written curve arithmetic.
"""

from __future__ import annotations

import zmq
from zmq.utils import z85

KEY_LEN = 32


def public_key(private_key: bytes) -> bytes:
    if len(private_key) != KEY_LEN:
        raise ValueError(f"a Curve25519 private key is {KEY_LEN} bytes")
    return z85.decode(zmq.curve_public(z85.encode(private_key)))

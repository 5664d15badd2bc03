"""Sans-I/O protocol-version agreement between two peers (the decision only; no sockets).

Every sync starts with a DIGEST_GET, and that first exchange is the peers' hello: the request
carries the requester's protocol range and software version (`DigestParams` protocol,
min_protocol, version), the reply the responder's (`DigestReply`). A node of 0.4.0 sends none
of these fields: it speaks protocol 1 only.

Two nodes can peer when their ranges [min_protocol, protocol] overlap; they then speak the
highest protocol both know (`agree`). Otherwise the peering is refused on both sides — never a
half-working peering: the requester marks the peer refused (PEER_DUMP `refused`, the peer stays
IDLE, gets no floods and is retried with backoff, since it may be upgraded in place), the
responder answers the DIGEST_GET with error INCOMPATIBLE_PROTOCOL (so the requester's sync
fails with the reason), and both count `kvstore.peer.protocol_refused`.

DESIGN (docs/compatibility.md): bump `kvstore.version.PROTOCOL_VERSION` when an older node could
misread the new wire; raise `MIN_PROTOCOL_VERSION` when this release stops speaking an old one.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvstore.version import MIN_PROTOCOL_VERSION, PROTOCOL_VERSION, __version__

# Error code of a DIGEST_GET refused because the requester's protocol range does not meet ours.
INCOMPATIBLE_PROTOCOL = "INCOMPATIBLE_PROTOCOL"
# What a node that sends no protocol (0.4.0) speaks.
LEGACY_PROTOCOL = 1
# Protocol numbers above this are refused as malformed (an i32 from the wire).
MAX_SANE_PROTOCOL = 1 << 16


@dataclass(frozen=True)
class Speaks:
    """A node's protocol range and software version (None: it did not say, e.g. 0.4.0)."""

    min_protocol: int
    protocol: int
    version: str | None = None

    def describe(self) -> str:
        span = (f"{self.protocol}" if self.min_protocol == self.protocol
                else f"{self.min_protocol}..{self.protocol}")
        return f"protocol {span} (version {self.version or '0.4.0 or older'})"


THIS_NODE = Speaks(MIN_PROTOCOL_VERSION, PROTOCOL_VERSION, __version__)


def from_wire(protocol: int | None, min_protocol: int | None, version: str | None) -> Speaks:
    """What a peer said it speaks; ValueError for values that make no sense. Nothing said:
    protocol 1 (a 0.4.0 node); a protocol without a minimum: that protocol only."""
    top = LEGACY_PROTOCOL if protocol is None else protocol
    low = top if min_protocol is None else min_protocol
    if not 1 <= low <= top <= MAX_SANE_PROTOCOL:
        raise ValueError(f"nonsensical protocol range min_protocol={min_protocol} "
                         f"protocol={protocol}")
    return Speaks(low, top, version if isinstance(version, str) and version else None)


@dataclass(frozen=True)
class Agreement:
    """The protocol two peers speak, or why they cannot peer (`refused`, one line)."""

    protocol: int | None
    refused: str | None = None


def agree(peer_name: str, peer: Speaks, me: Speaks = THIS_NODE) -> Agreement:
    """The highest protocol both speak, or a refusal that says which side is too old."""
    low, high = max(me.min_protocol, peer.min_protocol), min(me.protocol, peer.protocol)
    if low <= high:
        return Agreement(high)
    older = "this node" if me.protocol < peer.min_protocol else f"peer {peer_name}"
    return Agreement(None, (
        f"incompatible KvStore protocol: peer {peer_name} speaks {peer.describe()}, this node "
        f"{me.describe()}; no protocol in common (upgrade {older})"))

"""Flooding a peer's publication on as the bytes it arrived in, instead of re-encoding it.

Re-encoding the key-values of a flood costs about as much as decoding them. When every
key-value of a received one-way KEY_SET was applied unchanged (the store holds the very objects
decoded from it: infinite TTL, nothing newer merged since), the encoded `key_vals` map entries of
the received payload are exactly what we would encode, so the outgoing KEY_SET is spliced from
those bytes and a freshly encoded envelope (our flood path and timestamp).

A payload qualifies only if its bytes are laid out the way `wire.encode` lays them out around the
map: it starts with the encoded `cmd` field, the `key_set` and `key_vals` headers and the map
header with the decoded entry count, and it ends with the encoding of every other field as
decoded. The outgoing payload keeps those head bytes and everything up to that end, so the next
hop parses the spliced part exactly as we did (including anything a decoder skips, such as an
unknown field after the entries) and decodes the same key-values; our envelope after it sets the
flood path, the timestamp and solicit_response=false. Any other layout (another encoder's field
order, a repeated key, a field written twice) is re-encoded instead.

Each qualifying publication goes out as its own KEY_SET: concatenating the entries of several
would only be safe if nothing but entries were in the spliced part, which the checks above do not
prove.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final

from kvstore import wire
from kvstore.gen.kvstore_thrift.ttypes import Command, KeySetParams, Request, Value

__all__ = ["MIN_FORWARD_KEYS", "Received", "envelope_tail", "forwarded_payload"]

# Smaller publications are coalesced and re-encoded: one send per few keys would cost more than
# the encoding it saves.
MIN_FORWARD_KEYS: Final[int] = 32

_MAP_COUNT: Final = struct.Struct(">i")


def _empty_key_set(cmd: int | None, params: KeySetParams, others: Request | None) -> bytes:
    request = Request(cmd=cmd, key_set=KeySetParams(key_vals={}))
    if others is not None:
        for name in Request.__slots__:
            if name not in ("cmd", "key_set"):
                setattr(request, name, getattr(others, name))
    for name in KeySetParams.__slots__:
        if name != "key_vals":
            setattr(request.key_set, name, getattr(params, name))
    return wire.encode(request)


def _head_length() -> int:
    """Bytes before the first map entry: cmd field, key_set and key_vals headers, map header.

    Checked against the encoder at import: with and without an empty map, the encodings must
    differ exactly by the key_vals field header and the map header, right after the cmd field
    (7 bytes) and the key_set header (3 bytes).
    """
    with_map = wire.encode(Request(cmd=Command.KEY_SET, key_set=KeySetParams(key_vals={})))
    without = wire.encode(Request(cmd=Command.KEY_SET, key_set=KeySetParams()))
    before, head = 10, 19
    if with_map[:before] != without[:before] or with_map[head:] != without[before:]:
        raise ImportError("unexpected KEY_SET encoding layout")
    return head


_HEAD: Final[int] = _head_length()


@dataclass(slots=True)
class Received:
    """A one-way KEY_SET from a peer, kept until its merged delta is flooded."""

    payload: bytes
    request: Request

    @property
    def key_vals(self) -> dict[str, Value]:
        params = self.request.key_set
        assert params is not None and params.key_vals is not None
        return params.key_vals

    def entries_end(self) -> int | None:
        """Offset just past the map entries if the payload has the expected layout, else None."""
        request = self.request
        params = request.key_set
        assert params is not None and params.key_vals is not None
        shell = _empty_key_set(request.cmd, params, request)
        payload = self.payload
        tail = len(shell) - _HEAD
        end = len(payload) - tail
        if (
            end < _HEAD
            or payload[: _HEAD - _MAP_COUNT.size] != shell[: _HEAD - _MAP_COUNT.size]
            or payload[_HEAD - _MAP_COUNT.size : _HEAD] != _MAP_COUNT.pack(len(params.key_vals))
            or payload[end:] != shell[_HEAD:]
        ):
            return None
        return end


def envelope_tail(node_ids: list[str], timestamp_ms: int) -> bytes:
    """What follows the map entries in a flood KEY_SET sent with this path and timestamp."""
    params = KeySetParams(solicit_response=False, node_ids=node_ids, timestamp_ms=timestamp_ms)
    return _empty_key_set(Command.KEY_SET, params, None)[_HEAD:]


def forwarded_payload(received: Received, entries_end: int, tail: bytes) -> bytes:
    """The received payload with its envelope after the map entries replaced by `tail`."""
    return b"".join((memoryview(received.payload)[:entries_end], tail))

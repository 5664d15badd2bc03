"""Wire codec: Thrift structs <-> bytes with the accelerated binary protocol (C extension).

The generated `read()`/`write()` methods build a transport and a protocol object per call, which
costs more than the encoding itself for small messages; here the C encoder and decoder are called
directly. Decoding is bounded (string and container length limits) so a hostile frame cannot make
the decoder allocate more than the message cap allows.

Strings: the C decoder decodes UTF-8 with errors="replace" and has no strict mode, so invalid
bytes arrive as U+FFFD. Rather than re-decoding every string in Python, the consumers refuse
U+FFFD where it matters (keys and originators in `KvStoreDb.merge`, peer names in PEER_ADD; see
`kvstore.value.REPLACEMENT_CHAR`), which costs one O(1) check for ASCII strings.

Framing on the command socket (ROUTER): a request is `[envelope..., b"", payload]` as sent by a REQ
socket, or by a DEALER that prefixes its own envelope frames (for example a correlation id). The
reply repeats every frame but the last and appends the encoded `Response`. One-way requests
(`KEY_SET` with `solicit_response=false`) get no reply at all.
"""

from __future__ import annotations

from typing import Any, TypeVar

import zmq
from thrift.protocol import fastbinary
from thrift.transport.TTransport import TMemoryBuffer

from kvstore.gen.kvstore_thrift.ttypes import (
    Error,
    KeySetParams,
    Publication,
    Request,
    Response,
)
from kvstore.value import WireKeyVals

T = TypeVar("T")

# Stable error codes carried in Response.error.code.
MALFORMED = "MALFORMED"  # wrong frame layout or undecodable payload
UNKNOWN_COMMAND = "UNKNOWN_COMMAND"
BAD_ARGUMENT = "BAD_ARGUMENT"  # missing parameters, wrong types, invalid values
TOO_LARGE = "TOO_LARGE"  # message over the configured cap
STORAGE_ERROR = "STORAGE_ERROR"  # the node's disk refused the write (full, read-only, I/O)
INTERNAL = "INTERNAL"  # a bug: the node logs it and keeps serving

DEFAULT_DECODE_LIMIT = 64 * 1024 * 1024


class DecodeError(ValueError):
    """The bytes are not a valid encoding of the expected struct."""


class _ReadProtocol:
    """The minimal object the C decoder expects in place of a TProtocol."""

    __slots__ = ("container_length_limit", "string_length_limit", "trans")

    def __init__(self, data: bytes, limit: int) -> None:
        self.trans = TMemoryBuffer(data)
        self.string_length_limit = limit
        self.container_length_limit = limit


def encode(obj: Any) -> bytes:
    """Serialize any generated struct."""
    cls = type(obj)
    data: bytes = fastbinary.encode_binary(obj, [cls, cls.thrift_spec])
    return data


def decode(cls: type[T], data: bytes, limit: int = DEFAULT_DECODE_LIMIT) -> T:
    """Deserialize `data` into a new `cls`; any failure becomes DecodeError."""
    obj = cls()
    try:
        fastbinary.decode_binary(obj, _ReadProtocol(data, limit), [cls, cls.thrift_spec])  # type: ignore[attr-defined]
    except Exception as exc:  # the C decoder raises TypeError, EOFError, UnicodeDecodeError...
        raise DecodeError(f"cannot decode {cls.__name__}: {type(exc).__name__}: {exc}") from exc
    return obj


def decode_request(data: bytes, limit: int = DEFAULT_DECODE_LIMIT) -> Request:
    return decode(Request, data, limit)


def decode_response(data: bytes, limit: int = DEFAULT_DECODE_LIMIT) -> Response:
    return decode(Response, data, limit)


def decode_publication(data: bytes, limit: int = DEFAULT_DECODE_LIMIT) -> Publication:
    return decode(Publication, data, limit)


def decoded_key_vals(container: KeySetParams | Publication) -> WireKeyVals:
    """The key-value map of a KEY_SET or publication this process just decoded, as the store's
    to keep (`KvStoreDb.merge_decoded`): the caller promises not to use its objects otherwise
    (read-only uses of the same objects, such as forwarding the bytes they came in, excepted)."""
    key_vals = container.key_vals
    return WireKeyVals(key_vals if key_vals is not None else {})


def error_response(code: str, message: str) -> bytes:
    return encode(Response(error=Error(code=code, message=message)))


OK_RESPONSE = encode(Response())

# A publication frame that carries nothing: the node sends these after a large publication so
# that a subscriber's queue (bounded in messages) is also bounded in bytes (kvstore/publisher.py).
# An empty Publication (key_vals={}), so a subscriber that decodes it anyway sees no change; the
# client libraries skip it without decoding.
PUBLICATION_PADDING = encode(Publication(key_vals={}))

_NOBLOCK = zmq.NOBLOCK


def recv_frames(sock: zmq.Socket[bytes]) -> list[bytes] | None:
    """One multipart message without blocking, or None when there is none.

    Reads frame objects (copy=False) and follows their `more` flag: about twice as fast as
    `recv_multipart`, whose per-frame getsockopt(RCVMORE) goes through pyzmq's Python layer.
    """
    try:
        frame = sock.recv(_NOBLOCK, copy=False)
    except zmq.Again:
        return None
    frames = [frame.bytes]
    while frame.more:
        frame = sock.recv(_NOBLOCK, copy=False)
        frames.append(frame.bytes)
    return frames

"""HTTP/1.x on the wire, without I/O: what the agent's REST server accepts and how it answers.

The server (`http_server`) reads a request line by line and hands each line here; every refusal
is an `HttpError` carrying the status and a one-line message the server sends back as JSON. One
request per connection (every answer says `Connection: close`), a `Content-Length` body only.
"""

from __future__ import annotations

from dataclasses import dataclass
from http import HTTPStatus

# RFC 9110 token characters: what a method and a header name are made of.
_TCHAR = frozenset(b"!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
VERSIONS = ("HTTP/1.0", "HTTP/1.1")
# Every answer of an agent names its node (the client checks it: kvmesh.rest_client).
NODE_HEADER = "X-Kvmesh-Node"


class HttpError(Exception):
    """A request the server refuses: answered `status` with `{"error": message}`."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or {}


@dataclass(frozen=True)
class RequestLine:
    method: str
    target: str
    version: str


def _strip_eol(line: bytes) -> bytes:
    return line[:-2] if line.endswith(b"\r\n") else line.rstrip(b"\n")


def parse_request_line(raw: bytes) -> RequestLine:
    """`METHOD SP target SP HTTP/1.x` (CRLF or LF); anything else is a 400."""
    line = _strip_eol(raw)
    parts = line.split(b" ")
    if len(parts) != 3 or not parts[0] or not parts[1]:
        raise HttpError(HTTPStatus.BAD_REQUEST, "malformed request line")
    method, target, version = parts
    if not set(method) <= _TCHAR:
        raise HttpError(HTTPStatus.BAD_REQUEST, "malformed method")
    try:
        text_target, text_version = target.decode("ascii"), version.decode("ascii")
    except UnicodeDecodeError:
        raise HttpError(HTTPStatus.BAD_REQUEST, "request line is not ASCII") from None
    if not text_target.startswith("/") or any(c <= " " or c == "\x7f" for c in text_target):
        raise HttpError(HTTPStatus.BAD_REQUEST, "malformed request target")
    if text_version not in VERSIONS:
        if text_version.startswith("HTTP/"):
            raise HttpError(HTTPStatus.HTTP_VERSION_NOT_SUPPORTED,
                            f"{text_version} not supported (HTTP/1.0 or HTTP/1.1)")
        raise HttpError(HTTPStatus.BAD_REQUEST, "malformed HTTP version")
    return RequestLine(method.decode("ascii"), text_target, text_version)


def parse_header_line(raw: bytes) -> tuple[str, str]:
    """`Name: value` -> (lower-case name, value); a folded or malformed line is a 400."""
    line = _strip_eol(raw)
    if line[:1] in (b" ", b"\t"):
        raise HttpError(HTTPStatus.BAD_REQUEST, "folded header lines are not accepted")
    name, sep, value = line.partition(b":")
    if not sep or not name or not set(name) <= _TCHAR:
        raise HttpError(HTTPStatus.BAD_REQUEST, "malformed header line")
    return name.decode("ascii").lower(), value.strip(b" \t").decode("latin-1")


def is_end_of_headers(raw: bytes) -> bool:
    return raw in (b"\r\n", b"\n")


def body_length(headers: dict[str, str], max_body_bytes: int) -> int:
    """How many body bytes follow (Content-Length only: no chunks)."""
    if "transfer-encoding" in headers:
        raise HttpError(HTTPStatus.LENGTH_REQUIRED, "send a Content-Length, not chunks")
    raw = headers.get("content-length", "0") or "0"
    if not (raw.isascii() and raw.isdigit()):  # (str.isdigit alone takes "¹" and "٣")
        raise HttpError(HTTPStatus.BAD_REQUEST, f"bad Content-Length {raw[:40]!r}")
    length = int(raw) if len(raw) <= 18 else max_body_bytes + 1
    if length > max_body_bytes:
        raise HttpError(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"body over {max_body_bytes} bytes")
    return length


def render_response(status: int, body: bytes, content_type: str,
                    headers: dict[str, str] | None = None, head_only: bool = False) -> bytes:
    """A whole HTTP/1.1 answer that closes the connection (`head_only`: without the body, as
    for HEAD; Content-Length still says what the body would be)."""
    try:
        reason = HTTPStatus(status).phrase
    except ValueError:
        reason = "Unknown"
    lines = [f"HTTP/1.1 {status} {reason}", "Server: kvmesh-agent",
             f"Content-Type: {content_type}", f"Content-Length: {len(body)}",
             "Connection: close"]
    lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    return head if head_only else head + body

"""Console logins, without I/O: one-time tickets, session cookies, CSRF tokens (docs/console.md).

- A **ticket** is what `kvmesh ui` gets from the agent with its bearer token (`POST
  /ui/ticket`): random, good for one login within `TICKET_TTL_S`, carrying the role of the token
  that asked for it (a reader's token gets a reader's ticket).
- A **session** is a cookie the agent signs (HMAC-SHA256 with a key derived from the REST API's
  tokens): role, credential name, expiry and a random id. Signed rather than stored, so a
  session survives an agent restart (same tokens, same key) and the agent holds no state per
  browser; a changed token ends every session. Logging out puts the id on a short deny list.
  The cookie is HttpOnly, SameSite=Strict, Secure under TLS, and expires.
- A **CSRF token** is derived from the session (HMAC of its id): the page sends it in the
  `X-CSRF-Token` header of every request that changes something; a request carried by the
  cookie without it is refused (403). A bearer token needs none (no browser sends it by itself).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

COOKIE = "kvmesh_session"
CSRF_HEADER = "x-csrf-token"
TICKET_TTL_S = 60.0
SESSION_TTL_S = 8 * 3600.0
MAX_TICKETS = 1000  # outstanding at once: a flood of ticket requests cannot grow memory


@dataclass(frozen=True)
class Session:
    sid: str
    role: str
    credential: str  # the name of the credential it was opened with (logs, revisions)
    expires: float  # wall clock (the cookie must outlive the agent process)


def session_key(tokens: Iterable[str]) -> bytes:
    """The signing key: from every token of the REST API (secret; changes when they do)."""
    digest = hashlib.sha256(b"kvmesh console session key\0")
    for token in sorted(tokens):
        digest.update(token.encode() + b"\0")
    return digest.digest()


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass
class Sessions:
    key: bytes
    clock: Callable[[], float] = time.time
    session_ttl_s: float = SESSION_TTL_S
    _tickets: dict[str, tuple[str, str, float]] = field(default_factory=dict)
    _revoked: dict[str, float] = field(default_factory=dict)
    # Tickets and logouts come from the server's worker threads, checks from its loop.
    _lock: threading.Lock = field(default_factory=threading.Lock)

    # -- tickets --------------------------------------------------------------------------------

    def issue_ticket(self, role: str, credential: str) -> str:
        now = self.clock()
        with self._lock:
            self._tickets = {t: v for t, v in self._tickets.items() if v[2] > now}
            if len(self._tickets) >= MAX_TICKETS:
                raise OverflowError(f"{MAX_TICKETS} login tickets outstanding: try again in a "
                                    f"minute")
            ticket = secrets.token_urlsafe(24)
            self._tickets[ticket] = (role, credential, now + TICKET_TTL_S)
        return ticket

    def redeem(self, ticket: str) -> Session | None:
        """The session a ticket opens, once; None when unknown, used or expired."""
        with self._lock:
            found = self._tickets.pop(ticket, None)
        if found is None or found[2] <= self.clock():
            return None
        return self.open(found[0], f"{found[1]}, by login ticket")

    # -- sessions -------------------------------------------------------------------------------

    def open(self, role: str, credential: str) -> Session:
        return Session(secrets.token_urlsafe(16), role, credential,
                       self.clock() + self.session_ttl_s)

    def cookie_value(self, session: Session) -> str:
        body = _b64(json.dumps([session.sid, session.role, session.credential,
                                round(session.expires)]).encode())
        return f"{body}.{_b64(self._mac(b'session', body.encode()))}"

    def verify(self, value: str | None) -> Session | None:
        """The session a cookie value proves, or None (forged, expired, logged out)."""
        if not value or value.count(".") != 1:
            return None
        body, mac = value.split(".")
        try:
            good = hmac.compare_digest(_unb64(mac), self._mac(b"session", body.encode()))
            sid, role, credential, expires = json.loads(_unb64(body))
        except (ValueError, TypeError):
            return None
        with self._lock:
            revoked = sid in self._revoked
        if not good or float(expires) <= self.clock() or revoked:
            return None
        return Session(str(sid), str(role), str(credential), float(expires))

    def close(self, session: Session) -> None:
        now = self.clock()
        with self._lock:
            self._revoked = {s: t for s, t in self._revoked.items() if t > now}
            self._revoked[session.sid] = session.expires

    def csrf_token(self, session: Session) -> str:
        return _b64(self._mac(b"csrf", session.sid.encode()))

    def csrf_ok(self, session: Session, given: str | None) -> bool:
        return given is not None and hmac.compare_digest(given.encode(),
                                                         self.csrf_token(session).encode())

    def _mac(self, purpose: bytes, data: bytes) -> bytes:
        return hmac.new(self.key, purpose + b"\0" + data, hashlib.sha256).digest()


def set_cookie(value: str, max_age: float, secure: bool) -> str:
    """The Set-Cookie header of a session (max_age 0: remove it)."""
    return (f"{COOKIE}={value}; Path=/; Max-Age={int(max_age)}; HttpOnly; SameSite=Strict"
            + ("; Secure" if secure else ""))


def cookie_from(header: str | None) -> str | None:
    """Our cookie's value in a Cookie header."""
    for part in (header or "").split(";"):
        name, sep, value = part.strip().partition("=")
        if sep and name == COOKIE:
            return value
    return None

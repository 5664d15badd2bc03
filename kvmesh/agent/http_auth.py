"""Who may call the agent's REST API: one pure decision per request (docs/security.md).

Every request carries `Authorization: Bearer <token>`; a token is an operator's (reads and
writes) or a reader's (reads only). Writes always need an operator token, on loopback too; reads
need a token unless the agent runs with `--http-public-reads`. What is a read is the API's
business (`http_api.is_read`); this module only weighs a credential against it.

A token is either one of the agent's own (its token files, or the one it made at start) or a
member's: the mesh's `member/<name>` record of an active operator or reader carries the SHA-256
of that member's token (`token_sha256`; kvmesh.agent.member_tokens), so one operator token works
on every agent without a file copied to each host, and stops working once the member is removed.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http import HTTPStatus

from kvmesh.agent.http_wire import HttpError

OPERATOR = "operator"
READER = "reader"
CHALLENGE = {"WWW-Authenticate": 'Bearer realm="kvmesh"'}


@dataclass(frozen=True)
class Credential:
    token: str = field(repr=False)
    role: str  # OPERATOR or READER
    name: str  # what proves it, for logs and revisions: e.g. "operator token /run/.../x.token"


@dataclass(frozen=True)
class MemberToken:
    """An active member's REST credential as the mesh publishes it: its token's SHA-256 (hex)."""

    sha256: str
    role: str  # OPERATOR or READER
    member: str  # the member's name (member/<name>)


def no_members() -> Sequence[MemberToken]:
    return ()


@dataclass(frozen=True)
class AccessPolicy:
    credentials: tuple[Credential, ...]
    public_reads: bool = False
    # The members' tokens now (re-read on every request: a removed member's token stops
    # working as soon as the agent sees the removal).
    members: Callable[[], Sequence[MemberToken]] = no_members

    def __post_init__(self) -> None:
        if not any(c.role == OPERATOR for c in self.credentials):
            raise ValueError("the REST API needs an operator token (writes always need one)")
        if any(c.role not in (OPERATOR, READER) for c in self.credentials):
            raise ValueError("a REST credential is an operator's or a reader's")


@dataclass(frozen=True)
class Granted:
    role: str
    credential: str | None  # the credential's name; None: anonymous (public reads)

    @property
    def identity(self) -> str:
        return self.credential or "anonymous client (--http-public-reads)"


def _bearer(header: str | None) -> str | None:
    if not header:
        return None
    scheme, _sep, value = header.partition(" ")
    return value.strip() if scheme.lower() == "bearer" else ""


def authorize(policy: AccessPolicy, authorization: str | None, is_read: bool) -> Granted:
    """The role a request is granted, or HttpError 401 (no or a wrong token) / 403 (a reader's
    token on a write)."""
    token = _bearer(authorization)
    if token is None:
        if is_read and policy.public_reads:
            return Granted(READER, None)
        what = "this request" if is_read else "a request that changes the node"
        raise HttpError(HTTPStatus.UNAUTHORIZED,
                        f"a bearer token is required for {what} (the agent's token file: "
                        f"--http-token-file, KVMESH_HTTP_TOKEN_FILE)", CHALLENGE)
    found = _match(policy, token)
    if found is None:
        raise HttpError(HTTPStatus.UNAUTHORIZED, "wrong bearer token", CHALLENGE)
    role, name = found
    if not is_read and role != OPERATOR:
        raise HttpError(HTTPStatus.FORBIDDEN,
                        f"the {role} token may only read; this request changes the node")
    return Granted(role, name)


def _match(policy: AccessPolicy, token: str) -> tuple[str, str] | None:
    """(role, credential name) of `token`: the agent's own credentials first, then the
    members'. Compared with every one (no early exit whose timing tells how close a guess
    came); a member's by the hash of the token, as the mesh holds no token."""
    found = None
    for credential in policy.credentials:
        if hmac.compare_digest(token.encode(), credential.token.encode()) and found is None:
            found = (credential.role, credential.name)
    digest = hashlib.sha256(token.encode()).hexdigest().encode()
    for member in policy.members():
        if hmac.compare_digest(digest, member.sha256.encode()) and found is None:
            found = (member.role, f"member {member.member}'s {member.role} token (mesh)")
    return found

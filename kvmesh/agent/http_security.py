"""The REST API's security settings, checked before anything starts.

Apart from the server (`http_server`) so that `kvmesh node run --agent` can refuse unusable
TLS/token options at once without loading the HTTP server, asyncio or ssl into the KvStore
node's process (issue 21: the node loads what it uses).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kvmesh.agent.http_auth import (
    OPERATOR,
    READER,
    AccessPolicy,
    Credential,
    MemberToken,
    no_members,
)
from kvmesh.agent.http_token import TokenFileError, new_token, read_token
from kvstore import is_loopback_host

if TYPE_CHECKING:
    import ssl

__all__ = ["GENERATED", "HttpConfigError", "HttpSecurity", "check_bind", "check_in_child",
           "load_security"]


@dataclass(frozen=True)
class HttpSecurity:
    access: AccessPolicy
    tls: ssl.SSLContext | None = None
    # A token made at start (no --http-token-file): written to the token directory once the
    # server is bound (kvmesh.agent.http_token).
    generated_token: str | None = field(default=None, repr=False)


class HttpConfigError(ValueError):
    """Unusable TLS/token settings; the message names the file or the address."""


GENERATED = "the agent's generated operator token"


def load_security(cert: str | None, key: str | None, token_file: str | None,
                  read_token_file: str | None = None,
                  public_reads: bool = False,
                  members: Callable[[], Sequence[MemberToken]] = no_members) -> HttpSecurity:
    """TLS and credentials from the options; without `token_file` a fresh operator token.
    `members`: the tokens the mesh vouches for (kvmesh.agent.member_tokens), accepted too."""
    tls = None
    if (cert is None) != (key is None):
        raise HttpConfigError("--http-cert and --http-key go together")
    if cert is not None and key is not None:
        import ssl  # only with TLS: ssl is 5 MiB of a process that never uses it

        tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        try:
            tls.load_cert_chain(cert, key)
        except (OSError, ssl.SSLError) as exc:
            raise HttpConfigError(f"{cert}/{key}: cannot load the TLS certificate: {exc}") \
                from exc
    generated = None
    try:
        if token_file is not None:
            credentials = [Credential(read_token(token_file), OPERATOR,
                                      f"operator token {token_file}")]
        else:
            generated = new_token()
            credentials = [Credential(generated, OPERATOR, GENERATED)]
        if read_token_file is not None:
            credentials.append(Credential(read_token(read_token_file), READER,
                                          f"reader token {read_token_file}"))
    except TokenFileError as exc:
        raise HttpConfigError(str(exc)) from exc
    if len({c.token for c in credentials}) != len(credentials):
        raise HttpConfigError("--http-read-token-file holds the operator token: give readers "
                              "a token of their own")
    return HttpSecurity(AccessPolicy(tuple(credentials), public_reads, members), tls, generated)


def check_bind(host: str, security: HttpSecurity) -> None:
    """Anything but loopback needs TLS. A token file is not needed: a remote client uses a
    token the mesh vouches for (an operator member's `token_sha256`), and without one the
    agent's own token (made at start, written for the local CLI) keeps the API closed."""
    if is_loopback_host(host):
        return
    if security.tls is None:
        raise HttpConfigError(
            f"the REST API on {host} (not loopback) needs TLS (--http-cert, --http-key)")


def check_in_child(cert: str | None, key: str | None, token_file: str | None,
                   read_token_file: str | None, public_reads: bool, host: str | None) -> None:
    """`load_security` and `check_bind` (with `host`) run in a short-lived child process, for a
    process that left OpenSSL out (`kvmesh/entry.py`: a KvStore node refusing its agent's
    unusable TLS settings before it starts anything); HttpConfigError with the child's message."""
    settings = json.dumps([cert, key, token_file, read_token_file, public_reads, host])
    done = subprocess.run([sys.executable, "-m", __name__, settings], capture_output=True,
                          text=True, timeout=60, check=False)
    if done.returncode == 2:
        raise HttpConfigError(done.stdout.strip())
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise HttpConfigError(f"checking the REST API's TLS settings failed: {last}")


def _check(argv: Sequence[str]) -> int:
    cert, key, token_file, read_token_file, public_reads, host = json.loads(argv[0])
    try:
        security = load_security(cert, key, token_file, read_token_file, public_reads)
        if host is not None:
            check_bind(host, security)
    except HttpConfigError as exc:
        print(exc)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(_check(sys.argv[1:]))

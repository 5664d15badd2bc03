"""What the mesh says about reaching a node's agent: its member record's REST fields.

A node made with `kvmesh node init` has a self-signed REST certificate; an operator admits the
node with `kvmesh member add ... --rest-url URL --rest-cert CERT.pem`, which stores the
certificate's SHA-256 (of its DER bytes) as `rest_cert_sha256` in `member/<name>` (writable by
operators only). The CLI pins that fingerprint: it talks to the node's agent only if the agent
presents exactly that certificate — no CA to run, and no token sent before the check.

`member_rest` reads those fields (and the member's command URL, which says whether the node is
on another host); `cert_sha256` fingerprints a certificate file; `rest_record_fields` makes the
fields for `member add` (`--rest-url`, `--rest-cert`, `--token-file`: the hash of an operator's
or reader's REST token, `token_sha256`, which every agent then accepts).
"""

from __future__ import annotations

import hashlib
import re
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvmesh.agent.http_token import TokenFileError, read_token
from kvmesh.agent.member_tokens import MEMBER, decode_member

_SHA256_HEX = re.compile(r"[0-9a-f]{64}")


class PinError(ValueError):
    """An unusable certificate, URL or token for a member record; the message names it."""


def member_key(name: str) -> str:
    return f"{MEMBER}{name}"


@dataclass(frozen=True)
class MemberRest:
    """The REST side of an active member record (every field may be missing)."""

    rest_address: str | None = None  # HOST:PORT of `rest_url`
    rest_tls: bool = False
    cert_sha256: str | None = None
    cmd_url: str | None = None


def member_rest(raw: bytes | None) -> MemberRest:
    """The fields of a `member/<name>` value; nothing from a removed or malformed record (a
    removed node's pin vouches for nothing)."""
    record = decode_member(raw)
    if record is None or record.get("state") != "active":
        return MemberRest()
    pin = record.get("rest_cert_sha256")
    pin = pin if isinstance(pin, str) and _SHA256_HEX.fullmatch(pin) else None
    address, tls = None, False
    url = record.get("rest_url")
    if isinstance(url, str):
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme in ("http", "https") and parsed.hostname and parsed.port:
            host = f"[{parsed.hostname}]" if ":" in parsed.hostname else parsed.hostname
            address, tls = f"{host}:{parsed.port}", parsed.scheme == "https"
    cmd_url = record.get("cmd_url")
    return MemberRest(address, tls, pin, cmd_url if isinstance(cmd_url, str) else None)


def cert_sha256(path: str | Path) -> str:
    """The SHA-256 (hex) of the DER bytes of the PEM certificate in `path`."""
    import ssl  # the CLI's: a KvStore node never fingerprints certificates

    try:
        der = ssl.PEM_cert_to_DER_cert(Path(path).read_text())
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise PinError(f"{path}: not a PEM certificate: {exc}") from None
    return hashlib.sha256(der).hexdigest()


def check_rest_url(url: str) -> str:
    """`https://HOST:PORT` (what `--rest-url` takes), else PinError."""
    parsed = urllib.parse.urlsplit(url)
    try:
        port = parsed.port
    except ValueError:
        port = None
    if parsed.scheme != "https" or not parsed.hostname or port is None \
            or parsed.path not in ("", "/"):
        raise PinError(f"--rest-url {url!r}: expected https://HOST:PORT (the agent's REST "
                       f"address with TLS)")
    return url.rstrip("/")


def rest_record_fields(rest_url: str | None, rest_cert: str | None,
                       token_file: str | None) -> dict[str, Any]:
    """The member record's REST fields from `member add`'s options (PinError when unusable):
    `rest_url` and `rest_cert_sha256` go together; `token_sha256` is the hash of the token in
    `token_file` (the token itself never enters the mesh)."""
    fields: dict[str, Any] = {}
    if (rest_url is None) != (rest_cert is None):
        raise PinError("--rest-url and --rest-cert go together")
    if rest_url is not None and rest_cert is not None:
        fields["rest_url"] = check_rest_url(rest_url)
        fields["rest_cert_sha256"] = cert_sha256(rest_cert)
    if token_file is not None:
        try:
            token = read_token(token_file)
        except TokenFileError as exc:
            raise PinError(str(exc)) from None
        fields["token_sha256"] = hashlib.sha256(token.encode()).hexdigest()
    return fields

"""The REST tokens the mesh vouches for: active operator and reader members' `token_sha256`.

An operator makes one bearer token (`kvmesh keys token`) and an operator publishes its SHA-256
in the member's record (`member/<name>`, written only by operator-role clients). Every agent
follows `member/` in its KvStore and accepts a token whose hash is in an active record, with
that record's role (`http_auth`): no token file is copied to each host, and a member's removal
(a newer record with state "removed") revokes its token on every agent as soon as the agent
sees it. The agent's own token files work as before, beside these.

`tokens_of` is the pure part (records in, credentials out); `MemberTokensFollower` the thread
(`agent-members`, its own KvStore client) that keeps a `MemberTokens` current: a dump of
`member/` at start, again on every publication under it, and every `REDUMP_S` anyway.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

import msgpack

from kvmesh.agent.follow import follow
from kvmesh.agent.http_auth import OPERATOR, READER, MemberToken
from kvstore import KvStoreClient, Subscription

log = logging.getLogger("kvmesh.agent.members")

MEMBER = "member/"
REDUMP_S = 5.0  # the guard against a missed publication
WAIT_S = 0.5  # longest the thread waits for a publication (and so for its stop)
_SHA256_HEX = re.compile(r"[0-9a-f]{64}")


def decode_member(raw: bytes | None) -> dict[str, Any] | None:
    """A member record (msgpack map), or None when it is not one."""
    if not raw:
        return None
    try:
        record = msgpack.unpackb(raw, raw=False, strict_map_key=True)
    except (ValueError, TypeError):  # msgpack's format errors are ValueErrors
        return None
    return record if isinstance(record, dict) else None


def tokens_of(records: Mapping[str, bytes | None]) -> tuple[MemberToken, ...]:
    """The REST credentials in `member/<name>` records: active, role operator or reader, a
    well-formed `token_sha256`, and the record's name its key's. Anything else is skipped."""
    found = []
    for key, raw in sorted(records.items()):
        record = decode_member(raw)
        name = key[len(MEMBER):]
        if record is None or record.get("name") != name or record.get("state") != "active":
            continue
        role, digest = record.get("role"), record.get("token_sha256")
        if role in (OPERATOR, READER) and isinstance(digest, str) \
                and _SHA256_HEX.fullmatch(digest):
            found.append(MemberToken(digest, str(role), name))
    return tuple(found)


class MemberTokens:
    """The current table (one reference swap: a request sees the old table or the new)."""

    def __init__(self) -> None:
        self._table: tuple[MemberToken, ...] = ()

    def __call__(self) -> Sequence[MemberToken]:
        return self._table

    def load(self, records: Mapping[str, bytes | None]) -> bool:
        """Replace the table; True when it changed."""
        table = tokens_of(records)
        changed = table != self._table
        self._table = table
        return changed


class MemberTokensFollower:
    def __init__(self, kv_url: str, tokens: MemberTokens) -> None:
        self.kv_url = kv_url
        self.tokens = tokens

    def run(self, stop: threading.Event) -> None:
        next_dump = 0.0  # at once; and again after an error: what was published meanwhile

        def step(client: KvStoreClient, sub: Subscription) -> None:
            nonlocal next_dump
            if _drained(sub, WAIT_S) or time.monotonic() >= next_dump:
                self._reload(client)
                next_dump = time.monotonic() + REDUMP_S

        def failed() -> None:
            nonlocal next_dump
            next_dump = 0.0

        follow(self.kv_url, MEMBER, stop, step, "member tokens", failed)

    def _reload(self, client: KvStoreClient) -> None:
        dump = client.dump(prefix=MEMBER)
        if self.tokens.load({key: value.value for key, value in dump.items()}):
            log.info("REST tokens of members: %s", ", ".join(
                f"{t.member} ({t.role})" for t in self.tokens()) or "none")


def _drained(sub: Subscription, timeout: float) -> bool:
    """Did any publication arrive (all of them taken)?"""
    got = sub.recv(timeout_s=timeout) is not None
    while got and sub.recv(timeout_s=0) is not None:
        pass
    return got

"""Membership in the mesh: the `member/<name>` records, and what a node makes of them (I/O-free).

An operator admits a node (or an operator or reader key) by writing its record, `member/<name>`
(infinite TTL; `kvmesh member add`), and revokes it by writing a newer version with state
"removed" (`kvmesh member remove`): never a deletion, so the CRDT order makes a removal stick
against a stale flood or a restarted node's old copy (the higher version wins everywhere).

The record (a msgpack map; the contract shared with `kvmesh node init` and the REST client):
    name, key (z85 Curve public key, 40 chars), role ("peer" | "operator" | "reader"),
    cmd_url, pub_url, peers (node names), added_by, added_at (unix seconds),
    state ("active" | "removed"), optional rest_url, rest_cert_sha256, token_sha256.

What a node derives from the records it holds (`MemberView`):
- `keys()`: the identities of active members' keys, accepted in addition to the node's
  authorized-keys directory (a peer-role member is a peer named after its record);
- `revoked()`: the keys of removed members, refused even if a directory still lists them
  (`key_table` composes them with the node's directory: the ZAP handler's decision, `admit`);
- `peerings(node)`: the peers `node` must have by the records, both directions: a member whose
  record names `node` in its `peers`, and the members `node`'s own record names;
and `plan_peers` reconciles a node's peerings against that (the node's shell applies the plan,
as the agent's shell applies the scheduler's: `kvstore.node`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any

from zmq.utils import z85

from kvstore.authz import MEMBER_PREFIX, PEER, REVOKED_KEY, ROLES, UNKNOWN_KEY, Identity

ACTIVE = "active"
REMOVED = "removed"
STATES = (ACTIVE, REMOVED)
Z85_KEY_LEN = 40
URL_SCHEMES = ("tcp://", "ipc://")

_REQUIRED_TEXT = ("name", "key", "role", "cmd_url", "pub_url", "added_by", "state")
_OPTIONAL_TEXT = ("rest_url", "rest_cert_sha256", "token_sha256")

Address = tuple[str, str]  # (cmd_url, pub_url); pub_url may be ""


class MemberError(ValueError):
    """A record, key or address that cannot be used; the message says what is wrong."""


def member_key(name: str) -> str:
    return f"{MEMBER_PREFIX}{name}"


def name_of(key: str) -> str | None:
    """The member name of a `member/<name>` key, else None."""
    if not key.startswith(MEMBER_PREFIX):
        return None
    return key[len(MEMBER_PREFIX):] or None


def check_name(name: str) -> None:
    if not name or "/" in name or name.strip() != name or name.startswith("."):
        raise MemberError(f"invalid member name {name!r}: non-empty, no '/', spaces or "
                          "leading '.'")


def is_z85_key(key: bytes) -> bool:
    """Is `key` a Curve key as z85 text: 40 characters that decode to 32 bytes?"""
    try:
        return len(key) == Z85_KEY_LEN and len(z85.decode(key)) == 32
    except Exception:
        return False


def check_key(key: str) -> bytes:
    """The z85 public key as bytes; MemberError unless it is one (`is_z85_key`)."""
    if not is_z85_key(key.encode()):
        raise MemberError(f"not a CurveZMQ public key (40 z85 characters): {key[:48]!r}")
    return key.encode()


def key_fingerprint(public_key: bytes) -> str:
    """A short, stable name for a public key (z85 text), as logs and errors print it:
    sha256: and 16 hex digits of the raw key."""
    try:
        raw = z85.decode(public_key)
    except Exception:  # not z85: fingerprint the bytes as they are
        raw = public_key
    return "sha256:" + hashlib.sha256(raw).hexdigest()[:16]


def _check_url(url: str, what: str) -> None:
    if not url.startswith(URL_SCHEMES):
        raise MemberError(f"{what} {url!r}: must start with tcp:// or ipc://")
    rest = url.split("://", 1)[1]
    if url.startswith("ipc://"):
        if not rest:
            raise MemberError(f"{what} {url!r}: no path")
        return
    host, sep, port = rest.rpartition(":")
    if not sep or not host.strip("[]") or not port.isdigit() or not 0 < int(port) < 65536:
        raise MemberError(f"{what} {url!r}: expected tcp://HOST:PORT")


def parse_address(spec: str) -> Address:
    """`CMD_URL[,PUB_URL]` -> (cmd_url, pub_url or ""); MemberError naming what is wrong."""
    parts = [part.strip() for part in spec.split(",")]
    if not 1 <= len(parts) <= 2 or not parts[0]:
        raise MemberError(f"address {spec!r}: expected CMD_URL[,PUB_URL]")
    _check_url(parts[0], "command URL")
    pub = parts[1] if len(parts) == 2 else ""
    if len(parts) == 2:
        _check_url(pub, "publication URL")
    return parts[0], pub


@dataclass(frozen=True)
class Member:
    name: str
    key: str  # z85 public key
    role: str
    cmd_url: str
    pub_url: str
    peers: tuple[str, ...]
    added_by: str
    added_at: int
    state: str = ACTIVE
    extra: Mapping[str, str] = field(default_factory=dict)  # rest_url, rest_cert_sha256, ...
    # Keys this member held before a rotation (`kvmesh member rotate`): revoked for good.
    retired_keys: tuple[str, ...] = ()

    @property
    def active(self) -> bool:
        return self.state == ACTIVE

    @property
    def fingerprint(self) -> str:
        return key_fingerprint(self.key.encode())

    def to_map(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name, "key": self.key, "role": self.role, "cmd_url": self.cmd_url,
            "pub_url": self.pub_url, "peers": list(self.peers), "added_by": self.added_by,
            "added_at": self.added_at, "state": self.state,
        }
        out.update(self.extra)
        if self.retired_keys:
            out["retired_keys"] = list(self.retired_keys)
        return out


def encode_member(member: Member) -> bytes:
    import msgpack  # loaded on use: a node with no member records never needs it

    return bytes(msgpack.packb(member.to_map(), use_bin_type=True))


def decode_member(name: str, raw: bytes) -> Member:
    """The record stored under `member/<name>`; MemberError if it is not a valid one."""
    import msgpack  # loaded on use (see encode_member)

    try:
        data = msgpack.unpackb(raw, raw=False, strict_map_key=True)
    except Exception as exc:
        raise MemberError(f"member/{name}: not msgpack: {exc}") from exc
    if not isinstance(data, dict):
        raise MemberError(f"member/{name}: not a map")
    for text in _REQUIRED_TEXT:
        if not isinstance(data.get(text), str):
            raise MemberError(f"member/{name}: field {text!r} missing or not text")
    if data["name"] != name:
        raise MemberError(f"member/{name}: names {data['name']!r}")
    check_key(data["key"])
    if data["role"] not in ROLES:
        raise MemberError(f"member/{name}: unknown role {data['role']!r}")
    if data["state"] not in STATES:
        raise MemberError(f"member/{name}: unknown state {data['state']!r}")
    peers = data.get("peers")
    if not isinstance(peers, list) or not all(isinstance(p, str) and p for p in peers):
        raise MemberError(f"member/{name}: peers must be a list of node names")
    added_at = data.get("added_at")
    if not isinstance(added_at, int) or isinstance(added_at, bool):
        raise MemberError(f"member/{name}: added_at must be an integer")
    extra = {k: data[k] for k in _OPTIONAL_TEXT if isinstance(data.get(k), str)}
    retired = data.get("retired_keys", [])
    if not isinstance(retired, list) or not all(isinstance(k, str) for k in retired):
        raise MemberError(f"member/{name}: retired_keys must be a list of keys")
    for old in retired:
        check_key(old)
    return Member(name=name, key=data["key"], role=data["role"], cmd_url=data["cmd_url"],
                  pub_url=data["pub_url"], peers=tuple(peers), added_by=data["added_by"],
                  added_at=added_at, state=data["state"], extra=extra,
                  retired_keys=tuple(retired))


@dataclass(frozen=True)
class MemberView:
    """The member records a node holds, decoded (`invalid`: one line per record skipped)."""

    members: Mapping[str, Member]
    invalid: tuple[str, ...] = ()

    @classmethod
    def from_values(cls, values: Iterable[tuple[str, bytes | None]]) -> MemberView:
        """From (key, value bytes) of the `member/` keys (a missing value is skipped)."""
        members: dict[str, Member] = {}
        invalid: list[str] = []
        for key, raw in values:
            name = name_of(key)
            if name is None or not raw:
                continue
            try:
                members[name] = decode_member(name, raw)
            except MemberError as exc:
                invalid.append(str(exc))
        return cls(members, tuple(invalid))

    def active(self) -> list[Member]:
        return [m for _name, m in sorted(self.members.items()) if m.active]

    def keys(self) -> dict[bytes, Identity]:
        """Active members' keys and their identities (a peer is bound to its own name)."""
        out: dict[bytes, Identity] = {}
        for member in self.active():
            public = member.key.encode()
            node = member.name if member.role == PEER else None
            out.setdefault(public, Identity(member.role, node, member.fingerprint))
        return out

    def revoked(self) -> frozenset[bytes]:
        """Keys of removed members, and keys retired by a rotation, that no active member
        holds."""
        active = {m.key.encode() for m in self.active()}
        old = {k.encode() for m in self.members.values() for k in m.retired_keys}
        removed = {m.key.encode() for m in self.members.values() if not m.active}
        return frozenset((old | removed) - active)

    def removed_names(self) -> frozenset[str]:
        return frozenset(name for name, m in self.members.items() if not m.active)

    def peer_key(self, name: str) -> bytes | None:
        member = self.members.get(name)
        if member is None or not member.active or member.role != PEER:
            return None
        return member.key.encode()

    def peerings(self, node: str) -> dict[str, Address]:
        """The peers `node` has by the records: active peer members naming `node`, and the
        active peer members `node`'s own active record names."""
        out: dict[str, Address] = {}
        peers = {m.name: m for m in self.active() if m.role == PEER}
        own = peers.get(node)
        for member in peers.values():
            if member.name == node:
                continue
            if node in member.peers or (own is not None and member.name in own.peers):
                out[member.name] = (member.cmd_url, member.pub_url)
        return out


def drop_readmissions(held: Callable[[str], bytes | None],
                      key_vals: MutableMapping[str, Any]) -> list[str]:
    """Removal is final: remove, in place, every `member/<name>` record of `key_vals` (what a
    peer or client sent: a flood, a sync reply, a KEY_SET) that would make active again a member
    this node holds as removed (`held(key)`: the value bytes it holds). Returns those keys.

    Without it, a removed node that reached a node which missed the removal (down at the time,
    so still accepting the removed key) could flood a newer, "active" version of its own record
    there, and every node would take it by version. A name once removed stays removed; a new key
    for a member is `kvmesh member rotate`, a removed host comes back under a new name."""
    dropped = []
    for key in [k for k in key_vals if k.startswith(MEMBER_PREFIX)]:
        name = name_of(key)
        held_raw = held(key)
        if name is None or not held_raw:
            continue
        try:
            if decode_member(name, held_raw).active:
                continue
            incoming = key_vals[key].value
            if incoming and decode_member(name, incoming).active:
                del key_vals[key]
                dropped.append(key)
        except MemberError:
            continue  # not a record this node judges: the merge keeps the usual rules
    return dropped


@dataclass(frozen=True)
class KeyTable:
    """The keys a node accepts, with their identities, and those it refuses as revoked."""

    accepted: Mapping[bytes, Identity]
    revoked: frozenset[bytes]

    def admit(self, key: bytes) -> str | None:
        """The ZAP decision for a connecting key: None (accepted), or the refusal reason."""
        if key in self.accepted:
            return None
        return REVOKED_KEY if key in self.revoked else UNKNOWN_KEY


def key_table(directory: Mapping[bytes, Identity], view: MemberView,
              own: tuple[bytes, Identity]) -> KeyTable:
    """What a node accepts: its authorized-keys directory, then the active members' keys (the
    directory wins for a key in both), less the removed members' keys (whatever the directory
    says), plus its own key (`own`: the node's agent uses it), which is never revoked."""
    revoked = view.revoked() - {own[0]}
    accepted = {key: identity for key, identity in directory.items() if key not in revoked}
    for key, identity in view.keys().items():
        accepted.setdefault(key, identity)
    accepted[own[0]] = own[1]
    return KeyTable(accepted, revoked)


@dataclass(frozen=True)
class PeerPlan:
    add: dict[str, Address]
    remove: tuple[str, ...]


def plan_peers(node: str, view: MemberView, current: Mapping[str, Address],
               managed: Iterable[str]) -> PeerPlan:
    """What to change in `node`'s peerings (`current`, by name) so that they match the records:
    add the peers the records name that are missing (or whose address changed, if the records
    put them there: `managed`), remove those the records put there and no longer name, and
    remove every peer whose member record says removed, whoever added it."""
    desired = view.peerings(node)
    managed = set(managed)
    removed = view.removed_names()
    add = {name: address for name, address in desired.items()
           if name not in current or (name in managed and current[name][0] != address[0])}
    drop = {name for name in managed if name in current and name not in desired}
    drop |= {name for name in current if name in removed and name not in desired}
    return PeerPlan(add, tuple(sorted(drop)))


__all__ = [
    "ACTIVE",
    "MEMBER_PREFIX",
    "REMOVED",
    "KeyTable",
    "Member",
    "MemberError",
    "MemberView",
    "PeerPlan",
    "check_key",
    "check_name",
    "decode_member",
    "drop_readmissions",
    "encode_member",
    "is_z85_key",
    "key_fingerprint",
    "key_table",
    "member_key",
    "name_of",
    "parse_address",
    "plan_peers",
]

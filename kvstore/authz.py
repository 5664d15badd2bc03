"""Authorisation: may this identity, with its role, make this request? (I/O-free.)

The node's shell authenticates a connection (CurveZMQ + ZAP, `kvstore.curve`) and looks up the
`Identity` of every message's key; this module decides, from (identity, request) alone:

- whether the request is served at all (`Decision.refused` names the reason, which the node
  counts as `kvstore.auth.refused.<reason>` and returns as the error code `UNAUTHORIZED`);
- whether the flood-path fields (`node_ids`, `sender_id`) and the hashes it carries are trusted.
  Only an authenticated peer's are: anything else has them ignored (its hashes recomputed), so a
  client can neither stop the flood to a peer by naming it in `node_ids` nor plant a hash.

Roles (see docs/security.md):
- `peer`: another node. May flood and sync (KEY_SET with a flood path, dumps, digests) and read;
  may not manage this node's peers.
- `operator`: may read and write; keys `status/<N>/...` and `node/<N>/...` only when its key is
  bound to node N (N's own agent).
- `reader`: get, dump, hashes, digests, peer dump, counters, node info, snoop; nothing that writes.

Membership (`member/<name>`, kvstore/membership.py) is written by operators only: an operator
not bound to a node (a node's own agent may not admit anyone). A peer relays the records in its
floods (a KEY_SET with a flood path); a peer that writes one itself (no flood path) and a reader
are refused (`member_write`). A removed member's `status/<N>/`, `node/<N>/` keys may be retired
by an operator (`kvmesh member remove --purge`): `retired` names those nodes.

The insecure (plaintext, loopback-only) mode has one identity for every connection,
`INSECURE_IDENTITY`: an unbound operator whose flood path is trusted, i.e. today's behaviour — on
plaintext the node cannot tell a peer from a client, which is why that mode is loopback-only.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvstore.gen.kvstore_thrift.ttypes import Command, Request

PEER = "peer"
OPERATOR = "operator"
READER = "reader"
ROLES = (PEER, OPERATOR, READER)
# Not a role: the identity of a key whose member record says "removed" (refused, REVOKED_KEY).
REVOKED = "revoked"

# Refusal reasons (counter suffixes; stable names).
UNKNOWN_KEY = "unknown_key"  # the key is not (or no longer) in the authorized-keys directory
READER_WRITE = "reader_write"  # a reader asked for a command that writes
PEER_ADMIN = "peer_admin"  # a peer asked to manage this node's peers
FOREIGN_NODE_KEY = "foreign_node_key"  # status/<N>/ or node/<N>/ from a key not bound to N
MEMBER_WRITE = "member_write"  # member/<name> written by anyone but an unbound operator
REVOKED_KEY = "revoked_key"  # the key of a member whose record says "removed"

# Prefixes whose second path element names the node that alone may write them.
NODE_OWNED_PREFIXES = ("status/", "node/")
MEMBER_PREFIX = "member/"

WRITE_COMMANDS = frozenset({Command.KEY_SET, Command.PEER_ADD, Command.PEER_DEL})
PEER_ADMIN_COMMANDS = frozenset({Command.PEER_ADD, Command.PEER_DEL})


@dataclass(frozen=True)
class Identity:
    """Who sent a message: a role, the node its key is bound to (if any), a key fingerprint."""

    role: str
    node: str | None = None
    fingerprint: str = ""
    # True only for the plaintext mode's catch-all identity (flood paths trusted, see above).
    insecure: bool = False


INSECURE_IDENTITY = Identity(role=OPERATOR, node=None, fingerprint="plaintext", insecure=True)


@dataclass(frozen=True)
class Decision:
    refused: str | None  # None: serve it; else the reason (a constant above)
    message: str = ""
    trust_flood_path: bool = False  # keep node_ids / sender_id / hashes as sent

    @property
    def allowed(self) -> bool:
        return self.refused is None


def owner_of(key: str) -> str | None:
    """The node that alone may write `key` (status/<N>/..., node/<N>/...), else None."""
    for prefix in NODE_OWNED_PREFIXES:
        if key.startswith(prefix):
            node, _sep, _rest = key[len(prefix):].partition("/")
            return node
    return None


def _member_write(identity: Identity, request: Request) -> Decision | None:
    """The refusal of a KEY_SET of `member/` keys by anyone but an unbound operator (a peer's
    flood relays what an operator wrote: it carries a flood path)."""
    key_vals = request.key_set.key_vals if request.key_set is not None else None
    if not key_vals or identity.insecure or not any(k.startswith(MEMBER_PREFIX) for k in key_vals):
        return None
    if identity.role == OPERATOR and identity.node is None:
        return None
    if identity.role == PEER and request.key_set is not None and request.key_set.node_ids:
        return None
    who = f"a {identity.role} key ({identity.fingerprint})"
    if identity.role == OPERATOR:
        who = f"an operator key bound to node {identity.node!r} ({identity.fingerprint})"
    return Decision(MEMBER_WRITE, f"{who} may not write {MEMBER_PREFIX}...: only an operator "
                                  "may admit or remove members")


def authorize(identity: Identity | None, request: Request,
              retired: frozenset[str] = frozenset()) -> Decision:
    """The decision for one decoded request from `identity` (None: key unknown or revoked).
    `retired`: removed members, whose `status/`, `node/` keys an operator may retire."""
    if identity is None:
        return Decision(UNKNOWN_KEY, "the client's key is not (or no longer) authorized")
    if identity.role == REVOKED:
        return Decision(REVOKED_KEY, f"the key {identity.fingerprint} belongs to a removed member")
    if identity.role not in ROLES:
        return Decision(UNKNOWN_KEY, f"unknown role {identity.role!r}")
    trusted = identity.insecure or identity.role == PEER
    cmd = request.cmd
    if cmd == Command.KEY_SET:
        refusal = _member_write(identity, request)
        if refusal is not None:
            return refusal
    if identity.role == READER and cmd in WRITE_COMMANDS:
        return Decision(READER_WRITE, f"a reader key ({identity.fingerprint}) may not write")
    if identity.role == PEER and cmd in PEER_ADMIN_COMMANDS:
        return Decision(PEER_ADMIN, "a peer key may not add or remove this node's peers")
    if cmd == Command.KEY_SET and not trusted:
        key_vals = request.key_set.key_vals if request.key_set is not None else None
        for key in key_vals or ():
            owner = owner_of(key)
            if owner in retired and identity.role == OPERATOR and identity.node is None:
                continue  # `member remove --purge` retiring a removed node's keys
            if owner is not None and owner != identity.node:
                bound = f"bound to {identity.node!r}" if identity.node else "not bound to a node"
                return Decision(
                    FOREIGN_NODE_KEY,
                    f"key {key!r} belongs to node {owner!r}; this key is {bound}",
                )
    return Decision(None, trust_flood_path=trusted)


__all__ = [
    "FOREIGN_NODE_KEY",
    "INSECURE_IDENTITY",
    "MEMBER_PREFIX",
    "MEMBER_WRITE",
    "OPERATOR",
    "PEER",
    "PEER_ADMIN",
    "READER",
    "READER_WRITE",
    "REVOKED",
    "REVOKED_KEY",
    "ROLES",
    "UNKNOWN_KEY",
    "Decision",
    "Identity",
    "authorize",
    "owner_of",
]

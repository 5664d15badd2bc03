"""`kvmesh member add|remove|list`: membership records in the mesh (docs/operator.md).

An operator (role operator, not bound to a node) writes `member/<name>` on any node; every node
then accepts the member's key and the nodes its record names peer with it (kvstore/membership.py
says what a node makes of the records). Removal writes a newer version with state "removed":
every node drops the key's connections and peerings. Each command reads the current record
first and writes the next version, so a re-run never goes backwards.
"""

from __future__ import annotations

import dataclasses
import getpass
import time
from collections.abc import Mapping, Sequence
from typing import Any

import click
import msgpack

from kvmesh.agent.keys import CONFIG, NODE, STATUS, agent_key, status_prefix
from kvmesh.agent.revisions import EXPIRED_TTL_MS, REVISION
from kvmesh.cli.common import KvGroup, emit, fail, run_client
from kvmesh.cli.member_rest_options import rest_fields, rest_options
from kvstore import (
    CurveError,
    KvStoreClient,
    Value,
    client_curve,
    load_public_key,
    membership,
    next_version,
)

ROLE_CHOICES = ("peer", "operator", "reader")
UNKNOWN = "?"
# What `member remove --purge` retires besides the record: the node's keys under these.
PURGED_PREFIXES = (CONFIG, STATUS, NODE, REVISION)


@click.group("member", cls=KvGroup)
def member_group() -> None:
    """Admit, remove and list the mesh's members (operator key required to change them)."""


def _operator_name() -> str:
    """Who is adding: the local user and the fingerprint of the client key in use."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    try:
        curve = client_curve()
    except (CurveError, OSError):
        curve = None
    return f"{user} ({curve.fingerprint if curve is not None else 'plaintext'})"


def _current(client: KvStoreClient, name: str) -> tuple[Value | None, membership.Member | None]:
    key = membership.member_key(name)
    value = client.get([key]).get(key)
    if value is None or not value.value:
        return value, None
    try:
        return value, membership.decode_member(name, value.value)
    except membership.MemberError as exc:
        fail(f"{exc}; fix or remove it by hand")


def _write(client: KvStoreClient, member: membership.Member, current: Value | None) -> int:
    key = membership.member_key(member.name)
    sent, reason = client.set_key(key, membership.encode_member(member),
                                  version=next_version(key, current),
                                  originator_id="kvmesh-member")
    if reason is not None:
        fail(f"{key}: not applied ({reason})")
    return int(sent.version)


@member_group.command("add")
@click.argument("name")
@click.option("--key", "key_file", required=True, metavar="PUB.key",
              help="The member's Curve public key file (as `kvmesh keys generate` writes it).")
@click.option("--address", default=None, metavar="CMD_URL[,PUB_URL]",
              help="Where the node listens (required for role peer).")
@click.option("--peer", "peers", multiple=True, metavar="N",
              help="A node that peers with the new member (repeatable).")
@click.option("--role", type=click.Choice(ROLE_CHOICES), default="peer", show_default=True,
              help="peer: a node; operator: may write; reader: reads only.")
@rest_options
def member_add(name: str, key_file: str, address: str | None, peers: Sequence[str],
               role: str, rest_url: str | None, rest_cert: str | None,
               token_file: str | None) -> None:
    """Admit NAME: write member/NAME (its key, role, address, peers, who added it, when)."""
    try:
        membership.check_name(name)
        for peer in peers:
            membership.check_name(peer)
        key = load_public_key(key_file).decode()
        if address is None and role == "peer":
            raise membership.MemberError("--address CMD_URL[,PUB_URL] is required for a peer")
        cmd_url, pub_url = membership.parse_address(address) if address is not None else ("", "")
    except (membership.MemberError, CurveError) as exc:
        fail(f"member add {name}: {exc}", code=2)
    if name in peers:
        fail(f"member add {name}: --peer names the member itself", code=2)
    member = membership.Member(
        name=name, key=key, role=role, cmd_url=cmd_url, pub_url=pub_url,
        peers=tuple(dict.fromkeys(peers)), added_by=_operator_name(),
        added_at=int(time.time()), state=membership.ACTIVE,
        extra=rest_fields(rest_url, rest_cert, token_file))

    def action(client: KvStoreClient) -> tuple[int, str]:
        value, existing = _current(client, name)
        if existing is not None and not existing.active:
            fail(f"member add {name}: {name} was removed, and removal is final: admit the host "
                 "under a new name (a new key for a member: kvmesh member rotate)")
        if existing is not None and existing.key != key and existing.active:
            fail(f"member add {name}: {name} is already a member with another key "
                 f"({existing.fingerprint}); to give it a new key: kvmesh member rotate")
        view = _view(client)
        for other in view.active():
            if other.name != name and other.key == key:
                fail(f"member add {name}: this key is already member {other.name!r}")
        verb = "updated" if existing is not None and existing.active else "added"
        return _write(client, member, value), verb

    version, verb = run_client(action)
    emit({"key": membership.member_key(name), "version": version, "member": member.to_map()},
         f"member {name} {verb} (role {role}, key {member.fingerprint}, version {version})")


@member_group.command("rotate")
@click.argument("name")
@click.option("--key", "key_file", required=True, metavar="NEW.key",
              help="The member's new Curve public key file.")
def member_rotate(name: str, key_file: str) -> None:
    """Give NAME a new key: a newer member/NAME with the new key; the old one is revoked for
    good (every node refuses it, whatever its authorized-keys directory says). Restart the node
    with the new secret key after this."""
    try:
        membership.check_name(name)
        key = load_public_key(key_file).decode()
    except (membership.MemberError, CurveError) as exc:
        fail(f"member rotate {name}: {exc}", code=2)

    def action(client: KvStoreClient) -> int:
        value, existing = _current(client, name)
        if existing is None or not existing.active:
            fail(f"member rotate {name}: no such active member")
        if existing.key == key:
            fail(f"member rotate {name}: that is its key already")
        for other in _view(client).members.values():
            if key == other.key or key in other.retired_keys:
                fail(f"member rotate {name}: that key is (or was) member {other.name!r}'s")
        rotated = dataclasses.replace(
            existing, key=key, retired_keys=(*existing.retired_keys, existing.key))
        return _write(client, rotated, value)

    version = run_client(action)
    emit({"key": membership.member_key(name), "version": version},
         f"member {name} has a new key (version {version}); restart it with the new secret key")


@member_group.command("remove")
@click.argument("name")
@click.option("--purge", is_flag=True,
              help="Also retire the node's config/, status/, node/ and revision/ keys.")
def member_remove(name: str, purge: bool) -> None:
    """Revoke NAME: a newer member/NAME with state "removed" (every node drops its key)."""
    try:
        membership.check_name(name)
    except membership.MemberError as exc:
        fail(f"member remove: {exc}", code=2)

    def action(client: KvStoreClient) -> tuple[int | None, int]:
        value, existing = _current(client, name)
        if existing is None:
            fail(f"member remove {name}: no such member")
        version = None
        if existing.active:
            removed = dataclasses.replace(existing, state=membership.REMOVED)
            version = _write(client, removed, value)
        return version, _purge(client, name) if purge else 0

    version, purged = run_client(action)
    text = (f"member {name} removed (version {version})" if version is not None
            else f"member {name} was already removed")
    if purge:
        text += f"; {purged} key(s) retired"
    emit({"key": membership.member_key(name), "version": version, "purged": purged}, text)


def _purge(client: KvStoreClient, name: str) -> int:
    """Retire `name`'s keys under PURGED_PREFIXES: tombstones that expire, as revisions past
    the limit are (the node is gone: nothing will ever read or rewrite them)."""
    tombstones: dict[str, Value] = {}
    for prefix in PURGED_PREFIXES:
        for key, value in client.dump(prefix=f"{prefix}{name}/").items():
            if value.value:
                tombstones[key] = Value(version=next_version(key, value),
                                        originator_id="kvmesh-member", value=b"",
                                        ttl_ms=EXPIRED_TTL_MS, ttl_version=0)
    if tombstones:
        refused = client.set(tombstones)
        if refused:
            key, reason = next(iter(sorted(refused.items())))
            fail(f"member remove {name} --purge: {len(refused)} key(s) not retired, e.g. "
                 f"{key}: {reason}")
    return len(tombstones)


def _view(client: KvStoreClient) -> membership.MemberView:
    values = client.dump(prefix=membership.MEMBER_PREFIX)
    return membership.MemberView.from_values((key, value.value) for key, value in values.items())


def _decode(raw: bytes | None) -> dict[str, Any]:
    if not raw:
        return {}
    try:
        data = msgpack.unpackb(raw, raw=False)
    except Exception:
        return {}
    return data if isinstance(data, dict) else {}


def _last_seen(name: str, agent: Mapping[str, Any],
               statuses: Mapping[str, Value]) -> tuple[float | None, str]:
    """When the node was last heard of, and from what: its agent record's "time" if it has
    one, else the newest "time" of its agent's status records."""
    if isinstance(agent.get("time"), int | float):
        return float(agent["time"]), agent_key(name)
    times = [t for value in statuses.values()
             if isinstance(t := _decode(value.value).get("time"), int | float)]
    return (max(times), status_prefix(name)) if times else (None, "")


def _row(member: membership.Member, agent_value: Value | None,
         statuses: Mapping[str, Value]) -> dict[str, Any]:
    agent = _decode(agent_value.value if agent_value is not None else None)
    seen, source = _last_seen(member.name, agent, statuses)
    return {
        "name": member.name, "fingerprint": member.fingerprint, "role": member.role,
        "address": ",".join(u for u in (member.cmd_url, member.pub_url) if u),
        "peers": list(member.peers), "added_by": member.added_by, "added_at": member.added_at,
        "state": member.state,
        "version": str(agent.get("version", UNKNOWN)),
        "protocol": agent.get("protocol", UNKNOWN),
        "last_seen": seen, "last_seen_from": source,
    }


def _when(seconds: float | None) -> str:
    if seconds is None:
        return UNKNOWN
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


@member_group.command("list")
def member_list() -> None:
    """Every member: name, key fingerprint, role, address, peers, added by, when, state, the
    node's software version and when it was last seen."""

    def action(client: KvStoreClient) -> tuple[membership.MemberView, list[dict[str, Any]]]:
        view = _view(client)
        names = sorted(view.members)
        agents = client.get([agent_key(n) for n in names])
        statuses = client.dump(prefix=STATUS)
        rows = []
        for name in names:
            mine = {k: v for k, v in statuses.items() if k.startswith(status_prefix(name))}
            rows.append(_row(view.members[name], agents.get(agent_key(name)), mine))
        return view, rows

    view, rows = run_client(action)
    header = ("NAME", "FINGERPRINT", "ROLE", "ADDRESS", "PEERS", "ADDED BY", "ADDED", "STATE",
              "VERSION", "LAST SEEN")
    table = [header] + [
        (r["name"], r["fingerprint"], r["role"], r["address"] or "-",
         ",".join(r["peers"]) or "-", r["added_by"], _when(r["added_at"]), r["state"],
         r["version"], _when(r["last_seen"])) for r in rows]
    widths = [max(len(str(row[i])) for row in table) for i in range(len(header))]
    text = "\n".join("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
                     for row in table)
    for problem in view.invalid:
        text += f"\n(ignored: {problem})"
    emit({"members": rows, "invalid": list(view.invalid)}, text)


def register(group: click.Group) -> None:
    group.add_command(member_group)


__all__ = ["register"]

"""The membership core (kvstore/membership.py) and its authorisation rules (kvstore/authz.py),
without sockets."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import msgpack
import pytest
import zmq

from kvstore import stats
from kvstore.authz import (
    MEMBER_WRITE,
    OPERATOR,
    PEER,
    READER,
    REVOKED,
    REVOKED_KEY,
    UNKNOWN_KEY,
    Identity,
    authorize,
)
from kvstore.gen.kvstore_thrift.ttypes import Command, KeySetParams, Request, Value
from kvstore.membership import (
    ACTIVE,
    REMOVED,
    Member,
    MemberError,
    MemberView,
    decode_member,
    drop_readmissions,
    encode_member,
    key_fingerprint,
    key_table,
    member_key,
    parse_address,
    plan_peers,
)


def new_key() -> str:
    return zmq.curve_keypair()[0].decode()


def member(name: str, peers: tuple[str, ...] = (), state: str = ACTIVE, role: str = PEER,
           key: str | None = None, port: int = 7000) -> Member:
    return Member(name=name, key=key or new_key(), role=role,
                  cmd_url=f"tcp://10.0.0.1:{port}", pub_url=f"tcp://10.0.0.1:{port + 1}",
                  peers=peers, added_by="op", added_at=1700000000, state=state)


def view(*members: Member) -> MemberView:
    return MemberView.from_values((member_key(m.name), encode_member(m)) for m in members)


def test_a_record_round_trips_and_keeps_the_shared_fields() -> None:
    m = Member(**{**member("h4", ("h1", "h2")).__dict__,
                  "extra": {"rest_url": "https://h4:8443", "rest_cert_sha256": "ab" * 32}})
    raw = encode_member(m)
    assert decode_member("h4", raw) == m
    fields = msgpack.unpackb(raw)
    assert set(fields) == {"name", "key", "role", "cmd_url", "pub_url", "peers", "added_by",
                           "added_at", "state", "rest_url", "rest_cert_sha256"}


@pytest.mark.parametrize(("raw", "error"), [
    (b"\xc1", "not msgpack"),
    (msgpack.packb([1, 2]), "not a map"),
    (msgpack.packb({"name": "h4"}), "field 'key'"),
])
def test_a_bad_record_is_refused_with_what_is_wrong(raw: bytes, error: str) -> None:
    with pytest.raises(MemberError, match=error):
        decode_member("h4", raw)


def test_a_record_must_name_its_key_and_hold_a_curve_key() -> None:
    good = member("h4").to_map()
    with pytest.raises(MemberError, match="names 'h5'"):
        decode_member("h4", msgpack.packb({**good, "name": "h5"}))
    with pytest.raises(MemberError, match="not a CurveZMQ public key"):
        decode_member("h4", msgpack.packb({**good, "key": "~" * 40}))
    bad = MemberView.from_values([(member_key("h4"), msgpack.packb({**good, "role": "root"}))])
    assert bad.members == {} and "unknown role" in bad.invalid[0]


@pytest.mark.parametrize("spec", ["", "h4:7000", "tcp://h4", "tcp://:7000", "tcp://h4:0",
                                  "tcp://h4:70000", "http://h4:7000", "tcp://h4:1,nope",
                                  "tcp://h4:1,tcp://h4:2,tcp://h4:3"])
def test_an_address_that_does_not_parse_is_refused(spec: str) -> None:
    with pytest.raises(MemberError):
        parse_address(spec)


def test_addresses_parse() -> None:
    assert parse_address("tcp://10.0.0.4:60002") == ("tcp://10.0.0.4:60002", "")
    assert parse_address("tcp://[::1]:1,tcp://[::1]:2") == ("tcp://[::1]:1", "tcp://[::1]:2")


def test_active_keys_are_accepted_and_removed_keys_revoked() -> None:
    h4, op, gone = member("h4"), member("alice", role=OPERATOR), member("h5", state=REMOVED)
    keys = view(h4, op, gone).keys()
    assert keys[h4.key.encode()] == Identity(PEER, "h4", h4.fingerprint)
    assert keys[op.key.encode()] == Identity(OPERATOR, None, op.fingerprint)
    assert gone.key.encode() not in keys
    assert view(h4, op, gone).revoked() == {gone.key.encode()}
    # The key of a removed member re-admitted under another name is not revoked.
    again = member("h6", key=gone.key)
    assert view(gone, again).revoked() == frozenset()


def test_a_rotated_key_is_revoked_for_good_and_round_trips() -> None:
    old = member("h2")
    rotated = dataclasses.replace(old, key=new_key(), retired_keys=(old.key,))
    assert decode_member("h2", encode_member(rotated)) == rotated
    members = view(rotated)
    assert old.key.encode() in members.revoked()
    accepted = members.keys()
    assert rotated.key.encode() in accepted and old.key.encode() not in accepted
    with pytest.raises(MemberError, match="retired_keys"):
        decode_member("h2", msgpack.packb({**rotated.to_map(), "retired_keys": "x"}))


def test_peerings_follow_the_records_both_ways() -> None:
    records = view(member("h1"), member("h2"), member("h4", ("h2",), port=7004),
                   member("rd", ("h2",), role=READER))
    assert records.peerings("h2") == {"h4": ("tcp://10.0.0.1:7004", "tcp://10.0.0.1:7005")}
    assert set(records.peerings("h4")) == {"h2"}  # its own record names h2
    assert records.peerings("h1") == {}


def test_the_reconciler_adds_removes_and_drops_removed_peers() -> None:
    h4 = member("h4", ("h2",), port=7004)
    address = (h4.cmd_url, h4.pub_url)
    plan = plan_peers("h2", view(h4), {"h1": ("tcp://a:1", "")}, managed=())
    assert plan.add == {"h4": address} and plan.remove == ()
    # Already there (configured by hand): left alone.
    assert plan_peers("h2", view(h4), {"h4": address}, managed=()).add == {}
    # The record no longer names h2: the peering the records made goes, a configured one stays.
    moved = member("h4", ("h3",), key=h4.key, port=7004)
    assert plan_peers("h2", view(moved), {"h4": address}, managed={"h4"}).remove == ("h4",)
    assert plan_peers("h2", view(moved), {"h4": address}, managed=()).remove == ()
    # Removed: dropped whoever added it.
    removed = member("h4", ("h2",), key=h4.key, state=REMOVED)
    assert plan_peers("h2", view(removed), {"h4": address}, managed=()).remove == ("h4",)
    # Its address changed in the record: replaced.
    elsewhere = member("h4", ("h2",), key=h4.key, port=9000)
    assert plan_peers("h2", view(elsewhere), {"h4": address},
                      managed={"h4"}).add == {"h4": ("tcp://10.0.0.1:9000",
                                                     "tcp://10.0.0.1:9001")}


def key_set(key: str, node_ids: list[str] | None = None) -> Request:
    return Request(cmd=Command.KEY_SET, key_set=KeySetParams(
        key_vals={key: Value(version=1, originator_id="x", value=b"v", ttl_ms=-1)},
        node_ids=node_ids or []))


@pytest.mark.parametrize(("identity", "node_ids", "refused"), [
    (Identity(OPERATOR, None, "op"), None, None),
    (Identity(OPERATOR, "h2", "agent"), None, MEMBER_WRITE),  # a node's own agent
    (Identity(PEER, "h3", "h3"), None, MEMBER_WRITE),  # a peer writing one itself
    (Identity(PEER, "h3", "h3"), ["h1", "h3"], None),  # a peer relaying one (flood path)
    (Identity(READER, None, "rd"), None, MEMBER_WRITE),
    (Identity(REVOKED, None, "gone"), ["h4"], REVOKED_KEY),  # a removed node's flood
])
def test_only_an_operator_writes_members(identity: Identity, node_ids: list[str] | None,
                                         refused: str | None) -> None:
    assert authorize(identity, key_set("member/h9", node_ids)).refused == refused


def test_a_removed_nodes_keys_may_be_retired_by_an_operator_only() -> None:
    op = Identity(OPERATOR, None, "op")
    request = key_set("status/h4/linux/x")
    assert authorize(op, request).refused is not None
    assert authorize(op, request, retired=frozenset({"h4"})).refused is None
    assert authorize(Identity(READER, None, "rd"), request,
                     retired=frozenset({"h4"})).refused is not None


def test_the_refusals_are_declared_counters() -> None:
    for reason in (MEMBER_WRITE, REVOKED_KEY):
        assert stats.lookup(stats.AUTH_REFUSED(reason)) is not None


def test_a_removed_record_revokes_a_key_the_directory_still_lists(tmp_path: Path) -> None:
    from kvstore.curve import NodeSecurity, generate, load_public_key

    keys, auth = tmp_path / "keys", tmp_path / "auth"
    for name in ("h1", "h4", "op"):
        generate(name, keys)
    (auth / "peer").mkdir(parents=True)
    (auth / "peer" / "h4.key").write_bytes((keys / "h4.key").read_bytes())
    security = NodeSecurity(str(keys / "h1.key_secret"), str(auth), "h1")
    h4 = load_public_key(str(keys / "h4.key"))
    assert security.identity(h4) == Identity(PEER, "h4", key_fingerprint(h4))
    gone = member("h4", key=h4.decode(), state=REMOVED)
    assert security.set_members(view(gone))
    assert security.identity(h4) == Identity(REVOKED, None, key_fingerprint(h4))
    assert security.peer_key("h4") is None
    assert not security.callback("kvmesh", h4)
    assert security.counters()[stats.AUTH_REFUSED(REVOKED_KEY)] == 1
    # An active record admits a key no directory lists, as a peer named after its record.
    op = load_public_key(str(keys / "op.key"))
    assert security.set_members(view(gone, member("alice", role=OPERATOR, key=op.decode())))
    assert security.callback("kvmesh", op)
    assert security.identity(op) == Identity(OPERATOR, None, key_fingerprint(op))
    # The node's own key is never revoked on itself.
    own = load_public_key(str(keys / "h1.key"))
    security.set_members(view(member("h1", key=own.decode(), state=REMOVED)))
    assert security.identity(own) == Identity(OPERATOR, "h1", security.key_pair.fingerprint)


def test_the_zap_decision_is_the_key_tables() -> None:
    listed, gone, own = new_key().encode(), member("h5", state=REMOVED), new_key().encode()
    directory = {listed: Identity(PEER, "h2", "fp"), gone.key.encode(): Identity(PEER, "h5", "x")}
    table = key_table(directory, view(gone, member("h4")), (own, Identity(OPERATOR, "h1", "o")))
    assert table.admit(listed) is None and table.admit(own) is None
    assert table.admit(gone.key.encode()) == REVOKED_KEY  # listed, but its record says removed
    assert table.admit(new_key().encode()) == UNKNOWN_KEY
    assert len(table.accepted) == 3  # h2 (directory), h4 (record), own


def test_removal_is_final_a_record_re_admitting_a_removed_member_is_dropped() -> None:
    gone, kept = member("h4", state=REMOVED), member("h5")
    held = {member_key("h4"): encode_member(gone), member_key("h5"): encode_member(kept)}
    again = dataclasses.replace(gone, state=ACTIVE)
    moved = dataclasses.replace(kept, cmd_url="tcp://10.0.0.9:7000")
    sent = {member_key("h4"): Value(value=encode_member(again), version=9),
            member_key("h5"): Value(value=encode_member(moved), version=2),
            member_key("h6"): Value(value=encode_member(member("h6")), version=1),
            "config/h4/x": Value(value=b"x", version=1)}
    assert drop_readmissions(held.get, sent) == [member_key("h4")]
    # An active member's update, a new member and other keys merge as usual.
    assert set(sent) == {member_key("h5"), member_key("h6"), "config/h4/x"}
    # A newer "removed" record of a removed member is no re-admission.
    again_removed = {member_key("h4"): Value(value=encode_member(gone), version=10)}
    assert drop_readmissions(held.get, again_removed) == []

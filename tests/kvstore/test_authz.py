"""kvstore.authz: the authorisation decision as a pure function, without sockets."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kvstore.authz import (
    FOREIGN_NODE_KEY,
    INSECURE_IDENTITY,
    OPERATOR,
    PEER,
    PEER_ADMIN,
    READER,
    READER_WRITE,
    ROLES,
    UNKNOWN_KEY,
    Identity,
    authorize,
    owner_of,
)
from kvstore.gen.kvstore_thrift.ttypes import (
    Command,
    KeyGetParams,
    KeySetParams,
    PeerAddParams,
    PeerSpec,
    Request,
    Value,
)

READS = [Command.KEY_GET, Command.KEY_DUMP, Command.HASH_DUMP, Command.PEER_DUMP,
         Command.COUNTERS_GET, Command.DIGEST_GET, Command.NODE_INFO]
WRITES = [Command.KEY_SET, Command.PEER_ADD, Command.PEER_DEL]


def key_set(*keys: str, node_ids: list[str] | None = None) -> Request:
    return Request(cmd=Command.KEY_SET, key_set=KeySetParams(
        key_vals={k: Value(1, "o", b"v", 0, 0) for k in keys}, node_ids=node_ids or []))


def test_owner_of_node_owned_prefixes() -> None:
    assert owner_of("status/n1/linux/x") == "n1"
    assert owner_of("node/n2/agent") == "n2"
    assert owner_of("status/") == ""
    assert owner_of("config/n1/x") is None
    assert owner_of("statusx/n1") is None


def test_unknown_or_revoked_key_is_refused() -> None:
    decision = authorize(None, Request(cmd=Command.NODE_INFO))
    assert decision.refused == UNKNOWN_KEY and not decision.allowed
    assert authorize(Identity("admin"), Request(cmd=Command.NODE_INFO)).refused == UNKNOWN_KEY


def test_reader_reads_but_never_writes() -> None:
    reader = Identity(READER, "n1", "fp")
    for cmd in READS:
        assert authorize(reader, Request(cmd=cmd)).allowed
    for cmd in WRITES:
        assert authorize(reader, Request(cmd=cmd)).refused == READER_WRITE
    # Not even its own node's keys: binding does not grant writing.
    assert authorize(reader, key_set("status/n1/x")).refused == READER_WRITE


def test_node_owned_keys_only_from_a_key_bound_to_that_node() -> None:
    unbound = Identity(OPERATOR)
    agent1 = Identity(OPERATOR, "n1")
    assert authorize(unbound, key_set("config/n1/x")).allowed
    assert authorize(unbound, key_set("status/n1/x")).refused == FOREIGN_NODE_KEY
    assert authorize(agent1, key_set("status/n1/x", "node/n1/agent")).allowed
    assert authorize(agent1, key_set("status/n2/x")).refused == FOREIGN_NODE_KEY
    # One foreign key refuses the whole request (nothing of it is stored).
    assert authorize(agent1, key_set("status/n1/x", "node/n2/agent")).refused == FOREIGN_NODE_KEY


def test_only_peers_are_trusted_with_the_flood_path() -> None:
    request = key_set("k", node_ids=["b"])
    assert authorize(Identity(PEER, "b"), request).trust_flood_path
    assert not authorize(Identity(OPERATOR), request).trust_flood_path
    assert not authorize(Identity(OPERATOR, "b"), request).trust_flood_path
    # Peers relay every node's keys, status/ included.
    assert authorize(Identity(PEER, "b"), key_set("status/c/x")).allowed


def test_peers_do_not_manage_peers() -> None:
    add = Request(cmd=Command.PEER_ADD,
                  peer_add=PeerAddParams(peers={"x": PeerSpec(cmd_url="tcp://1.2.3.4:5")}))
    assert authorize(Identity(PEER, "b"), add).refused == PEER_ADMIN
    assert authorize(Identity(OPERATOR), add).allowed


def test_insecure_identity_is_todays_behaviour() -> None:
    decision = authorize(INSECURE_IDENTITY, key_set("status/n9/x", node_ids=["b"]))
    assert decision.allowed and decision.trust_flood_path


names = st.text(alphabet="abn12/", min_size=0, max_size=8)
keys = st.one_of(
    st.builds(lambda p, n, r: f"{p}{n}/{r}", st.sampled_from(["status/", "node/", "config/", ""]),
              names, names),
    names,
)
identities = st.builds(Identity, st.sampled_from([*ROLES, "bogus"]),
                       st.one_of(st.none(), names), st.just("fp"))
commands = st.sampled_from(READS + WRITES + [99])


@given(identities, commands, st.lists(keys, max_size=5), st.lists(names, max_size=3))
def test_decision_properties(identity: Identity, cmd: int, key_list: list[str],
                             node_ids: list[str]) -> None:
    request = Request(cmd=cmd, key_get=KeyGetParams(keys=key_list))
    if cmd == Command.KEY_SET:
        request = key_set(*key_list, node_ids=node_ids)
    decision = authorize(identity, request)
    # Only a peer's (and plaintext mode's) flood path is ever trusted.
    if decision.trust_flood_path:
        assert identity.role == PEER or identity.insecure
    # A reader never gets a write through; an unknown role gets nothing.
    if identity.role == READER and cmd in WRITES:
        assert not decision.allowed
    if identity.role not in ROLES:
        assert decision.refused == UNKNOWN_KEY
    # A client's write of a node-owned key goes through only when the key is bound to that node.
    if cmd == Command.KEY_SET and decision.allowed and identity.role != PEER:
        for key in key_list:
            owner = owner_of(key)
            assert owner is None or owner == identity.node
    # Reads are never refused to a known role.
    if cmd in READS and identity.role in ROLES:
        assert decision.allowed
    # Deterministic: the same question, the same answer.
    assert authorize(identity, request) == decision

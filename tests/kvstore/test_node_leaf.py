"""Leaf nodes in real node processes (docs/kvstore.md, "Leaf nodes"): a leaf is never a transit
node, a leaf at the edge holds exactly its share (what its filters match plus what it
originates), and it converges after partitions and restarts, keeping only its share on disk."""

from __future__ import annotations

import sqlite3
from functools import partial
from pathlib import Path

from kvstore import wire
from kvstore.client import KvStoreRequestError, make_value
from kvstore.filters import leaf_filter
from kvstore.gen.kvstore_thrift.ttypes import (
    Command,
    DigestParams,
    KeySetParams,
    PeerState,
    Request,
)
from kvstore.storage import DB_FILE
from kvstore.value import TTL_INFINITY, Value
from tests.kvstore.conftest import Mesh, Node
from tests.kvstore.test_cli_kvstore import cli
from tests.util import wait_until

PREFIXES = ["config/leaf/", "status/leaf/"]
SHARE = leaf_filter("leaf", PREFIXES, ["ops"])


def _leaf(mesh: Mesh, **config: object) -> Node:
    return mesh.allocate(
        "leaf", leaf=True, key_prefix_filters=PREFIXES, key_originator_filters=["ops"], **config
    )


def _write_mixed(node: Node, tag: str, count: int = 40) -> dict[str, Value]:
    """Keys inside and outside the leaf's share, written on `node`; returns them."""
    kv: dict[str, Value] = {}
    for i in range(count):
        kv[f"config/leaf/{tag}{i}"] = make_value(b"mine", version=1, originator_id="a")
        kv[f"config/other/{tag}{i}"] = make_value(b"theirs", version=1, originator_id="a")
    kv[f"misc/{tag}-by-ops"] = make_value(b"ops", version=1, originator_id="ops")
    with node.client() as client:
        client.set(kv)
    return kv


def _keys(node: Node) -> set[str]:
    with node.client() as client:
        return set(client.dump())


def _holds_exactly_its_share(leaf: Node, full: Node) -> bool:
    with full.client() as client:
        everything = client.dump()
    return _keys(leaf) == set(SHARE.select(everything))


def _counters(node: Node) -> dict[str, int]:
    with node.client() as client:
        return client.counters()


def test_a_leaf_takes_at_most_two_peers(mesh: Mesh) -> None:
    a, c, d = mesh.allocate("a"), mesh.allocate("c"), mesh.allocate("d")
    leaf = _leaf(mesh)
    mesh.start(leaf, peers=[a, c, d], wait=False)
    assert leaf.proc is not None
    assert leaf.proc.wait(timeout=30) == 2
    assert "takes at most 2" in leaf.log() and "transit" in leaf.log()
    # Started with two peers (dual-homed), a third one is refused at PEER_ADD (nothing added).
    leaf.peers.clear()
    mesh.start(leaf, peers=[a, c])
    mesh.start(a, peers=[leaf])
    with leaf.client() as client:
        try:
            client.add_peer("d", d.cmd_url)
        except KvStoreRequestError as exc:
            assert exc.code == "BAD_ARGUMENT" and "never be a transit node" in str(exc)
        else:
            raise AssertionError("a leaf accepted a third peer")
        assert set(client.peers()) == {"a", "c"}
    assert _counters(leaf)["kvstore.leaf.transit_refused"] == 1


def _synced(node: Node, peer: str) -> bool:
    with node.client() as client:
        return client.peers()[peer].state == PeerState.INITIALIZED


def _holds(node: Node, key: str) -> bool:
    with node.client() as client:
        return key in client.get([key])


def test_a_dual_homed_leaf_keeps_its_share_with_either_core_down(mesh: Mesh) -> None:
    """A leaf with two core peers floods and syncs with both, never carries a flood from one to
    the other, and keeps getting its share while either core is down."""
    a, b = mesh.allocate("a"), mesh.allocate("b")  # two cores, not peered with each other
    leaf = _leaf(mesh)
    mesh.start(a, peers=[leaf], wait=False)
    mesh.start(b, peers=[leaf], wait=False)
    mesh.start(leaf, peers=[a, b])
    mesh.wait_ready(a)
    mesh.wait_ready(b)
    for node, peers in ((a, ["leaf"]), (b, ["leaf"]), (leaf, ["a", "b"])):
        for peer in peers:  # every sync done: only floods move keys from here
            wait_until(partial(_synced, node, peer), timeout=20,
                       message=f"{node.name} synced with {peer}")
    # What the leaf's agent sets on it goes to both cores.
    with leaf.client() as client:
        client.set({"status/leaf/up": make_value(b"1", version=1, originator_id="leaf")})
    wait_until(lambda: _holds(a, "status/leaf/up") and _holds(b, "status/leaf/up"),
               timeout=20, message="the leaf flooded both cores")
    # A share key flooded by a reaches the leaf and stops there: a marker the leaf sets after
    # it (same socket to b, in order) arrives at b, the key from a never does.
    with a.client() as client:
        client.set({"config/leaf/from-a": make_value(b"x", version=1, originator_id="ops")})
    wait_until(lambda: _holds(leaf, "config/leaf/from-a"), timeout=20, message="a -> leaf")
    with leaf.client() as client:
        client.set({"status/leaf/marker": make_value(b"m", version=1, originator_id="leaf")})
    wait_until(lambda: _holds(b, "status/leaf/marker"), timeout=20, message="leaf -> b")
    assert not _holds(b, "config/leaf/from-a"), "the leaf forwarded a's flood to b"
    # Either core down: the other still brings the leaf its share.
    for down, up, tag in ((a, b, "a-down"), (b, a, "b-down")):
        down.kill()
        with up.client() as client:
            client.set({f"config/leaf/{tag}": make_value(b"y", version=1, originator_id="ops")})
        wait_until(partial(_holds, leaf, f"config/leaf/{tag}"), timeout=20,
                   message=f"share while {tag}")
        mesh.start(down, peers=[leaf])
        mesh.wait_ready(down)


def test_an_edge_leaf_holds_exactly_its_share(mesh: Mesh) -> None:
    a, b = mesh.chain(["a", "b"])
    _write_mixed(a, "before")
    leaf = _leaf(mesh)
    with b.client() as client:  # peered on both sides, as every peering
        client.add_peer("leaf", leaf.cmd_url)
    mesh.start(leaf, peers=[b])
    mesh.wait_ready(leaf)
    wait_until(lambda: _holds_exactly_its_share(leaf, a), timeout=20, message="leaf synced")
    # Floods: b sends the leaf only its share, so the leaf refuses nothing.
    with b.client() as client:
        wait_until(lambda: client.peers()["leaf"].state == PeerState.INITIALIZED, timeout=20)
    _write_mixed(a, "after")
    wait_until(lambda: _holds_exactly_its_share(leaf, a), timeout=20, message="leaf flooded")
    assert _counters(leaf).get("kvstore.leaf.refused_key_vals", 0) == 0
    assert _counters(b)["kvstore.leaf.flood_skipped_key_vals"] >= 40
    with b.client() as client:
        spec = client.peers()["leaf"]
        assert spec.filters is not None and sorted(spec.filters.key_prefixes) == PREFIXES
    # What the leaf originates reaches the mesh; what is not its share is refused, per key.
    with leaf.client() as client:
        refused = client.set({
            "status/leaf/up": make_value(b"1", version=1, originator_id="agent"),
            "own/thing": make_value(b"2", version=1, originator_id="leaf"),
            "config/other/x": make_value(b"3", version=1, originator_id="cli"),
        })
        assert refused == {"config/other/x": "NO_MATCHED_KEY"}
        info = client.node_info(refresh=True)
        assert info.leaf_filters is not None
    assert _counters(leaf)["kvstore.leaf.refused_key_vals"] == 1
    wait_until(lambda: {"status/leaf/up", "own/thing"} <= _keys(a), timeout=20,
               message="the leaf's own keys on a")
    # The digest of b over the leaf's share is the leaf's digest.
    request = Request(cmd=Command.DIGEST_GET, digest=DigestParams(
        node_ids=[0], filters=SHARE.to_wire()))

    def digests_agree() -> bool:
        with b.client() as cb, leaf.client() as cl:
            theirs = cb.request(request).digest
            assert theirs is not None
            return theirs.digests == cl.digests([0])

    wait_until(digests_agree, timeout=20, message="filtered digests agree")
    # Asked on the leaf about another node, the CLI says which non-leaf node to ask.
    for command in (["status", "a"], ["values", "--node", "a"]):
        result = cli(*command, url=leaf.cmd_url, check=False)
        assert result.returncode == 2, result
        assert "is a leaf node" in result.stderr and "its peer b" in result.stderr


def test_a_leaf_converges_after_partitions_and_restarts(mesh: Mesh, tmp_path: Path) -> None:
    (b,) = mesh.chain(["b"], sync_interval_s=0.5)
    leaf = _leaf(mesh, sync_interval_s=0.5, data_dir=str(tmp_path / "leaf-data"))
    with b.client() as client:
        client.add_peer("leaf", leaf.cmd_url)
    mesh.start(leaf, peers=[b])
    _write_mixed(b, "one")
    wait_until(lambda: _holds_exactly_its_share(leaf, b), timeout=20, message="leaf synced")
    # Partition: b forgets the leaf; what is written meanwhile arrives by sync once healed.
    with b.client() as client:
        client.del_peers(["leaf"])
    _write_mixed(b, "two")
    with leaf.client() as client:
        client.set({"status/leaf/during": make_value(b"p", version=1, originator_id="agent")})
    with b.client() as client:
        client.add_peer("leaf", leaf.cmd_url)
        wait_until(lambda: client.peers()["leaf"].state == PeerState.INITIALIZED, timeout=20)
    wait_until(lambda: _holds_exactly_its_share(leaf, b), timeout=20, message="healed")
    assert "status/leaf/during" in _keys(b)
    # A restart: the leaf comes back from its disk and catches up what it missed.
    assert leaf.stop() == 0
    _assert_disk_holds_only_the_share(tmp_path / "leaf-data")
    _write_mixed(b, "three")
    mesh.start(leaf)
    mesh.wait_ready(leaf)
    wait_until(lambda: _holds_exactly_its_share(leaf, b), timeout=20, message="restarted")
    assert _counters(leaf).get("kvstore.leaf.refused_key_vals", 0) == 0
    # A missed flood (b applies a key whose path names the leaf, so it does not send it
    # there): anti-entropy over the filtered digests repairs it.
    missed = Request(cmd=Command.KEY_SET, key_set=KeySetParams(
        key_vals={"config/leaf/missed": make_value(b"m", version=1, originator_id="z")},
        solicit_response=True, node_ids=["leaf"]))
    with b.client() as client:
        assert client.request_raw(wire.encode(missed)).error is None
    wait_until(lambda: "config/leaf/missed" in _keys(leaf), timeout=20, message="repaired")
    repairs = [_counters(n).get("kvstore.anti_entropy_repairs", 0) for n in (leaf, b)]
    assert sum(repairs) >= 1
    assert leaf.stop() == 0
    _assert_disk_holds_only_the_share(tmp_path / "leaf-data")


def _assert_disk_holds_only_the_share(data_dir: Path) -> None:
    with sqlite3.connect(data_dir / DB_FILE) as db:
        rows = list(db.execute("SELECT key, originator FROM kv"))
    assert len(rows) > 40
    outside = [
        key for key, orig in rows if not SHARE.matches(key, Value(1, orig, b"", TTL_INFINITY, 0))
    ]
    assert outside == []


def test_only_the_peer_itself_can_declare_its_leaf_filters(secure_mesh: Mesh) -> None:
    """An operator claiming to be peer b with leaf filters would stop a's floods to b of
    everything else: its sender_id is ignored, and b still gets every key."""
    a, b = secure_mesh.chain(["a", "b"])
    forged = Request(cmd=Command.DIGEST_GET, digest=DigestParams(
        node_ids=[0], filters=SHARE.to_wire(), sender_id="b"))
    with a.client() as op:
        assert op.request(forged).error is None
        assert op.counters()["kvstore.auth.ignored_flood_path"] == 1
        assert op.peers()["b"].filters is None
        op.set({"config/other/k": make_value(b"v", version=1, originator_id="a")})
    wait_until(lambda: "config/other/k" in _keys(b), timeout=20, message="b got the key")

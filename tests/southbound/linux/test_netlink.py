"""NetlinkClient against the real kernel, in a namespace per test."""

from __future__ import annotations

import dataclasses
import errno

import pytest

from southbound.linux.context import KVMESH_LINK_GROUP, KVMESH_ROUTE_PROTO
from southbound.linux.errors import (
    NamespaceNotFoundError,
    NetlinkOperationError,
    OwnershipError,
    UnsupportedLinkTypeError,
    is_retriable_failure,
)
from southbound.linux.netlink import NetlinkClient
from southbound.linux.records import Route
from tests.netns import list_netns, netns_available, unique_netns_name

pytestmark = pytest.mark.netns
G = KVMESH_LINK_GROUP


@pytest.fixture
def client(ns):
    nl = NetlinkClient(ns.name)
    try:
        yield nl
    finally:
        nl.close()


def test_missing_namespace_is_an_error_and_is_not_created() -> None:
    if not netns_available():
        pytest.skip("needs root")
    name = unique_netns_name("kvlx")
    with pytest.raises(NamespaceNotFoundError, match="does not exist"):
        NetlinkClient(name)
    assert name not in list_netns()


def test_veth_pair_created_with_group_and_echoed_index(ns, client) -> None:
    created = client.create_link("va", "veth", group=G, state="up", mtu=1400,
                                 peer={"ifname": "vb", "group": G})
    link, peer = client.get_link("va"), client.get_link("vb")
    assert link is not None and link.kind == "veth" and peer is not None
    assert created is not None and (created.index, created.peer) == (link.index, peer.index)
    assert link.link == peer.index and peer.link == link.index
    assert (link.group, peer.group) == (G, G)
    assert client.get_link_by_index(link.index) == link
    assert client.get_link("nope") is None and client.get_link_by_index(99999) is None
    shown = ns.link("va")
    assert shown["mtu"] == 1400 and "UP" in shown["flags"] and shown["group"] != "default"


def test_each_supported_type_is_created_and_dumped(ns, client) -> None:
    base = client.create_link("base0", "veth", group=G, peer={"ifname": "base1", "group": G},
                              address="02:00:00:00:00:0a", mtu=1450)
    assert base is not None
    client.create_link("br0", "bridge", group=G)
    client.create_link("tp0", "tuntap", mode="tap")
    client.create_link("vx0", "vxlan", group=G, vxlan_id=42, vxlan_local="10.0.0.1",
                       vxlan_group="10.0.0.2", vxlan_port=4789, vxlan_link=base.index)
    client.create_link("mv0", "macvlan", group=G, macvlan_mode="private", link=base.index)
    links = {link.name: link for link in client.dump_links()}
    assert links["br0"].kind == "bridge"
    assert links["tp0"].kind == "tun" and links["tp0"].tap
    vxlan = links["vx0"].vxlan
    assert vxlan is not None
    assert (vxlan.vni, vxlan.local, vxlan.remote, vxlan.port, vxlan.device_index) == (
        42, "10.0.0.1", "10.0.0.2", 4789, base.index)
    assert links["mv0"].macvlan_mode == "private" and links["mv0"].link == base.index
    assert links["lo"].kind is None
    # The raw decoder agrees with iproute2 on every link.
    for name, link in links.items():
        shown = ns.link(name)
        assert (link.index, link.mtu, link.mac, link.up) == (
            shown["ifindex"], shown["mtu"], shown["address"], "UP" in shown["flags"]), name
        assert link.kind == shown.get("linkinfo", {}).get("info_kind"), name
    assert links["base0"].mac == "02:00:00:00:00:0a" and links["base0"].mtu == 1450

def test_unsupported_link_type_is_reported_cleanly(client) -> None:
    with pytest.raises(UnsupportedLinkTypeError, match="unsupported link type 'dummy'") as caught:
        client.create_link("d0", "dummy", group=G)
    assert not is_retriable_failure(caught.value)


def test_existing_name_raises_eexist(client) -> None:
    client.create_link("br0", "bridge", group=G)
    with pytest.raises(NetlinkOperationError) as caught:
        client.create_link("br0", "bridge", group=G)
    assert caught.value.code == errno.EEXIST


def test_addresses_add_and_delete_are_idempotent(ns, client) -> None:
    link = client.create_link("va", "veth", group=G, state="up", peer={"ifname": "vb"})
    assert link is not None
    assert client.add_address(link.index, "10.0.0.1/24", "add") is True
    assert client.add_address(link.index, "10.0.0.1/24", "add again") is False
    assert client.add_address(link.index, "fd00::1/64", "add v6") is True
    assert sorted(ns.addresses("va")) == ["10.0.0.1/24", "fd00::1/64"]
    dumped = {a.cidr for a in client.dump_addresses() if a.index == link.index}
    assert {"10.0.0.1/24", "fd00::1/64"} <= dumped
    assert client.delete_address(link.index, "10.0.0.1/24", "del") is True
    assert client.delete_address(link.index, "10.0.0.1/24", "del again") is False
    assert client.delete_address(99999, "10.0.0.1/24", "del on absent link") is False
    assert ns.addresses("va") == ["fd00::1/64"]


def test_links_delete_is_idempotent(ns, client) -> None:
    link = client.create_link("br0", "bridge", group=G)
    assert link is not None
    assert client.delete_link(link.index, "del") is True
    assert client.delete_link(link.index, "del again") is False
    assert "br0" not in ns.link_names()


def test_routes_add_replace_delete(ns, client) -> None:
    link = client.create_link("va", "veth", group=G, state="up", peer={"ifname": "vb",
                                                                        "state": "up"})
    assert link is not None
    client.add_address(link.index, "10.0.0.1/24", "addr")
    client.add_address(link.index, "fd00::1/64", "addr6")
    assert {"10.0.0.1/24", "fd00::1/64"} <= {a.cidr for a in client.dump_addresses()}
    p = KVMESH_ROUTE_PROTO
    via = Route(table=254, dst="10.9.0.0/16", oif=link.index, gateway="10.0.0.2", metric=0,
                scope=0, proto=p)
    big_table = Route(table=1000, dst="10.8.0.0/16", oif=link.index, gateway=None, metric=7,
                      scope=253, proto=p)
    v6 = Route(table=254, dst="fd01::/64", oif=link.index, gateway="fd00::2", metric=1024,
               scope=0, proto=p)
    for route in (via, big_table, v6):
        assert client.add_route(route, "add") is True
        assert client.add_route(route, "add again") is False
    assert set(client.dump_routes(proto=p)) == {via, big_table, v6}
    assert any(r.get("dst") == "10.8.0.0/16" for r in ns.routes("1000"))
    moved = dataclasses.replace(via, gateway="10.0.0.3")
    client.replace_route(moved, "replace")
    assert moved in client.dump_routes(proto=p) and via not in client.dump_routes(proto=p)
    conflicting = dataclasses.replace(moved, gateway="10.0.0.9")
    with pytest.raises(OwnershipError, match="different route"):
        client.add_route(conflicting, "add conflicting")
    assert client.delete_route(moved, "del") is True
    assert client.delete_route(moved, "del again") is False
    assert client.delete_route(v6, "del6") is True
    assert set(client.dump_routes(proto=p)) == {big_table}
    assert client.delete_route(big_table, "del scope link") is True  # matched whatever its scope
    assert client.dump_routes(proto=p) == []


def test_kernel_refusals_map_to_clear_non_retriable_errors(client) -> None:
    link = client.create_link("br0", "bridge", group=G)
    assert link is not None
    with pytest.raises(NetlinkOperationError, match="EINVAL") as caught:
        client.set_link(link.index, "set mtu of br0", mtu=70000)
    assert caught.value.code == errno.EINVAL
    assert not is_retriable_failure(caught.value)
    gone = Route(table=254, dst="10.6.0.0/16", oif=link.index, gateway="192.168.9.9", metric=0,
                 scope=0, proto=KVMESH_ROUTE_PROTO)
    with pytest.raises(NetlinkOperationError, match="ENETUNREACH"):
        client.add_route(gone, "add unreachable")


def test_transient_errors_are_retriable() -> None:
    assert is_retriable_failure(NetlinkOperationError("x", errno.EBUSY))
    assert is_retriable_failure(NetlinkOperationError("x", errno.ENOBUFS))
    assert is_retriable_failure(NetlinkOperationError("x", errno.EAGAIN))
    assert not is_retriable_failure(NetlinkOperationError("x", errno.EPERM))
    # A gateway on a link not up yet (docs/linux.md says so: retried, RETRYING meanwhile).
    assert is_retriable_failure(NetlinkOperationError("x", errno.ENETUNREACH))


def test_close_closes_the_event_loops_of_other_threads(ns) -> None:
    """pyroute2 keeps a loop per calling thread (kept alive for speed, see
    `_keep_thread_event_loop`) and its close() only closes the caller's; a loop left open is
    closed by the garbage collector at exit, which once printed a traceback into an agent's log
    (a chaos run fails on that)."""
    import threading

    nl = NetlinkClient(ns.name)
    loops = []

    def worker() -> None:
        nl.create_link("vt", "veth", group=G, peer={"ifname": "vu", "group": G})
        loops.append(nl._ipr.asyncore.local.event_loop)

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert loops and not loops[0].is_closed()
    nl.close()
    assert loops[0].is_closed()


def test_dumps_of_many_datagrams_read_whole(ns, client) -> None:
    """A dump comes as many datagrams (the kernel sizes them to the reader's buffer, 32 KiB at
    most), each read whole: hundreds of links with addresses and routes, every one read."""
    ns.batch([f"link add a{i} type veth peer name b{i}" for i in range(200)]
             + [f"link set {end}{i} up" for i in range(200) for end in "ab"]
             + [f"addr add 10.{i // 200}.{i % 200}.1/24 dev {'ab'[i % 2]}{i // 2}"
                for i in range(400)])
    names = {f"{end}{i}" for i in range(200) for end in "ab"}
    assert names <= {link.name for link in client.dump_links()}
    assert len([a for a in client.dump_addresses() if a.cidr.startswith("10.")]) == 400
    assert len([r for r in client.dump_routes() if r.dst.startswith("10.")]) >= 400

"""`kvmesh cluster up --isolated`: one namespace per node, veth to a bridge, never loopback."""

from __future__ import annotations

import subprocess
from functools import partial
from pathlib import Path

import networkx
import pytest

from kvmesh import cluster, netlab
from kvmesh.agent.desired import encode_config_value
from kvmesh.agent.keys import agent_leaf_prefixes, config_key, config_prefix, status_key
from kvmesh.agent.status import decode_status
from kvstore.client import make_value
from tests.netns import list_netns, netns_available
from tests.util import wait_until

needs_netns = pytest.mark.skipif(not netns_available(), reason="needs root and iproute2")


def _host_links() -> str:
    return subprocess.run(["ip", "-br", "link"], capture_output=True, text=True).stdout


def _lab_links() -> set[str]:
    return {line.split()[0].split("@")[0] for line in _host_links().splitlines()
            if line.startswith("kvh")}


def test_random_topology_is_connected_has_the_degree_and_follows_the_seed() -> None:
    names = [f"n{i}" for i in range(1, 17)]
    for degree in (2, 3, 5):
        peers = cluster.peers_of(names, "random", degree=degree, seed=7)
        graph = networkx.Graph([(a, b) for a, bs in peers.items() for b in bs])
        assert networkx.is_connected(graph) and set(graph) == set(names)
        assert min(len(p) for p in peers.values()) >= degree
        assert all(a in peers[b] for a, bs in peers.items() for b in bs)  # both sides
        assert cluster.peers_of(names, "random", degree=degree, seed=7) == peers
    assert cluster.peers_of(names, "random", seed=1) != cluster.peers_of(names, "random", seed=2)
    assert len(cluster.peers_of(["a", "b", "c"], "random", degree=5, seed=0)["a"]) == 2
    with pytest.raises(cluster.ClusterError, match="degree"):
        cluster.peers_of(names, "random", degree=1)


@pytest.mark.netns
@needs_netns
def test_isolated_cluster_talks_over_the_bridge_and_down_removes_everything(
    tmp_path: Path,
) -> None:
    run_dir = tmp_path / "run"
    state = None
    try:
        state = cluster.up(3, "chain", run_dir=run_dir, isolated=True, timeout=90)
        lab = state.isolated_lab()
        assert lab is not None
        for name, info in state.nodes.items():
            address = lab.address(name)
            assert address.startswith("198.18.") and address in info.cmd_url
            assert info.netns in list_netns()
        # n1 and n3 are not peers: the key goes n1 -> n2 -> n3 over the bridge.
        with state.client("n1") as client:
            client.set({"k": make_value(b"v", version=1, originator_id="t")})

        def on_n3() -> bool:
            with state.client("n3") as client:
                return "k" in client.get(["k"])

        wait_until(on_n3, timeout=20, message="key flooded to n3")
        # n2's peer connections are between namespace addresses, none over loopback.
        n2 = state.nodes["n2"]
        sockets = subprocess.run(["ip", "netns", "exec", str(n2.netns), "ss", "-Htn", "state",
                                  "established"], capture_output=True, text=True).stdout
        peer_ports = {f":{cluster.ISOLATED_CMD_PORT}"}
        to_peers = [line.split()[-1] for line in sockets.splitlines()
                    if any(line.split()[-1].endswith(p) for p in peer_ports)]
        assert {lab.address("n1"), lab.address("n3")} <= {a.rsplit(":", 1)[0] for a in to_peers}
        # The agent runs in the node's namespace and answers on its address.
        assert str(n2.http).startswith(lab.address("n2"))
        assert cluster._agent_answers(state, "n2")
        assert lab.host_link in _host_links()
    finally:
        cluster.down(run_dir)
    assert state is not None
    lab = state.isolated_lab()
    assert lab is not None
    left = set(list_netns()) & {*lab.namespaces.values(), lab.bridge_ns}
    assert not left, left
    assert lab.host_link not in _host_links()


@pytest.mark.netns
@needs_netns
def test_isolated_cluster_that_fails_to_start_cleans_up(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[netlab.Lab] = []

    def create_lab(nodes: list[str], tag: str | None = None) -> netlab.Lab:
        made.append(real_create_lab(nodes, tag))
        return made[-1]

    real_create_lab = netlab.create_lab
    monkeypatch.setattr(netlab, "create_lab", create_lab)
    with pytest.raises(cluster.ClusterError, match="timed out"):
        # An unknown configuration key: every node exits at once with code 2.
        cluster.up(2, "chain", run_dir=tmp_path / "run", isolated=True, agents=False,
                   timeout=3, node_config={"no_such_knob": 1})
    # This lab's pieces only: other workers' labs may come and go meanwhile.
    (lab,) = made
    assert {lab.bridge_ns, *lab.namespaces.values()} & set(list_netns()) == set()
    assert lab.host_link not in _lab_links()


@pytest.mark.netns
@needs_netns
def test_isolated_cluster_with_a_core_runs_the_other_nodes_as_leaves(tmp_path: Path) -> None:
    """4 nodes, --core 2: n1 - n2 full, n3 a leaf of n1, n4 a leaf of n2."""
    run_dir = tmp_path / "run"
    state = None
    try:
        state = cluster.up(4, "chain", run_dir=run_dir, isolated=True, core=2, timeout=90)
        saved = cluster.ClusterState.load(run_dir)
        assert saved is not None and saved.core == 2
        assert {n: i.leaf for n, i in saved.nodes.items()} == {
            "n1": False, "n2": False, "n3": True, "n4": True}
        assert cluster.status(run_dir)["core"] == 2
        # Ask the nodes themselves: a leaf has its agent's filters and one peer, a core node
        # no filters.
        for name, uplink in (("n3", "n1"), ("n4", "n2")):
            with state.client(name) as client:
                filters = client.node_info().leaf_filters
                assert filters is not None
                assert sorted(filters.key_prefixes) == sorted(agent_leaf_prefixes(name))
                assert list(client.peers()) == [uplink]
        with state.client("n1") as client:
            assert client.node_info().leaf_filters is None
            assert sorted(client.peers()) == ["n2", "n3"]
        # A config for each leaf, written on n1: n3's first, so it has passed n2 (n4's core
        # node) before n4's own config reaches n4.
        bridge = encode_config_value({"type": "bridge"})
        with state.client("n1") as n1:
            for leaf in ("n3", "n4"):
                n1.set({config_key(leaf, "linux/interface/brl"):
                        make_value(bridge, version=1, originator_id="n1")})

            def applied(leaf: str) -> bool:
                found = n1.get([status_key(leaf, "linux/interface/brl")])
                return any((decode_status(v.value) or {}).get("state") == "CONFIGURED"
                           for v in found.values())

            for leaf in ("n3", "n4"):
                wait_until(partial(applied, leaf), timeout=60,
                           message=f"{leaf}'s agent applied its config")
        with state.client("n4") as n4:
            assert config_key("n4", "linux/interface/brl") in n4.dump(config_prefix("n4"))
            assert n4.dump(config_prefix("n3")) == {}  # another leaf's config is not here
        with state.client("n2") as n2:
            assert n2.counters().get("kvstore.leaf.flood_skipped_key_vals", 0) > 0
    finally:
        cluster.down(run_dir)
    assert state is not None
    lab = state.isolated_lab()
    assert lab is not None
    assert not set(list_netns()) & {*lab.namespaces.values(), lab.bridge_ns}


@needs_netns
def test_an_attached_client_namespace_has_no_ipv6_address_to_change() -> None:
    """A browser's namespace: its link gets no IPv6 link-local address, whose arrival and DAD
    a second after the link comes up Chromium takes for a network change (ERR_NETWORK_CHANGED
    on the first page load); a node's namespace keeps its own."""
    lab = netlab.create_lab(["n1"])
    try:
        client = netlab.attach_namespace(lab, "browser")

        def inet6(namespace: str) -> str:
            return subprocess.run(["ip", "-n", namespace, "-6", "addr", "show", "dev", "eth0"],
                                  capture_output=True, text=True, check=True).stdout

        wait_until(lambda: "inet6" in inet6(lab.namespaces["n1"]), timeout=10,
                   message="the node's link-local address")
        assert "inet6" not in inet6(client)
        assert lab.address("browser") in subprocess.run(
            ["ip", "-n", client, "-4", "addr", "show", "dev", "eth0"], capture_output=True,
            text=True, check=True).stdout
    finally:
        netlab.destroy_lab(lab)

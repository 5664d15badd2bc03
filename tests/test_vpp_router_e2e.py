"""Issue 28, end to end: the router of docs/examples/vpp-router.yaml on a real isolated cluster
(KvStore nodes and agents in network namespaces of their own, each agent with the VPP and the
Linux southbounds, a VPP emulator per node in the node's namespace; real processes, ZeroMQ,
REST with TLS and tokens, vpp_papi, netlink), driven only by the operator's CLI: `kvmesh apply
-f --wait`, `kvmesh status`, `kvmesh plan`, `kvmesh resync`, removal with `apply --replace`.
The dataplane is checked through VPP's own dumps and the emulator's control channel, the Linux
side with `ip` in the node's namespace. See docs/vpp.md, "A router, end to end"."""

from __future__ import annotations

import difflib
import json
import subprocess
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest
import yaml

from tests.netns import netns_available
from tests.util import wait_until
from tests.vpp_cluster import VppCluster, by_tag, vpp_cluster

pytestmark = pytest.mark.skipif(not netns_available(), reason="needs root and iproute2")

ROUTER = Path(__file__).resolve().parent.parent / "docs" / "examples" / "vpp-router.yaml"
NODES = ("n1", "n2")
ANY_INDEX = 0xFFFFFFFF
# bond.api: BOND_API_MODE_LACP, BOND_API_LB_ALGO_L34; ipsec_types.api: IPSEC_API_SAD_FLAG_*.
BOND_LACP, LB_L34 = 5, 1
SA_ANTI_REPLAY, SA_INBOUND = 0x02, 0x40


class Router(VppCluster):
    """An isolated two-node cluster (each node, its agent and its VPP emulator in a namespace
    of their own), and the operator's CLI."""

    def ip(self, node: str, *args: str) -> str:
        """`ip` in the node's namespace (where its agent, emulator and Linux values are)."""
        done = subprocess.run(["ip", "-n", str(self.state.nodes[node].netns), *args],
                              capture_output=True, text=True, check=True, timeout=10)
        return done.stdout

    def linux(self, node: str) -> dict[str, str]:
        """What the node's namespace holds: links, addresses, routes of every table; taken once
        the kernel has finished what it does by itself when a link comes up (the duplicate
        address detection of an IPv6 link-local address, whose end adds a local route: seen
        between two listings a second apart)."""
        wait_until(lambda: not self.ip(node, "-6", "addr", "show", "tentative").strip(),
                   timeout=30, message=f"IPv6 duplicate address detection done in {node}")
        return {"links": self.ip(node, "-br", "link"), "addresses": self.ip(node, "-br", "addr"),
                "routes": self.ip(node, "route", "show", "table", "all"),
                "routes6": self.ip(node, "-6", "route", "show", "table", "all")}


@pytest.fixture(scope="module")
def router() -> Iterator[Router]:
    with vpp_cluster("kvm-rt-", len(NODES), isolated=True) as (workdir, state):
        yield Router(workdir, state)


def linux_difference(before: dict[str, str], after: dict[str, str]) -> str:
    """What changed in a namespace, as a diff of each `ip` listing that differs."""
    return "\n".join(
        line for part in before for line in difflib.unified_diff(
            before[part].splitlines(), after.get(part, "").splitlines(), part, part, lineterm="")
        if before[part] != after.get(part))


def no_status(router: Router, node: str) -> bool:
    return router.node_status(node) == {}


def protection(router: Router, node: str) -> list[tuple[int, int, list[int]]]:
    """The node's IPsec tunnel protections: (tunnel, outbound SA, inbound SAs)."""
    return [(d.tun.sw_if_index, d.tun.sa_out, list(d.tun.sa_in[:d.tun.n_sa_in]))
            for d in router.papi(node, "ipsec_tunnel_protect_dump", sw_if_index=ANY_INDEX)]


def check_n1_dataplane(router: Router) -> None:
    vpp = router.vpp("n1")
    ifs = by_tag(vpp)
    index = {name: i["sw_if_index"] for name, i in ifs.items()}
    assert set(ifs) == {"up1", "up2", "bond0", "bond0.10", "bond0.20", "gre1", "lo0"}
    assert all(i["admin_up"] for i in ifs.values())
    # The uplinks: af_packet on the veths the Linux southbound made, both members of the bond.
    assert {(d.host_if_name, d.sw_if_index) for d in router.papi("n1", "af_packet_dump")} == {
        ("up1", index["up1"]), ("up2", index["up2"])}
    (bond,) = router.papi("n1", "sw_bond_interface_dump", sw_if_index=ANY_INDEX)
    assert (bond.sw_if_index, bond.mode, bond.lb, bond.members) == (
        index["bond0"], BOND_LACP, LB_L34, 2)
    members = router.papi("n1", "sw_member_interface_dump", sw_if_index=index["bond0"])
    assert sorted(m.sw_if_index for m in members) == sorted([index["up1"], index["up2"]])
    assert ifs["bond0"]["addresses"] == ["192.0.2.1/24", "2001:db8::1/64"]
    # The VLANs of the bond, each in its VRF.
    subifs = {d.sw_if_index: d for d in router.papi("n1", "sw_interface_dump")
              if d.sw_if_index != d.sup_sw_if_index}
    for name, vlan in (("bond0.10", 10), ("bond0.20", 20)):
        details = subifs[index[name]]
        assert (details.sup_sw_if_index, details.sub_id, details.sub_number_of_tags,
                details.sub_outer_vlan_id) == (index["bond0"], vlan, 1, vlan)
        assert ifs[name]["vrf"] == vlan and ifs[name]["addresses"] == [f"10.{vlan}.0.1/24"]
    assert {(d.table.table_id, d.table.name) for d in router.papi("n1", "ip_table_dump")
            if d.table.table_id} == {(10, "red"), (20, "blue")}
    # The GRE tunnel and the route through it.
    (gre,) = router.papi("n1", "gre_tunnel_dump", sw_if_index=ANY_INDEX)
    assert (str(gre.tunnel.src), str(gre.tunnel.dst), gre.tunnel.sw_if_index) == (
        "192.0.2.1", "192.0.2.2", index["gre1"])
    assert ifs["gre1"]["addresses"] == ["10.255.0.1/30"]
    routes = {(r["table_id"], r["prefix"]): [(p["sw_if_index"], p["next_hop"])
                                             for p in r["paths"]] for r in vpp["routes"]}
    assert routes[(0, "198.51.100.0/24")] == [(index["gre1"], "10.255.0.2")]
    assert routes[(0, "fc00:2::/32")] == [(index["bond0"], "2001:db8::2")]
    # The SAs, one each way (the keys are checked by the emulator's own tests).
    sas = {d.entry.sad_id: d.entry for d in router.papi("n1", "ipsec_sa_v5_dump",
                                                          sa_id=ANY_INDEX)}
    assert sorted(sas) == [1001, 1002]
    assert (sas[1001].spi, sas[1001].flags & SA_INBOUND) == (1001, 0)
    assert (sas[1002].spi, sas[1002].flags & (SA_INBOUND | SA_ANTI_REPLAY)) == (
        1002, SA_INBOUND | SA_ANTI_REPLAY)
    # ... protecting the tunnel: out with 1001, in with 1002.
    assert protection(router, "n1") == [(index["gre1"], 1001, [1002])]
    # SRv6: the SID decapsulating into VRF 20, the policy to n2's SID, VRF 20's steering.
    (sid,) = router.papi("n1", "sr_localsids_dump")
    assert str(sid.addr) == "fc00:1::20"
    (policy,) = router.papi("n1", "sr_policies_v2_dump")
    assert str(policy.bsid) == "fc00:1::100" and policy.is_encap
    assert [str(s) for s in policy.sid_lists[0].sids[:policy.sid_lists[0].num_sids]] == [
        "fc00:2::20"]
    (steering,) = router.papi("n1", "sr_steering_pol_dump")
    assert (str(steering.bsid), str(steering.prefix), steering.fib_table) == (
        "fc00:1::100", "10.120.0.0/24", 20)
    # ABF: the voice ACL's traffic entering bond0.10 goes to n2 through the tunnel.
    (acl,) = vpp["acl"]["acls"]
    assert acl["tag"] == "kvmesh:voice" and acl["rules"] == 1
    (abf,) = router.papi("n1", "abf_policy_dump")
    assert (abf.policy.policy_id, abf.policy.acl_index) == (10, acl["index"])
    assert [(str(p.nh.address.ip4), p.sw_if_index)
            for p in abf.policy.paths[:abf.policy.n_paths]] == [("10.255.0.2", index["gre1"])]
    assert [(a.attach.policy_id, a.attach.sw_if_index, a.attach.priority, a.attach.is_ipv6)
            for a in router.papi("n1", "abf_itf_attach_dump")] == [
        (10, index["bond0.10"], 10, False)]
    # Linux-CP: the pairs, and their Linux ends configured by the Linux southbound.
    _reply, pairs = router.papi("n1", "lcp_itf_pair_get_v2", cursor=0, sw_if_index=ANY_INDEX)
    assert {(p.phy_sw_if_index, p.host_if_name) for p in pairs} == {
        (index["bond0"], "be0"), (index["lo0"], "lo0-host")}
    assert "192.0.2.1/24" in router.ip("n1", "-br", "addr", "show", "dev", "be0")
    assert "10.0.0.1/32" in router.ip("n1", "-br", "addr", "show", "dev", "lo0-host")
    assert "10.0.0.2 via 192.0.2.2 dev be0" in router.ip("n1", "route")
    assert {"up1", "up1-sw", "up2", "up2-sw"} <= {
        line.split()[0].split("@")[0] for line in router.ip("n1", "-br", "link").splitlines()}


def check_n2_dataplane(router: Router) -> None:
    vpp = router.vpp("n2")
    ifs = by_tag(vpp)
    index = {name: i["sw_if_index"] for name, i in ifs.items()}
    assert set(ifs) == {"up1", "gre1"}
    (gre,) = router.papi("n2", "gre_tunnel_dump", sw_if_index=ANY_INDEX)
    assert (str(gre.tunnel.src), str(gre.tunnel.dst)) == ("192.0.2.2", "192.0.2.1")
    sas = {d.entry.sad_id: d.entry.flags & SA_INBOUND
           for d in router.papi("n2", "ipsec_sa_v5_dump", sa_id=ANY_INDEX)}
    assert sas == {1001: SA_INBOUND, 1002: 0}  # n1's directions swapped
    assert protection(router, "n2") == [(index["gre1"], 1002, [1001])]
    (sid,) = router.papi("n2", "sr_localsids_dump")
    assert str(sid.addr) == "fc00:2::20"
    (steering,) = router.papi("n2", "sr_steering_pol_dump")
    assert (str(steering.bsid), str(steering.prefix), steering.fib_table) == (
        "fc00:2::100", "10.20.0.0/24", 20)
    assert ifs["up1"]["addresses"] == ["192.0.2.2/24", "2001:db8::2/64"]
    routes = {(r["table_id"], r["prefix"]): [(p["sw_if_index"], p["next_hop"])
                                             for p in r["paths"]] for r in vpp["routes"]}
    assert routes[(0, "fc00:1::/32")] == [(index["up1"], "2001:db8::1")]


@pytest.mark.xdist_group("vpp-router-cluster")  # the module's one cluster
def test_router_is_built_planned_empty_resynced_by_reads_and_removed_cleanly(
        router: Router) -> None:
    before = {node: router.vpp(node) for node in NODES}
    linux_before = {node: router.linux(node) for node in NODES}
    wanted = yaml.safe_load(ROUTER.read_text())["nodes"]

    # Planned first: the Linux values on the Linux-CP pairs' links wait for the pairs that make
    # those links (n1's own plan says so by key), not for something missing: nothing refused.
    planned = router.cli("plan", "-f", str(ROUTER), "--detailed-exitcode")
    assert planned.returncode == 2, planned.stdout + planned.stderr
    notes = [line for line in planned.stdout.splitlines() if line[:2] in ("= ", "! ")]
    assert notes == [
        "= node n1: linux/interface/be0 waits for linux/interface/host/be0 (made by "
        "vpp/lcp/bond0)",
        "= node n1: linux/interface/lo0-host waits for linux/interface/host/lo0-host (made by "
        "vpp/lcp/lo0)",
        "= node n1: linux/route/main/10.0.0.2/32/be0 waits for linux/interface/host/be0 (made "
        "by vpp/lcp/bond0), linux/interface/be0 (which waits for its provider)"]

    applied = router.cli("--json", "apply", "-f", str(ROUTER), "--wait", "--timeout", "90")
    assert applied.returncode == 0, applied.stdout + applied.stderr
    rows = {(row["node"], row["key"]): row["result"] for row in json.loads(applied.stdout)}
    assert rows == {(node, key): "applied" for node, values in wanted.items() for key in values}

    # Every value CONFIGURED, the derived ones (addresses, bond members...) too: their
    # statuses may be published a moment after the values --wait followed.
    def all_configured(node: str) -> dict[str, str]:
        states = {key: rec["state"] for key, rec in router.node_status(node).items()}
        return states if set(wanted[node]) < set(states) and set(states.values()) == {
            "CONFIGURED"} else {}

    for node in NODES:
        states = wait_until(partial(all_configured, node), timeout=30, interval=0.2,
                            message=f"every status of {node} CONFIGURED")
        assert f"vpp/interface/gre1/address/10.255.0.{NODES.index(node) + 1}/30" in states

    check_n1_dataplane(router)
    check_n2_dataplane(router)

    # The same file again: nothing to do, in the desired state and in VPP.
    planned = router.cli("plan", "-f", str(ROUTER), "--detailed-exitcode")
    assert planned.returncode == 0, planned.stdout + planned.stderr
    assert planned.stdout.strip() == "no changes"
    # A downstream resync of the built router reads VPP and writes nothing to it; Linux stays
    # as it was.
    for node in NODES:
        linux = router.linux(node)
        writes = router.resync_writes(node)
        assert writes == {}, f"{node}: VPP's state read back differs from the desired: {writes}"
        after = router.linux(node)
        assert after == linux, linux_difference(linux, after)

    # Removal: an empty state for both nodes, --replace; VPP and Linux are as they were.
    empty = router.workdir / "empty.yaml"
    empty.write_text(yaml.safe_dump({"nodes": {node: {} for node in NODES}}))
    removed = router.cli("--json", "apply", "-f", str(empty), "--replace", "--wait",
                         "--timeout", "90")
    assert removed.returncode == 0, removed.stdout + removed.stderr
    assert {(row["node"], row["key"]): row["result"] for row in json.loads(removed.stdout)} == {
        (node, key): "removed" for node, values in wanted.items() for key in values}
    for node in NODES:
        assert router.vpp(node) == before[node], f"something kvmesh made is still in {node}'s VPP"
        assert router.linux(node) == linux_before[node], f"{node}'s namespace is not as it was"
        wait_until(partial(no_status, router, node), timeout=30, interval=0.2,
                   message=f"every status of {node} withdrawn")

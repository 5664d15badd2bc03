"""Issue 19, end to end: the L2/L3 gateway of docs/examples/vpp-gateway.yaml on a real cluster
(KvStore nodes, agents with the VPP southbound, VPP emulators; real processes, ZeroMQ, REST with
tokens, vpp_papi), driven only by the operator's CLI: `kvmesh apply -f --wait`, `kvmesh status`,
`kvmesh plan`, removal with `apply --replace`; the dataplane checked through the emulator's
control channel and VPP's own dumps. See docs/vpp.md, "A gateway, end to end"."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kvmesh import cluster
from kvmesh.vppemu import EmulatorControl
from tests.parallel import scratch_dir
from tests.util import wait_until
from tests.vpp_cluster import VppCluster, by_tag, vpp_cluster

GATEWAY = Path(__file__).resolve().parent.parent / "docs" / "examples" / "vpp-gateway.yaml"
NODE = "n1"
# NAT44 interface flags (nat_types.api: NAT_IS_OUTSIDE, NAT_IS_INSIDE).
NAT_IS_OUTSIDE, NAT_IS_INSIDE = 0x10, 0x20


class Gateway(VppCluster):
    """A cluster with a VPP emulator per node, and the operator's CLI. The gateway's cluster has
    two nodes: n2 only makes n1's store SYNCED, so n1's agent deletes what the desired state
    no longer holds (a lone fresh node never does on its own)."""

    def __init__(self, workdir: Path, state: cluster.ClusterState) -> None:
        super().__init__(workdir, state)
        self.files = 0

    def state_file(self, values: dict[str, Any]) -> str:
        self.files += 1
        path = self.workdir / f"state{self.files}.yaml"
        path.write_text(yaml.safe_dump({"nodes": {NODE: values}}))
        return str(path)

    def control(self, node: str = NODE) -> EmulatorControl:
        return super().control(node)

    def vpp(self, node: str = NODE) -> dict[str, Any]:
        return super().vpp(node)

    def dump(self, message: str, **args: Any) -> list[Any]:
        """VPP's own answer to a dump of n1's VPP."""
        details: list[Any] = self.papi(NODE, message, **args)
        return details

    def status(self) -> dict[str, dict[str, Any]]:
        return self.node_status(NODE)

    def status_line(self, model_key: str) -> str:
        out = self.cli("status", NODE, "--prefix", model_key)
        assert out.returncode in (0, 1), out.stderr  # 1: the value is FAILED or INVALID
        (line,) = [line for line in out.stdout.splitlines() if f" {model_key} " in line]
        return line

    def remove_everything_within(self, timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
        """`apply --replace --wait` of an empty state: every value of the node removed."""
        return self.cli("--json", "apply", "-f", self.state_file({}), "--replace", "--wait",
                        "--timeout", f"{timeout_s:g}")


@pytest.fixture(scope="module")
def gateway() -> Iterator[Gateway]:
    with vpp_cluster("kvm-gw-", 2, namespaces=False) as (workdir, state):
        yield Gateway(workdir, state)


@pytest.mark.xdist_group("vpp-gateway-cluster")  # the module's one cluster
def test_gateway_is_built_planned_empty_and_removed_cleanly(gateway: Gateway) -> None:
    before = gateway.vpp()
    other_node = gateway.vpp("n2")
    wanted = yaml.safe_load(GATEWAY.read_text())["nodes"][NODE]

    applied = gateway.cli("--json", "apply", "-f", str(GATEWAY), "--wait", "--timeout", "60")
    assert applied.returncode == 0, applied.stdout + applied.stderr
    rows = {row["key"]: row["result"] for row in json.loads(applied.stdout)}
    assert rows == dict.fromkeys(wanted, "applied")
    # Every value CONFIGURED, the derived ones (addresses, members, bindings) too: their
    # statuses may be published a moment after the values --wait followed.
    def all_configured() -> dict[str, str]:
        states = {key: rec["state"] for key, rec in gateway.status().items()}
        return states if set(wanted) < set(states) and set(states.values()) == {
            "CONFIGURED"} else {}

    states = wait_until(all_configured, timeout=30, interval=0.2,
                        message="every status CONFIGURED")
    assert {"vpp/interface/bvi/address/10.10.0.1/24", "vpp/bd/lan/interface/vx100",
            "vpp/acl/uplink-in/interface/ingress/uplink"} <= set(states)

    # The dataplane, as VPP reports it.
    vpp = gateway.vpp()
    ifs = by_tag(vpp)
    index = {name: i["sw_if_index"] for name, i in ifs.items()}
    assert set(ifs) == {"uplink", "trunk", "trunk.10", "trunk.20", "vx100", "bvi"}
    assert all(i["admin_up"] for i in ifs.values())
    assert ifs["uplink"]["addresses"] == ["192.0.2.2/24"] and ifs["uplink"]["vrf"] == 0
    assert ifs["bvi"]["kind"] == "loopback" and ifs["bvi"]["vrf"] == 10
    assert ifs["bvi"]["addresses"] == ["10.10.0.1/24"]
    subifs = {d.sw_if_index: d for d in gateway.dump("sw_interface_dump")
              if d.sw_if_index != d.sup_sw_if_index}
    for name, vlan in (("trunk.10", 10), ("trunk.20", 20)):
        details = subifs[index[name]]
        assert (details.sup_sw_if_index, details.sub_id, details.sub_number_of_tags,
                details.sub_outer_vlan_id) == (index["trunk"], vlan, 1, vlan)
    (tunnel,) = gateway.dump("vxlan_tunnel_v2_dump", sw_if_index=0xFFFFFFFF)
    assert (str(tunnel.src_address), str(tunnel.dst_address), tunnel.vni,
            tunnel.sw_if_index) == ("192.0.2.2", "192.0.2.10", 100, index["vx100"])
    (domain,) = vpp["bridge_domains"]
    assert domain["bd_id"] == 10 and domain["bvi"] == index["bvi"]
    assert domain["members"] == sorted(index[n] for n in ("trunk.10", "trunk.20", "vx100", "bvi"))
    assert sorted(map(tuple, vpp["tables"])) == [(False, 0), (False, 10), (True, 0)]
    assert {(r["table_id"], r["prefix"], p["sw_if_index"], p["next_hop"])
            for r in vpp["routes"] for p in r["paths"]} == {
        (0, "0.0.0.0/0", index["uplink"], "192.0.2.1"),
        (10, "0.0.0.0/0", index["uplink"], "192.0.2.1")}
    assert [(n["sw_if_index"], n["ip"], n["mac"]) for n in vpp["neighbors"]] == [
        (index["uplink"], "192.0.2.1", "02:00:00:00:02:01")]
    (acl,) = vpp["acl"]["acls"]
    assert acl["tag"] == "kvmesh:uplink-in" and acl["rules"] == 5
    assert vpp["acl"]["interfaces"] == {str(index["uplink"]): {"ingress": [acl["index"]],
                                                                "egress": []}}
    nat = vpp["nat44"]
    assert nat["enabled"] and nat["addresses"] == ["192.0.2.100", "192.0.2.101"]
    assert nat["interfaces"] == {str(index["bvi"]): NAT_IS_INSIDE,
                                 str(index["uplink"]): NAT_IS_OUTSIDE}

    # The same file again: nothing to do, in the desired state and in VPP.
    planned = gateway.cli("plan", "-f", str(GATEWAY), "--detailed-exitcode")
    assert planned.returncode == 0, planned.stdout + planned.stderr
    assert planned.stdout.strip() == "no changes"
    again = gateway.cli("apply", "-f", str(GATEWAY), "--wait")
    assert again.returncode == 0 and again.stdout.strip() == "no changes", again
    writes = gateway.resync_writes(NODE)
    assert writes == {}, f"VPP's state read back differs from the desired state: {writes}"

    # Removal: the file without the gateway, --replace; VPP is as it was before.
    removed = gateway.remove_everything_within()
    assert removed.returncode == 0, removed.stdout + removed.stderr
    assert {row["key"]: row["result"] for row in json.loads(removed.stdout)} == dict.fromkeys(
        wanted, "removed")
    assert gateway.vpp() == before, "something kvmesh made is still in VPP"
    wait_until(lambda: gateway.status() == {}, timeout=30, interval=0.2,
               message="every status withdrawn")
    assert gateway.vpp("n2") == other_node  # the other node's VPP was never touched


@pytest.mark.xdist_group("vpp-gateway-cluster")  # the module's one cluster
def test_a_refused_call_is_failed_with_vpps_error_name(gateway: Gateway) -> None:
    before = gateway.vpp()
    tunnel = {"vpp/interface/vx200": {"type": "vxlan",
                                      "vxlan": {"src": "192.0.2.2", "dst": "192.0.2.20",
                                                "vni": 200}}}
    control = gateway.control()
    control.fail("vxlan_add_del_tunnel_v3", retval=-75, count=None)  # until cleared
    try:
        out = gateway.cli("--json", "apply", "-f", gateway.state_file(tunnel), "--wait",
                          "--timeout", "60")
        assert out.returncode == 1, out.stdout + out.stderr
        (row,) = json.loads(out.stdout)
        assert row["result"] == "FAILED", row
        assert "VNET_API_ERROR_TUNNEL_EXIST (-75)" in row["details"], row
        line = gateway.status_line("vpp/interface/vx200")
        assert " FAILED " in line and "VNET_API_ERROR_TUNNEL_EXIST (-75)" in line, line
        assert "vxlan_add_del_tunnel_v3" in line, line
        assert gateway.vpp() == before  # the refused call changed nothing
    finally:
        control.clear_faults()
    removed = gateway.remove_everything_within()
    assert removed.returncode == 0, removed.stdout + removed.stderr
    assert gateway.vpp() == before
    wait_until(lambda: gateway.status() == {}, timeout=30, interval=0.2,
               message="every status withdrawn")


def test_a_one_node_cluster_says_why_its_removal_waits(tmp_path: Path) -> None:
    """A fresh one-node cluster's store is EMPTY with no peer: never known to be current, so its
    agent creates but deletes nothing until the operator declares the store the truth. `apply
    --wait` of a removal used to time out with only "last state CONFIGURED"; it names the hold
    and its way out, and after `kvmesh resync --force` the removal goes through."""
    workdir = scratch_dir("kvm-gw1-")
    run_dir = workdir / "run"
    try:
        state = cluster.up(1, vpp_emulator=True, run_dir=run_dir, namespaces=False, timeout=90)
        lone = Gateway(workdir, state)
        before = lone.vpp()
        loop = {"vpp/interface/lo1": {"type": "loopback", "addresses": ["10.1.0.1/24"]}}
        made = lone.cli("apply", "-f", lone.state_file(loop), "--wait")
        assert made.returncode == 0, made.stdout + made.stderr
        assert set(by_tag(lone.vpp())) == {"lo1"}

        held = lone.remove_everything_within(3)
        assert held.returncode == 1, held.stdout + held.stderr
        (row,) = json.loads(held.stdout)
        assert row["result"] == "TIMEOUT", row
        assert row["details"].startswith("last state CONFIGURED; vpp: "), row
        assert "deletes held back" in row["details"], row
        assert "kvmesh resync --node n1 --force" in row["details"], row
        assert set(by_tag(lone.vpp())) == {"lo1"}  # nothing deleted

        forced = lone.cli("resync", "--node", NODE, "--force")
        assert forced.returncode == 0, forced.stdout + forced.stderr
        wait_until(lambda: lone.vpp() == before, timeout=30,
                   message="the removal went through once the store was declared current")
    finally:
        cluster.down(run_dir, purge=True)
        shutil.rmtree(workdir, ignore_errors=True)

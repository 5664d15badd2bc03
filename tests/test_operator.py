"""The operator workflow on a real 2-node cluster (namespaces, processes, ZeroMQ, netlink):
config export, plan, apply --wait, --replace; see docs/operator.md."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from kvmesh import cluster
from kvmesh.cli.members import announced_nodes
from kvmesh.cli.ops_cmds import outcome
from kvmesh.rest_client import AgentRest, Credentials, RestError
from tests import cli_run
from tests.netns import netns_available
from tests.parallel import unique_prefix
from tests.util import wait_until

pytestmark = [
    # One cluster for the module (a module fixture): its tests run in one worker, in order.
    pytest.mark.xdist_group("operator-cluster"),
    pytest.mark.netns,
    pytest.mark.skipif(not netns_available(), reason="needs root and iproute2 (ip netns)"),
]


class Cli:
    def __init__(self, url: str, tmp: Path, prefix: str, http: dict[str, str],
                 env: dict[str, str]) -> None:
        self.url, self.tmp, self.prefix, self.http = url, tmp, prefix, http
        self.env = {**os.environ, **env}  # the cluster operator's keys (kvmesh cluster env)
        self.files = 0

    def post(self, node: str, path: str, body: object,
             credentials: Credentials | None = None) -> tuple[int, dict]:
        """POST to `node`'s agent with the token the CLI finds (or `credentials`)."""
        rest = AgentRest.at(self.http[node], timeout_s=60, credentials=credentials)
        try:
            return 200, rest.json("POST", path, body=body)
        except RestError as exc:
            assert exc.status is not None, exc
            return exc.status, exc.answer

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return cli_run.kvmesh(["--url", self.url, *args], env=self.env)

    def state_file(self, nodes: dict) -> str:
        self.files += 1
        path = self.tmp / f"state{self.files}.yaml"
        path.write_text(yaml.safe_dump({"nodes": nodes}))
        return str(path)

    def desired(self, node: str) -> dict:
        out = self.run("config", "get", node)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    def links(self, node: str) -> set[str]:
        out = subprocess.run(["ip", "-n", f"{self.prefix}-{node}", "-j", "link", "show"],
                             capture_output=True, text=True, check=True).stdout
        return {link["ifname"] for link in json.loads(out)}

    def routes(self, node: str) -> set[str]:
        out = subprocess.run(["ip", "-n", f"{self.prefix}-{node}", "-j", "route", "show"],
                             capture_output=True, text=True, check=True).stdout
        return {route["dst"] for route in json.loads(out)}


@pytest.fixture(scope="module")
def cli(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cli]:
    tmp = tmp_path_factory.mktemp("operator")
    prefix = unique_prefix("kvop")
    run_dir = tmp / "run"
    try:
        state = cluster.up(2, "chain", run_dir=run_dir, netns_prefix=prefix, timeout=90)
        with state.client("n1") as client:  # both agents announced: both are known members
            wait_until(lambda: announced_nodes(client) == {"n1", "n2"}, 30,
                       message="node/<name>/ keys")
        yield Cli(state.nodes["n1"].cmd_url, tmp, prefix,
                  {name: str(info.http) for name, info in state.nodes.items()},
                  cluster.client_env(run_dir))
    finally:
        cluster.down(run_dir)


VETH: dict[str, dict] = {
    "linux/interface/veth0": {"type": "veth", "veth": {"peer": "veth1"},
                              "addresses": ["10.0.12.1/24"]},
    "linux/interface/veth1": {"type": "veth", "veth": {"peer": "veth0"}},
    "linux/route/main/10.9.0.0/24/veth0": {"gateway": "10.0.12.2"},
}


def test_invalid_file_writes_nothing(cli: Cli) -> None:
    path = cli.state_file({"n2": {**VETH, "linux/interface/br1": {"type": "bridge", "mtu": 1}}})
    out = cli.run("apply", "-f", path, "--wait")
    assert out.returncode != 0
    assert "linux/interface/br1: field 'mtu'" in out.stderr and "nothing was written" in out.stderr
    assert cli.desired("n2") == {}
    planned = cli.run("plan", "-f", path)
    assert planned.returncode != 0 and "field 'mtu'" in planned.stderr


def test_unknown_node_is_refused_unless_allowed(cli: Cli) -> None:
    bridge = {"type": "bridge"}
    path = cli.state_file({"n9": {"linux/interface/br9": bridge}})
    for args in (("plan", "-f", path), ("apply", "-f", path, "--no-wait"),
                 ("config", "set", "n9", "linux/interface/br9", json.dumps(bridge))):
        out = cli.run(*args)
        assert out.returncode == 1, out
        assert out.stderr == ("error: unknown node(s) n9: no cluster member has that name "
                              "(members: n1, n2); give --allow-unknown-node to write anyway\n")
    assert cli.desired("n9") == {}
    assert "n9" not in cli.run("config", "history").stdout
    # n9 has no agent whose scheduler could be asked: only an offline plan can succeed.
    planned = cli.run("plan", "-f", path, "--allow-unknown-node")
    assert planned.returncode == 1 and "scheduler of n9 could not be asked" in planned.stderr
    planned = cli.run("plan", "-f", path, "--allow-unknown-node", "--offline")
    assert planned.returncode == 0 and "node n9: 1 to add" in planned.stdout, planned
    assert cli.desired("n9") == {}  # plan writes nothing
    out = cli.run("config", "set", "n9", "linux/interface/br9", json.dumps(bridge),
                  "--allow-unknown-node")
    assert out.returncode == 0, out
    assert cli.desired("n9") == {"linux/interface/br9": bridge}
    # n9 now has desired state: a member (e.g. its agent has not started yet).
    assert cli.run("plan", "-f", path, "--offline").returncode == 0
    assert cli.run("config", "del", "n9", "linux/interface/br9").returncode == 0
    # A tombstone is no desired state: n9 is unknown again.
    assert cli.run("plan", "-f", path, "--offline").returncode == 1


def test_plan_then_apply_does_exactly_the_plan(cli: Cli) -> None:
    path = cli.state_file({"n2": VETH})
    planned = cli.run("--json", "plan", "-f", path, "--detailed-exitcode")
    assert planned.returncode == 2, planned.stderr
    plan = json.loads(planned.stdout)["n2"]
    assert plan["added"] == sorted(VETH) and plan["changed"] == {} and plan["removed"] == []
    operations = [(op["operation"], op["key"]) for op in plan["scheduler"]["operations"]]
    assert ("CREATE", "linux/route/main/10.9.0.0/24/veth0") in operations
    assert cli.desired("n2") == {} and "veth0" not in cli.links("n2")  # plan changed nothing

    applied = cli.run("--json", "apply", "-f", path, "--wait", "--timeout", "60")
    assert applied.returncode == 0, applied.stdout + applied.stderr
    rows = {row["key"]: row["result"] for row in json.loads(applied.stdout)}
    assert rows == dict.fromkeys(VETH, "applied")
    assert {"veth0", "veth1"} <= cli.links("n2") and "10.9.0.0/24" in cli.routes("n2")

    history = json.loads(cli.run("--json", "history", "--node", "n2").stdout)
    executed = [(op["operation"], op["key"]) for txn in history if txn["type"] != "RETRY"
                and any(v["key"] in VETH for v in txn["values"]) for op in txn["executed"]]
    assert executed == operations


def test_unchanged_export_plans_to_nothing(cli: Cli) -> None:
    exported = cli.run("config", "export", "n2")
    assert exported.returncode == 0, exported.stderr
    assert yaml.safe_load(exported.stdout) == {"nodes": {"n2": VETH}}
    path = cli.tmp / "export.yaml"
    path.write_text(exported.stdout)
    planned = cli.run("plan", "-f", str(path), "--detailed-exitcode")
    assert planned.returncode == 0 and planned.stdout.strip() == "no changes"
    applied = cli.run("apply", "-f", str(path), "--wait")
    assert applied.returncode == 0 and applied.stdout.strip() == "no changes"


ROUTES: dict[str, dict] = {
    "linux/route/main/203.0.113.0/24/-": {"type": "blackhole"},
    "linux/route/main/10.8.0.0/24/veth0": {"gateway": "10.0.12.2", "src": "10.0.12.1"},
    "linux/route/main/10.6.0.0/24/veth0": {"nexthops": [
        {"gateway": "10.0.12.2", "dev": "veth0"},
        {"gateway": "10.0.12.3", "dev": "veth0", "weight": 2}]},
}


def test_new_route_kinds_plan_exactly_what_apply_does(cli: Cli) -> None:
    path = cli.state_file({"n2": {**VETH, **ROUTES}})
    plan = json.loads(cli.run("--json", "plan", "-f", path).stdout)["n2"]
    assert plan["added"] == sorted(ROUTES) and plan["changed"] == {}
    operations = [(op["operation"], op["key"]) for op in plan["scheduler"]["operations"]]
    assert sorted(operations) == sorted(("CREATE", key) for key in ROUTES)
    applied = cli.run("--json", "apply", "-f", path, "--wait", "--timeout", "60")
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert {row["key"]: row["result"] for row in json.loads(applied.stdout)} == dict.fromkeys(
        ROUTES, "applied")
    assert {"203.0.113.0/24", "10.8.0.0/24", "10.6.0.0/24"} <= cli.routes("n2")
    history = json.loads(cli.run("--json", "history", "--node", "n2").stdout)
    executed = [(op["operation"], op["key"]) for txn in history if txn["type"] != "RETRY"
                and any(v["key"] in ROUTES for v in txn["values"]) for op in txn["executed"]]
    assert sorted(executed) == sorted(operations)
    # The same file again: nothing to do.
    again = cli.run("plan", "-f", path, "--detailed-exitcode")
    assert again.returncode == 0 and again.stdout.strip() == "no changes"
    back = cli.run("apply", "-f", cli.state_file({"n2": VETH}), "--replace", "--wait")
    assert back.returncode == 0, back.stdout + back.stderr
    assert not {"203.0.113.0/24", "10.8.0.0/24", "10.6.0.0/24"} & cli.routes("n2")


def test_apply_wait_reports_pending_and_failed(cli: Cli) -> None:
    changed = {**VETH,
               "linux/interface/veth0": {**VETH["linux/interface/veth0"], "mtu": 1400},
               # no interface veth7: waits for it
               "linux/route/main/10.7.0.0/24/veth7": {},
               # the kernel refuses a second VXLAN device with the same VNI and port
               "linux/interface/vx0": {"type": "vxlan", "vxlan": {"vni": 42}},
               "linux/interface/vx1": {"type": "vxlan", "vxlan": {"vni": 42}}}
    path = cli.state_file({"n2": changed})
    planned = json.loads(cli.run("--json", "plan", "-f", path).stdout)["n2"]
    assert planned["changed"]["linux/interface/veth0"] == [
        {"path": "mtu", "old": None, "new": 1400}]
    (pending_op,) = [op for op in planned["scheduler"]["operations"]
                     if op["key"] == "linux/route/main/10.7.0.0/24/veth7"]
    assert "IS-PENDING" in pending_op["flags"] and any("veth7" in d for d in
                                                       pending_op["details"])
    text = cli.run("plan", "-f", path).stdout
    assert "waiting for: " in text and "veth7" in text
    refused = cli.run("apply", "-f", path, "--no-wait")  # veth7 is on no node, nor desired
    assert refused.returncode == 1 and "would stay PENDING" in refused.stderr, refused
    out = cli.run("--json", "apply", "-f", path, "--wait", "--timeout", "30",
                  "--allow-missing-device")
    assert out.returncode == 1, out.stdout + out.stderr
    rows = {row["key"]: row for row in json.loads(out.stdout)}
    assert set(rows) == {"linux/interface/veth0", "linux/route/main/10.7.0.0/24/veth7",
                         "linux/interface/vx0", "linux/interface/vx1"}
    assert rows["linux/interface/veth0"]["result"] == "applied"
    pending = rows["linux/route/main/10.7.0.0/24/veth7"]
    assert pending["result"] == "PENDING" and "veth7" in pending["details"]
    vxlans = sorted(rows[f"linux/interface/vx{n}"]["result"] for n in (0, 1))
    assert vxlans == ["FAILED", "applied"], rows
    assert all(row["details"] for row in rows.values() if row["result"] == "FAILED")


ROUTER_YAML = Path(__file__).resolve().parents[1] / "docs" / "examples" / "router.yaml"
ROUTER_LINKS = ("r1", "r3", "r3b")


def test_a_file_for_another_node_is_refused_for_what_would_stay_pending(cli: Cli) -> None:
    """The router example on n2 of this cluster, which has none of its links r1, r3, r3b:
    applied, it wrote everything, applied what needs no link (sysctls, the nftables table, the
    rule) and left 5 values PENDING. Plan names each with the dependency it lacks; plan and
    apply refuse it (nothing written) unless --allow-missing-device."""
    assert not set(ROUTER_LINKS) & cli.links("n2")
    path = str(ROUTER_YAML)
    before = cli.desired("n2")
    stay = {*(f"linux/interface/{link}" for link in ROUTER_LINKS),
            "linux/route/100/0.0.0.0/0/-", "linux/neighbor/r1/198.19.1.2"}
    planned = cli.run("plan", "-f", path)
    assert planned.returncode == 1, planned
    for link in ROUTER_LINKS:
        assert (f"! node n2: linux/interface/{link} would stay PENDING: existing link {link}: "
                f"not on node n2 and not in the desired state") in planned.stdout, planned.stdout
    assert "--allow-missing-device" in planned.stderr
    listed = json.loads(cli.run("--json", "plan", "-f", path).stdout)["n2"]
    assert set(listed["would_stay_pending"]) == stay, listed["would_stay_pending"]
    route = listed["would_stay_pending"]["linux/route/100/0.0.0.0/0/-"]
    assert route["waits_for"] and route["absent"] == [], route  # waits for r3/r3b, desired
    assert cli.run("plan", "-f", path, "--detailed-exitcode").returncode == 1
    applied = cli.run("apply", "-f", path, "--no-wait")
    assert applied.returncode == 1, applied
    assert "would stay PENDING" in applied.stderr and "nothing was written" in applied.stderr
    assert cli.desired("n2") == before
    allowed = cli.run("plan", "-f", path, "--allow-missing-device", "--detailed-exitcode")
    assert allowed.returncode == 2, allowed
    # Unknown is not empty: a plan that did not ask the node says so, and claims nothing.
    offline = cli.run("plan", "-f", path, "--offline")
    assert offline.returncode == 0, offline
    assert "! node n2: dependencies not checked (--offline" in offline.stdout
    assert "would stay PENDING" not in offline.stdout


def test_replace_removes_what_the_file_no_longer_has(cli: Cli) -> None:
    path = cli.state_file({"n2": {"linux/interface/veth0": VETH["linux/interface/veth0"],
                                  "linux/interface/veth1": VETH["linux/interface/veth1"]}})
    planned = json.loads(cli.run("--json", "plan", "-f", path, "--replace").stdout)["n2"]
    assert set(planned["removed"]) == {"linux/route/main/10.9.0.0/24/veth0",
                                       "linux/route/main/10.7.0.0/24/veth7",
                                       "linux/interface/vx0", "linux/interface/vx1"}
    out = cli.run("--json", "apply", "-f", path, "--replace", "--wait", "--timeout", "30")
    assert out.returncode == 0, out.stdout + out.stderr
    assert set(cli.desired("n2")) == {"linux/interface/veth0", "linux/interface/veth1"}
    assert "10.9.0.0/24" not in cli.routes("n2") and not {"vx0", "vx1"} & cli.links("n2")


def test_outcome_of_each_final_state() -> None:
    assert outcome({}, {"state": "CONFIGURED"}, True) == ("applied", "")
    assert outcome({}, {"state": "INVALID", "error": "field 'x'"}, True) == ("INVALID",
                                                                            "field 'x'")
    assert outcome({}, {"state": "PENDING", "details": ["interface v7"]}, True) == (
        "PENDING", "waiting for interface v7")
    assert outcome(None, None, True) == ("removed", "")
    assert outcome({}, {"state": "RETRYING", "error": "EEXIST"}, True) == (
        "FAILED", "(the node retries) EEXIST")
    assert outcome({}, {"state": "CONFIGURED"}, False) == ("TIMEOUT", "last state CONFIGURED")
    assert outcome(None, {"state": "CONFIGURED"}, False, "vpp: deletes held back") == (
        "TIMEOUT", "last state CONFIGURED; vpp: deletes held back")


def history(cli: Cli, node: str) -> list[dict]:
    out = cli.run("--json", "config", "history", node)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_confirm_timeout_rolls_back_even_when_the_cli_is_killed(cli: Cli) -> None:
    before = cli.desired("n2")
    path = cli.state_file({"n2": {"linux/interface/br5": {"type": "bridge"}}})
    proc = subprocess.Popen([sys.executable, "-m", "kvmesh", "--url", cli.url, "apply", "-f",
                             path, "--wait", "--confirm-timeout", "2"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=cli.env)
    try:
        wait_until(lambda: "br5" in cli.links("n2"), timeout=30, message="br5 created")
    finally:
        proc.kill()  # the operator's session dies right after apply
        proc.wait()
    wait_until(lambda: "br5" not in cli.links("n2"), timeout=30,
               message="the agent rolled back the unconfirmed revision")
    assert cli.desired("n2") == before
    revs = history(cli, "n2")
    applied, rollback = revs[-2], revs[-1]
    assert applied["keys"] == ["linux/interface/br5"] and applied["confirm"] == "rolled-back"
    assert rollback["keys"] == ["linux/interface/br5"] and "agent n2" in rollback["who"]


def test_confirm_keeps_the_change(cli: Cli) -> None:
    path = cli.state_file({"n2": {"linux/interface/br6": {"type": "bridge"}}})
    out = cli.run("apply", "-f", path, "--no-wait", "--confirm-timeout", "30")
    assert out.returncode == 0, out.stderr
    assert "kvmesh confirm" in out.stderr
    confirmed = cli.run("confirm", "n2")
    assert confirmed.returncode == 0, confirmed.stderr
    assert history(cli, "n2")[-1]["confirm"] == "confirmed"
    assert "linux/interface/br6" in cli.desired("n2")
    again = cli.run("confirm", "n2")
    assert again.returncode != 0 and "no pending revision" in again.stderr


def test_history_and_rollback_round_trip(cli: Cli) -> None:
    start = cli.desired("n2")
    first = cli.state_file({"n2": {"linux/interface/br8": {"type": "bridge", "mtu": 1300}}})
    second = cli.state_file({"n2": {"linux/interface/br8": {"type": "bridge", "mtu": 1200},
                                    "linux/interface/br9": {"type": "bridge"}}})
    assert cli.run("apply", "-f", first, "--wait").returncode == 0
    after_first = cli.desired("n2")
    rev_first = history(cli, "n2")[-1]["rev"]
    assert cli.run("apply", "-f", second, "--wait").returncode == 0
    assert cli.desired("n2")["linux/interface/br8"]["mtu"] == 1200
    wait_until(lambda: "br9" in cli.links("n2"), timeout=30, message="br9 created")

    out = cli.run("config", "rollback", "n2", str(rev_first))
    assert out.returncode == 0, out.stderr
    assert cli.desired("n2") == after_first
    wait_until(lambda: "br9" not in cli.links("n2"), timeout=30, message="br9 removed")
    revs = history(cli, "n2")
    assert revs[-1]["description"] == f"rollback to revision {rev_first}"
    assert revs[-1]["keys"] == ["linux/interface/br8", "linux/interface/br9"]
    back = cli.run("config", "rollback", "n2", str(rev_first - 1))
    assert back.returncode == 0, back.stderr
    assert cli.desired("n2") == start
    missing = cli.run("config", "rollback", "n2", "999")
    assert missing.returncode == 2 and "no revision 999" in missing.stderr


def test_post_configuration_is_all_or_nothing(cli: Cli) -> None:
    links, desired, revs = cli.links("n2"), cli.desired("n2"), history(cli, "n2")
    values = {"linux/interface/br20": {"type": "bridge"},
              "linux/interface/vx20": {"type": "vxlan", "vxlan": {"vni": 77}},
              "linux/interface/vx21": {"type": "vxlan", "vxlan": {"vni": 77}}}  # one fails
    status, body = cli.post("n2", "/configuration", {"values": values})
    assert status == 409 and body["ok"] is False, body
    assert set(body["errors"]) & {"linux/interface/vx20", "linux/interface/vx21"}
    assert cli.links("n2") == links  # reverted in the kernel
    assert cli.desired("n2") == desired and history(cli, "n2") == revs  # nothing in the mesh

    status, body = cli.post("n2", "/configuration", {"values": {"x/y": {}}})
    assert status == 400 and "x/y" in body["errors"]


def test_post_configuration_is_recorded_and_not_reapplied(cli: Cli) -> None:
    values = {**cli.desired("n2"), "linux/interface/br21": {"type": "bridge", "mtu": 1280}}
    before = history(cli, "n2")
    for wipe in ({"values": {}, "replace": True}, {"values": values}):  # without the token
        status, body = cli.post("n2", "/configuration", wipe, credentials=Credentials())
        assert status == 401 and "bearer token is required" in body["error"], body
    assert history(cli, "n2") == before and "br21" not in cli.links("n2")
    status, body = cli.post("n2", "/configuration", {"values": values, "replace": True})
    assert status == 200 and body["ok"] and body["changed"] == ["linux/interface/br21"], body
    assert "br21" in cli.links("n2")
    assert cli.desired("n2")["linux/interface/br21"] == {"type": "bridge", "mtu": 1280}
    assert history(cli, "n2")[-1]["rev"] == body["revision"]
    # The revision names what the request proved (the agent's token, from where, which local
    # account), not the user the agent runs as.
    who = history(cli, "n2")[-1]["who"]
    assert who.startswith("the agent's generated operator token from 127.0.0.1:"), who
    assert f"local uid {os.getuid()}" in who and "REST POST /configuration" in who
    # A later change through the mesh is applied: by then the agent has seen its own write.
    marker = cli.run("config", "set", "n2", "linux/interface/br22", '{"type": "bridge"}')
    assert marker.returncode == 0, marker.stderr
    wait_until(lambda: "br22" in cli.links("n2"), timeout=30, message="br22 created")
    txns = json.loads(cli.run("--json", "history", "--node", "n2").stdout)
    later = [txn for txn in txns if txn["seq"] > body["seq"]
             and any(v["key"] == "linux/interface/br21" for v in txn["values"])]
    assert later == [], "the NB loop re-applied the REST transaction's values"


def test_status_watch_redraws_a_live_table(cli: Cli) -> None:
    out_path = cli.tmp / "watch.out"
    with open(out_path, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "kvmesh", "--url", cli.url, "status",
                                 "n2", "--watch", "--interval", "0.2"], stdout=out,
                                stderr=subprocess.STDOUT, env=cli.env)
    try:
        wait_until(lambda: out_path.read_text().count("kvmesh status n2") >= 2, timeout=30,
                   message="two frames of the live table")
        frame = out_path.read_text().rsplit("kvmesh status n2", 1)[1]
        assert "linux/interface/veth0" in frame and "CONFIGURED" in frame
        cli.run("config", "set", "n2", "linux/interface/br30", '{"type": "bridge"}')
        wait_until(lambda: "linux/interface/br30" in out_path.read_text().rsplit(
            "kvmesh status n2", 1)[1], timeout=30, message="the table follows changes")
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_metrics_histograms_on_a_real_node(cli: Cli) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    def families() -> dict:
        text = AgentRest.at(cli.http["n2"]).request("GET", "/metrics").decode()
        return {f.name: {(s.name, s.labels.get("le")): s.value for s in f.samples}
                for f in text_string_to_metric_families(text)}

    path = cli.state_file({"n2": {"linux/interface/br40": {"type": "bridge"}}})
    assert cli.run("apply", "-f", path, "--wait").returncode == 0
    count = ("kvmesh_config_to_applied_seconds_count", None)
    found = wait_until(lambda: (f := families()) and f["kvmesh_config_to_applied_seconds"][
        count] >= 1 and f, timeout=30, message="the apply's latency observed (revision seen)")
    assert found["kvmesh_scheduler_transaction_duration_seconds"][
        ("kvmesh_scheduler_transaction_duration_seconds_count", None)] >= 1
    flood = found["kvmesh_kvstore_flood_batch_size"]
    assert flood[("kvmesh_kvstore_flood_batch_size_count", None)] >= 1
    assert "kvmesh_kvstore_flood_batch_size_le_1" not in found


def test_values_for_a_device_the_node_lacks_are_reported_and_refused(cli: Cli) -> None:
    """A VPP file for a node without VPP: every row UNIMPLEMENTED with no reason and `plan`
    exiting 0. The cluster's agents drive Linux only (node/<N>/device/linux)."""
    vpp = {"vpp/interface/lo0": {"type": "loopback"}, "vpp/bd/b1": {"bd_id": 1}}
    path = cli.state_file({"n2": {**vpp, "linux/interface/br4": {"type": "bridge"}}})
    said = ("node n2 has no vpp device (no node/n2/device/vpp): 2 value(s) would not apply "
            "there: vpp/bd/b1, vpp/interface/lo0")
    before = cli.desired("n2")  # what the module's earlier tests left
    planned = cli.run("plan", "-f", path, "--offline")
    assert planned.returncode == 1, planned
    assert f"! {said}" in planned.stdout and "--allow-missing-device" in planned.stderr
    assert cli.run("plan", "-f", path, "--offline", "--detailed-exitcode").returncode == 1
    listed = json.loads(cli.run("--json", "plan", "-f", path, "--offline").stdout)
    assert listed["n2"]["missing_device"] == {"vpp": ["vpp/bd/b1", "vpp/interface/lo0"]}
    applied = cli.run("apply", "-f", path, "--no-wait")
    assert applied.returncode == 1
    assert applied.stderr == (f"error: {said}; nothing was written (give "
                              "--allow-missing-device to write them anyway)\n")
    assert cli.desired("n2") == before
    allowed = cli.run("plan", "-f", path, "--offline", "--allow-missing-device",
                      "--detailed-exitcode")
    assert allowed.returncode == 2 and f"! {said}" in allowed.stdout
    # Linux values alone are planned as before.
    linux_only = cli.state_file({"n2": {"linux/interface/br4": {"type": "bridge"}}})
    assert cli.run("plan", "-f", linux_only, "--offline").returncode == 0
    applied = cli.run("apply", "-f", path, "--no-wait", "--allow-missing-device")
    assert applied.returncode == 0, applied
    assert set(cli.desired("n2")) == {*before, *vpp, "linux/interface/br4"}
    for key in [*vpp, "linux/interface/br4"]:
        assert cli.run("config", "del", "n2", key).returncode == 0

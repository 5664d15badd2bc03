"""The agent end to end: real KvStore processes, a real agent process, a real namespace.

Desired state is written on n1 (`kvmesh config set` via the CLI); n2's agent applies it to n2's
namespace and publishes statuses that n1 can read.
"""

from __future__ import annotations

import functools
import json
import signal
import subprocess
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from kvmesh import launch
from kvmesh.agent.keys import STATUS, agent_key
from kvmesh.agent.status import decode_status
from kvmesh.rest_client import AgentRest, RestError
from kvstore.client import KvStoreClient
from kvstore.version import PROTOCOL_VERSION, __version__
from tests import cli_run
from tests.kvstore.conftest import Mesh, Node, free_port
from tests.netns import Netns, netns_available, temporary_netns
from tests.util import wait_until

pytestmark = [
    pytest.mark.netns,
    pytest.mark.skipif(not netns_available(), reason="needs root and iproute2 (ip netns)"),
]


def kvmesh(url: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = cli_run.kvmesh(["--url", url, *args])
    if check and result.returncode != 0:
        raise AssertionError(f"kvmesh {' '.join(args)} failed ({result.returncode}): "
                             f"{result.stderr}{result.stdout}")
    return result


@dataclass
class AgentProc:
    node: Node
    netns: Netns
    http_port: int
    log_path: Path
    proc: launch.Launched | None = None

    def start(self) -> None:
        options = launch.AgentOptions(linux_netns=self.netns.name,
                                      http=f"127.0.0.1:{self.http_port}",
                                      downstream_resync_s=3600)
        self.proc = launch.start(launch.AgentSpec(self.node.name, self.node.cmd_url, options),
                                 self.log_path)
        wait_until(self.answers, timeout=30, message=f"agent of {self.node.name} ready\n"
                   + self.log_path.read_text(errors="replace")[-3000:])

    def answers(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError("agent exited:\n" + self.log_path.read_text(errors="replace"))
        try:
            return self.get("/scheduler/stats")[0] == 200
        except OSError:
            return False

    def get(self, path: str, method: str = "GET") -> tuple[int, bytes]:
        try:
            return 200, AgentRest.at(f"127.0.0.1:{self.http_port}").request(method, path)
        except RestError as exc:
            if exc.status is None:
                raise OSError(str(exc)) from None
            answer = exc.answer if exc.answer is not None else {"error": str(exc)}
            return exc.status, json.dumps(answer).encode()

    def get_json(self, path: str, method: str = "GET") -> Any:
        status, body = self.get(path, method)
        assert status == 200, body
        return json.loads(body)

    def stop(self) -> int:
        assert self.proc is not None
        return self.proc.stop(signal.SIGTERM, timeout=30)

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()


@dataclass
class Cluster:
    n1: Node
    n2: Node
    ns2: Netns
    agent: AgentProc

    def status_from_n1(self, model_key: str) -> dict[str, Any] | None:
        key = f"{STATUS}n2/{model_key}"
        with KvStoreClient(self.n1.cmd_url) as client:
            found = client.get([key]).get(key)
        return decode_status(found.value if found else None)

    def state_from_n1(self, model_key: str) -> str | None:
        record = self.status_from_n1(model_key)
        return None if record is None else str(record["state"])


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    mesh = Mesh(tmp_path)
    agent: AgentProc | None = None
    try:
        with temporary_netns("kva") as ns2:
            n1, n2 = mesh.chain(["n1", "n2"])
            agent = AgentProc(n2, ns2, free_port(), tmp_path / "agent-n2.log")
            agent.start()
            yield Cluster(n1, n2, ns2, agent)
            assert agent.stop() == 0, "agent must exit 0 on SIGTERM"
    finally:
        if agent is not None:
            agent.kill()
        mesh.close()


VETH = {"type": "veth", "veth": {"peer": "veth1"}, "addresses": ["10.9.1.1/24"]}
VETH_PEER = {"type": "veth", "veth": {"peer": "veth0"}, "addresses": ["10.9.1.2/24"]}
ROUTE_KEY = "linux/route/main/10.99.0.0/24/veth0"
ROUTE = {"dst": "10.99.0.0/24", "dev": "veth0", "gateway": "10.9.1.2"}


def routes_to(ns: Netns, dst: str) -> list[dict[str, Any]]:
    return [r for r in ns.routes("main") if r.get("dst") == dst]


def test_config_set_on_n1_is_applied_in_n2_kernel_and_status_is_visible(
    cluster: Cluster,
) -> None:
    url = cluster.n1.cmd_url
    kvmesh(url, "config", "set", "n2", "linux/interface/veth0", json.dumps(VETH))
    kvmesh(url, "config", "set", "n2", "linux/interface/veth1", json.dumps(VETH_PEER))
    wait_until(lambda: {"veth0", "veth1"} <= cluster.ns2.link_names(), timeout=20,
               message="veth pair created in n2's namespace")
    wait_until(lambda: veth0_has_address(cluster.ns2), timeout=20)
    wait_until(lambda: cluster.state_from_n1("linux/interface/veth0") == "CONFIGURED",
               timeout=20, message="n1 sees veth0 CONFIGURED on n2")
    # `kvmesh status` from n1 shows the whole cluster.
    out = json.loads(kvmesh(url, "--json", "status", "n2").stdout)
    assert out["n2"]["linux/interface/veth1"]["state"] == "CONFIGURED"
    # `config get` shows the desired state as JSON.
    desired = json.loads(kvmesh(url, "config", "get", "n2", "linux/interface/").stdout)
    assert desired["linux/interface/veth0"]["veth"] == {"peer": "veth1"}


def test_route_before_interface_is_pending_then_applied(cluster: Cluster) -> None:
    url = cluster.n1.cmd_url
    kvmesh(url, "config", "set", "n2", ROUTE_KEY, json.dumps(ROUTE))
    wait_until(lambda: cluster.state_from_n1(ROUTE_KEY) == "PENDING", timeout=20,
               message="route PENDING as seen from n1")
    record = cluster.status_from_n1(ROUTE_KEY)
    assert record is not None and record["details"], "PENDING lists what is missing"
    assert routes_to(cluster.ns2, "10.99.0.0/24") == []
    kvmesh(url, "config", "set", "n2", "linux/interface/veth0", json.dumps(VETH))
    kvmesh(url, "config", "set", "n2", "linux/interface/veth1", json.dumps(VETH_PEER))
    wait_until(lambda: routes_to(cluster.ns2, "10.99.0.0/24"), timeout=20,
               message="route applied once its interface and gateway subnet exist")
    wait_until(lambda: cluster.state_from_n1(ROUTE_KEY) == "CONFIGURED", timeout=20)


def test_tombstone_deletes_and_status_goes(cluster: Cluster) -> None:
    url = cluster.n1.cmd_url
    kvmesh(url, "config", "set", "n2", "linux/interface/br0", json.dumps({"type": "bridge"}))
    wait_until(lambda: "br0" in cluster.ns2.link_names(), timeout=20)
    wait_until(lambda: cluster.state_from_n1("linux/interface/br0") == "CONFIGURED", timeout=20)
    kvmesh(url, "config", "del", "n2", "linux/interface/br0")
    wait_until(lambda: "br0" not in cluster.ns2.link_names(), timeout=20,
               message="bridge deleted after the tombstone")
    wait_until(lambda: cluster.status_from_n1("linux/interface/br0") is None, timeout=20,
               message="status removed")


def test_invalid_value_is_refused_by_the_cli(cluster: Cluster) -> None:
    result = kvmesh(cluster.n1.cmd_url, "config", "set", "n2", "linux/interface/veth0",
                    json.dumps({"type": "veth", "mtu": 12}), check=False)
    assert result.returncode == 2
    assert "mtu" in result.stderr
    with KvStoreClient(cluster.n1.cmd_url) as client:
        assert client.dump(prefix="config/n2/") == {}


def test_drift_is_repaired_by_downstream_resync(cluster: Cluster) -> None:
    url = cluster.n1.cmd_url
    kvmesh(url, "config", "set", "n2", "linux/interface/veth0", json.dumps(VETH))
    kvmesh(url, "config", "set", "n2", "linux/interface/veth1", json.dumps(VETH_PEER))
    kvmesh(url, "config", "set", "n2", ROUTE_KEY, json.dumps(ROUTE))
    wait_until(lambda: routes_to(cluster.ns2, "10.99.0.0/24"), timeout=20)
    cluster.ns2.ip("route", "del", "10.99.0.0/24")
    assert routes_to(cluster.ns2, "10.99.0.0/24") == []
    # From n1, through n2's agent REST API found in the mesh.
    out = kvmesh(url, "resync", "--node", "n2").stdout
    assert routes_to(cluster.ns2, "10.99.0.0/24"), "downstream resync restored the route"
    assert "1 operation(s), 0 error(s)" in out, out
    # The history shows it as Ligato does: an NB transaction of the downstream resync type.
    shown = kvmesh(url, "history", "--node", "n2").stdout
    assert "NB transaction (Downstream resync) |" in shown, shown
    assert "- type: NB transaction, downstream resync\n" in shown, shown


def veth0_has_address(ns: Netns) -> bool:
    """The agent's veth0 exists and has its address (not an error while it does not exist)."""
    return "veth0" in ns.link_names() and "10.9.1.1/24" in ns.addresses("veth0")


def test_restarted_agent_resyncs_without_duplicates(cluster: Cluster) -> None:
    url = cluster.n1.cmd_url
    kvmesh(url, "config", "set", "n2", "linux/interface/veth0", json.dumps(VETH))
    kvmesh(url, "config", "set", "n2", "linux/interface/veth1", json.dumps(VETH_PEER))
    wait_until(lambda: veth0_has_address(cluster.ns2), timeout=20)
    before = cluster.ns2.dump()
    assert cluster.agent.stop() == 0
    kvmesh(url, "config", "set", "n2", ROUTE_KEY, json.dumps(ROUTE))  # while the agent is down
    cluster.agent.start()
    wait_until(lambda: routes_to(cluster.ns2, "10.99.0.0/24"), timeout=30,
               message="change made while the agent was down is applied after restart")
    after = cluster.ns2.dump()
    assert after["links"] == before["links"], "no link re-created or duplicated"
    assert cluster.ns2.addresses("veth0") == ["10.9.1.1/24"]
    history = cluster.agent.get_json("/scheduler/txn-history")
    creates = [op for txn in history for op in txn.get("executed", [])
               if op.get("operation") == "CREATE" and op.get("key") == "linux/interface/veth0"]
    assert creates == [], "the restarted agent adopted veth0 instead of creating it again"


def test_rest_endpoints_and_bad_parameters(cluster: Cluster) -> None:
    agent = cluster.agent
    kvmesh(cluster.n1.cmd_url, "config", "set", "n2", "linux/interface/br9",
           json.dumps({"type": "bridge"}))
    wait_until(lambda: "br9" in cluster.ns2.link_names(), timeout=20)
    history = agent.get_json("/scheduler/txn-history")
    assert history and all("seq" in txn for txn in history)
    status, text = agent.get("/scheduler/txn-history?format=text")
    assert status == 200 and b"linux/interface/br9" in text
    seq = history[-1]["seq"]
    assert agent.get_json(f"/scheduler/txn-history?seq-num={seq}")[0]["seq"] == seq
    assert agent.get_json("/scheduler/key-timeline?key=linux/interface/br9")
    assert isinstance(agent.get_json("/scheduler/graph-snapshot"), list)
    for view in ("NB", "SB", "cached"):
        dumped = agent.get_json(f"/scheduler/dump?view={view}&key-prefix=linux/interface/br9")
        assert [d["key"] for d in dumped] == ["linux/interface/br9"], view
    statuses = agent.get_json("/scheduler/status")
    assert any(s["key"] == "linux/interface/br9" and s["state"] == "CONFIGURED"
               for s in statuses)
    status, dot = agent.get("/scheduler/graph?format=dot")
    assert status == 200 and b"digraph" in dot
    status, svg = agent.get("/scheduler/graph?format=svg")
    assert status in (200, 503) and (b"<svg" in svg if status == 200 else b"Graphviz" in svg)
    assert "scheduler" in agent.get_json("/scheduler/stats")
    assert agent.get_json("/scheduler/downstream-resync?verbose=true", "POST")["seq"] > 0
    recon = agent.get_json("/recon/services")
    assert recon["services"][0]["name"] == "kvstore-initial-sync"
    assert recon["devices"]["linux"] == "KNOWN"
    # The KvStore reported its initial sync done (no timeout), every stage completed.
    assert {name: st["state"] for name, st in recon["status"]["linux"].items()} == {
        "kvstore-initial-sync": "COMPLETED", "resync-interfaces": "COMPLETED",
        "resync-l2-domains": "COMPLETED", "resync-routes": "COMPLETED",
        "resync-other": "COMPLETED"}
    _status, metrics = agent.get("/metrics")
    families = {f.name: f for f in text_string_to_metric_families(metrics.decode())}
    names = set(families)
    assert families["kvmesh_kvstore_up"].samples[0].value == 1
    assert "kvmesh_recon_successes" in names
    assert any(n.startswith("kvmesh_kvstore") for n in names)
    # Info metrics: the versions of the node and of the agent (docs/compatibility.md).
    for family in ("kvmesh_kvstore_build_info", "kvmesh_agent_build_info"):
        (sample,) = families[family].samples
        assert sample.value == 1
        assert (sample.labels["version"], sample.labels["protocol"]) == (
            __version__, str(PROTOCOL_VERSION))
    for bad in ("/scheduler/txn-history?seq-num=x", "/scheduler/txn-history?since=yesterday",
                "/scheduler/txn-history?format=xml", "/scheduler/key-timeline",
                "/scheduler/dump?view=ALL", "/scheduler/graph?format=png",
                "/scheduler/downstream-resync?retry=maybe"):
        method = "POST" if "downstream" in bad else "GET"
        status, body = agent.get(bad, method)
        assert status == 400, (bad, status, body)
        assert json.loads(body)["error"]
    assert agent.get("/nope")[0] == 404
    assert agent.get("/scheduler/downstream-resync")[0] == 405


def test_agent_announces_itself_in_the_mesh(cluster: Cluster) -> None:
    with KvStoreClient(cluster.n1.cmd_url) as client:
        wait_until(lambda: client.get([agent_key("n2")]).get(agent_key("n2")), timeout=20)
        record = decode_status(client.get([agent_key("n2")])[agent_key("n2")].value)
    assert record is not None and record["http"] == f"127.0.0.1:{cluster.agent.http_port}"
    assert (record["version"], record["protocol"]) == (__version__, PROTOCOL_VERSION)
    # Device state is published too (RECONCILING first, then KNOWN).
    def device_state() -> str | None:
        with KvStoreClient(cluster.n1.cmd_url) as client:
            found = client.get(["node/n2/device/linux"]).get("node/n2/device/linux")
        record = decode_status(found.value if found else None)
        return None if record is None else str(record["state"])

    wait_until(lambda: device_state() == "KNOWN", timeout=20, message="n2's linux KNOWN")


def test_cli_views_of_a_remote_agent(cluster: Cluster, tmp_path: Path) -> None:
    url = cluster.n1.cmd_url
    kvmesh(url, "config", "set", "n2", "linux/interface/br3", json.dumps({"type": "bridge"}))
    wait_until(lambda: cluster.state_from_n1("linux/interface/br3") == "CONFIGURED", timeout=20)
    values = json.loads(kvmesh(url, "--json", "values", "--node", "n2").stdout)
    assert {"key": "linux/interface/br3", "state": "CONFIGURED"}.items() <= next(
        v for v in values if v["key"] == "linux/interface/br3").items()
    history = kvmesh(url, "history", "--node", "n2").stdout
    assert "linux/interface/br3" in history and "executed operations" in history
    kvmesh(url, "graph", "--node", "n2", "--out", str(tmp_path / "g.dot"))
    assert "br3" in (tmp_path / "g.dot").read_text()
    kvmesh(url, "report", "--node", "n2", "--out", str(tmp_path / "r.zip"))
    with zipfile.ZipFile(tmp_path / "r.zip") as zf:
        names = set(zf.namelist())
        assert {"txn-history.txt", "dump-SB.json", "status.json", "metrics.txt",
                "kvstore-counters.json"} <= names
        assert "linux/interface/br3" in zf.read("dump-NB.json").decode()
    services = json.loads(kvmesh(url, "--json", "recon", "services", "--node", "n2").stdout)
    assert [s["priority"] for s in services] == sorted(s["priority"] for s in services)
    status = kvmesh(url, "recon", "status", "n2").stdout.splitlines()
    assert [line.split()[2] for line in status[1:]] == [s["name"] for s in services]
    missing = kvmesh(url, "values", "--node", "nobody", check=False)
    assert missing.returncode == 1 and "no agent" in missing.stderr


def test_undecodable_desired_values_get_an_invalid_status(cluster: Cluster) -> None:
    """Values the agent cannot apply are not silently "not desired": INVALID with the reason."""
    import msgpack

    from kvstore.client import make_value

    deep: dict[str, Any] = {"type": "dummy"}
    for _ in range(100):
        deep = {"x": deep}
    bad = {
        "linux/interface/garbage": b"\xc1\xff\x00garbage",
        "linux/interface/alist": msgpack.packb([1, 2, 3]),
        "linux/interface/deep": b"\x91" * 100_000 + b"\x90",  # beyond msgpack's own stack
        "linux/interface/deepmap": msgpack.packb(deep),  # within it: refused by our bound
        "linux/interface/host/lo": msgpack.packb({"type": "dummy"}),  # a reserved key
    }
    with KvStoreClient(cluster.n1.cmd_url) as client:
        assert client.set({f"config/n2/{k}": make_value(v, version=1, originator_id="n1")
                           for k, v in bad.items()}) == {}
    def state_is(model_key: str, state: str | None) -> bool:
        return cluster.state_from_n1(model_key) == state

    for model_key in bad:
        wait_until(functools.partial(state_is, model_key, "INVALID"), timeout=30,
                   message=f"INVALID status of {model_key}")
        record = cluster.status_from_n1(model_key)
        assert record is not None and record["error"], record
    assert "msgpack map" in cluster.status_from_n1("linux/interface/alist")["error"]  # type: ignore[index]
    assert "deeper" in cluster.status_from_n1("linux/interface/deepmap")["error"]  # type: ignore[index]
    # The agent keeps serving: a valid value is applied, and a fixed value replaces its refusal.
    kvmesh(cluster.n1.cmd_url, "config", "set", "n2", "linux/interface/garbage",
           json.dumps({"type": "bridge"}))
    wait_until(lambda: cluster.state_from_n1("linux/interface/garbage") == "CONFIGURED",
               timeout=30, message="fixed value configured")
    # Deleting a refused value withdraws its refusal (reserved key and undecodable alike).
    for model_key in ("linux/interface/host/lo", "linux/interface/alist"):
        kvmesh(cluster.n1.cmd_url, "config", "del", "n2", model_key)
        wait_until(functools.partial(state_is, model_key, None), timeout=30,
                   message=f"refusal of {model_key} withdrawn")


def test_rest_gaps_parameters_dump_graph_resync(cluster: Cluster) -> None:
    agent = cluster.agent
    url = cluster.n1.cmd_url
    kvmesh(url, "config", "set", "n2", "linux/interface/br4", json.dumps({"type": "bridge"}))
    # The route only once br4 is configured: written together, the agent may take both in one
    # transaction, and the graph of br4's transaction below must not show the route.
    wait_until(lambda: cluster.state_from_n1("linux/interface/br4") == "CONFIGURED",
               timeout=30, message="br4 CONFIGURED")
    kvmesh(url, "config", "set", "n2", "linux/route/main/10.44.0.0/24/nodev4", "{}")
    wait_until(lambda: cluster.state_from_n1("linux/route/main/10.44.0.0/24/nodev4")
               == "PENDING", timeout=30, message="route PENDING")
    # Unknown parameters, unknown descriptor, SB view without Retrieve: 400 with the reason.
    for bad, fragment in (("/scheduler/stats?verbose=1", "unknown parameter"),
                          ("/scheduler/dump?colour=red", "unknown parameter"),
                          ("/scheduler/dump?descriptor=nope", "nope"),
                          ("/scheduler/dump?descriptor=linux-interface-address&view=SB",
                           "Retrieve"),
                          ("/scheduler/dump?state=HAPPY", "state")):
        status, body = agent.get(bad)
        assert status == 400 and fragment in json.loads(body)["error"], (bad, body)
    # state= filters the dump.
    pending = agent.get_json("/scheduler/dump?state=PENDING")
    assert [d["key"] for d in pending] == ["linux/route/main/10.44.0.0/24/nodev4"]
    assert "linux/interface/br4" in [
        d["key"] for d in agent.get_json("/scheduler/dump?state=CONFIGURED")]
    # The graph after one transaction, its values highlighted; SVG by default.
    history = agent.get_json("/scheduler/txn-history")
    (seq,) = [t["seq"] for t in history
              if any(v["key"] == "linux/interface/br4" for v in t["values"])]
    status, dot = agent.get(f"/scheduler/graph?format=dot&txn={seq}")
    assert status == 200
    br4 = [line for line in dot.decode().splitlines() if line.strip().startswith(
        '"linux/interface/br4"')]
    assert br4 and "penwidth=3" in br4[0]
    assert b"10.44.0.0/24" not in dot  # configured after that transaction
    status, svg = agent.get(f"/scheduler/graph?txn={seq}")
    assert status == 200 and b"<svg" in svg
    assert agent.get("/scheduler/graph?txn=99999")[0] == 404
    # A resync that runs although a value fails: 200, the failure in "errors".
    kvmesh(url, "config", "set", "n2", "linux/interface/vx40",
           json.dumps({"type": "vxlan", "vxlan": {"vni": 40}}))
    kvmesh(url, "config", "set", "n2", "linux/interface/vx41",
           json.dumps({"type": "vxlan", "vxlan": {"vni": 40}}))
    wait_until(lambda: {cluster.state_from_n1("linux/interface/vx40"),
                        cluster.state_from_n1("linux/interface/vx41")} & {"FAILED", "RETRYING"},
               timeout=30, message="one of the twin VXLANs fails")
    status, body = agent.get("/scheduler/downstream-resync", "POST")
    result = json.loads(body)
    assert status == 200 and result["seq"] > 0, body
    assert set(result["errors"]) & {"linux/interface/vx40", "linux/interface/vx41"}

"""End to end: n2 of a 3-node isolated cluster becomes a router from a state file
(docs/examples/router.yaml, applied with `kvmesh apply -f ... --wait`), and traffic from n1 to n3
through n2 proves every part of it (docs/linux.md, "A router, end to end").

The isolated cluster puts each node in a namespace of its own on a shared bridge, so n1 and n3
could reach each other directly; the test therefore wires extra veth links between the node
namespaces and sends the traffic to addresses only those links lead to:

    n1 h1 198.19.1.2 --- r1 198.19.1.1  n2  r3  198.19.3.1 --- h3  198.19.3.2  n3 (lo 198.19.9.9)
                                            r3b 198.19.4.1 --- h3b 198.19.4.2

n1 and n3 are plain hosts, set up with `ip` by the test; n2's ends are configured by kvmesh only
(existing links). Nothing leaves the test's namespaces: n1 routes only 198.19.9.9 to n2, n2 routes
only n1's prefix out (table 100, towards n3), n3 has no route beyond its own links, and every
address is in the namespaces the cluster made (deleted by `cluster.down`).

What each assertion proves:
* ping n1 -> 198.19.9.9 works: forwarding is on, the rule sends n1's prefix to table 100 (n2's main
  table has no route to 198.19.9.9), and the masquerade hides n1 (n3 has no route back to n1);
* n1 answers no ARP and never asks (its neighbor for n2 is static, `arp_ignore` 8): n2 reaches it
  only through the static neighbor kvmesh pinned;
* TCP to port 5001 times out (the forward chain drops it) while port 5002 connects;
* the listener in n3 sees n2's addresses as peers (masquerade), both of them over many
  connections (ECMP over r3 and r3b, hashed by ports).
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kvmesh import cluster
from kvmesh.cli.members import announced_nodes
from kvmesh.statefile import parse_state
from tests import cli_run
from tests.netns import Netns, netns_available
from tests.util import wait_until

pytestmark = pytest.mark.skipif(not netns_available(), reason="needs root and iproute2")

ROUTER_YAML = Path(__file__).resolve().parent.parent / "docs" / "examples" / "router.yaml"
N1_MAC = "02:00:00:00:01:02"  # pinned on n2 by the state file
N2_R1_MAC = "02:00:00:00:01:01"
SERVICE = "198.19.9.9"  # n3's address behind n2
DROPPED_PORT, OPEN_PORT = 5001, 5002
N2_ADDRESSES = {"198.19.3.1", "198.19.4.1"}  # n2's ends towards n3: what masquerade shows
CONNECTIONS = 24  # over two equal paths, all on one path by chance: 2 * 2**-24

# A TCP server on `host` and each port given: answers every connection with the peer's address.
LISTENER = """
import selectors, socket, sys
sel = selectors.DefaultSelector()
for port in sys.argv[2:]:
    sel.register(socket.create_server((sys.argv[1], int(port))), selectors.EVENT_READ)
print("ready", flush=True)
while True:
    for key, _ in sel.select():
        conn, peer = key.fileobj.accept()
        with conn:
            conn.sendall(f"{peer[0]}\\n".encode())
"""
# `count` connections to host:port, one line each: the address the server saw, or why none.
CLIENT = """
import socket, sys
host, port, count, timeout = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
for _ in range(count):
    try:
        with socket.create_connection((host, port), timeout=timeout) as conn:
            print(conn.makefile().readline().strip(), flush=True)
    except TimeoutError:
        print("timeout", flush=True)
    except OSError as exc:
        print(f"error {exc}", flush=True)
"""


class Nodes:
    """The cluster's node namespaces and the operator's CLI."""

    def __init__(self, state: cluster.ClusterState, env: dict[str, str]) -> None:
        lab = state.isolated_lab()
        assert lab is not None
        self.n1, self.n2, self.n3 = (Netns(lab.namespaces[n]) for n in ("n1", "n2", "n3"))
        self.env = {**os.environ, **env}

    def kvmesh(self, *args: str) -> subprocess.CompletedProcess[str]:
        return cli_run.kvmesh(args, env=self.env)

    def wire(self) -> None:
        """The links between the nodes (n2's ends left down and bare: kvmesh's job) and the
        hosts n1 and n3."""
        n1, n2, n3 = self.n1, self.n2, self.n3
        n1.ip("link", "add", "h1", "address", N1_MAC, "type", "veth",
              "peer", "name", "r1", "address", N2_R1_MAC, "netns", n2.name)
        n3.ip("link", "add", "h3", "type", "veth", "peer", "name", "r3", "netns", n2.name)
        n3.ip("link", "add", "h3b", "type", "veth", "peer", "name", "r3b", "netns", n2.name)
        n1.batch(["addr add 198.19.1.2/24 dev h1", "link set h1 up",
                  f"neigh add 198.19.1.1 lladdr {N2_R1_MAC} dev h1 nud permanent",
                  f"route add {SERVICE}/32 via 198.19.1.1 dev h1"])
        # n1 answers no ARP request: only a static neighbor on n2 reaches it.
        n1.exec("sysctl", "-qw", "net.ipv4.conf.h1.arp_ignore=8")
        n3.batch(["addr add 198.19.3.2/24 dev h3", "addr add 198.19.4.2/24 dev h3b",
                  f"addr add {SERVICE}/32 dev lo", "link set h3 up", "link set h3b up"])
        # A fresh node does not forward (the namespace's default, made explicit).
        n2.exec("sysctl", "-qw", "net.ipv4.ip_forward=0")

    def connect(self, port: int, count: int = 1) -> list[str]:
        out = self.n1.exec(sys.executable, "-c", CLIENT, SERVICE, str(port), str(count), "2")
        return out.stdout.splitlines()  # per connection: the peer n3 saw, "timeout" or "error"


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[Nodes]:
    run_dir = tmp_path / "run"
    try:
        state = cluster.up(3, "chain", run_dir=run_dir, isolated=True, timeout=90)
        with state.client("n1") as client:  # n2 a known member: `apply` accepts the file
            wait_until(lambda: announced_nodes(client) == {"n1", "n2", "n3"}, 30,
                       message="node/<name>/ keys")
        lab = Nodes(state, cluster.client_env(run_dir))
        lab.wire()
        yield lab
    finally:
        cluster.down(run_dir)


@pytest.fixture
def listener(lab: Nodes) -> Iterator[subprocess.Popen[str]]:
    """The TCP server in n3 on both ports (a drop is only a drop if something listens)."""
    proc = subprocess.Popen(["ip", "netns", "exec", lab.n3.name, sys.executable, "-c", LISTENER,
                             SERVICE, str(DROPPED_PORT), str(OPEN_PORT)],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 30)
        assert ready and proc.stdout.readline().strip() == "ready", "listener in n3 did not start"
        yield proc
    finally:
        proc.kill()
        proc.wait()


def test_n2_routes_filters_and_masquerades_n1_to_n3(lab: Nodes,
                                                    listener: subprocess.Popen[str]) -> None:
    keys = set(parse_state(ROUTER_YAML.read_text())["n2"])
    applied = lab.kvmesh("--json", "apply", "-f", str(ROUTER_YAML), "--wait", "--timeout", "60")
    assert applied.returncode == 0, applied.stdout + applied.stderr
    rows = {row["key"]: row["result"] for row in json.loads(applied.stdout)}
    assert rows == dict.fromkeys(keys, "applied")
    planned = lab.kvmesh("plan", "-f", str(ROUTER_YAML), "--detailed-exitcode")
    assert planned.returncode == 0 and planned.stdout.strip() == "no changes", planned

    # Traffic from n1 to n3 through n2.
    ping = lab.n1.exec("ping", "-c", "1", "-W", "2", SERVICE, check=False)
    assert ping.returncode == 0, ping.stdout + ping.stderr
    assert lab.connect(DROPPED_PORT) == ["timeout"]  # dropped by n2's forward chain
    peers = lab.connect(OPEN_PORT, count=CONNECTIONS)
    assert len(peers) == CONNECTIONS
    # n3 sees n2's address, never n1's (masquerade), and both of them (ECMP over r3 and r3b).
    assert set(peers) == N2_ADDRESSES, peers

    # What the kernel of n2 holds.
    neighbors = lab.n2.ip_json("neigh", "show", "dev", "r1")
    assert [(n["dst"], n["lladdr"], n["state"]) for n in neighbors
            if n["dst"] == "198.19.1.2"] == [("198.19.1.2", N1_MAC, ["PERMANENT"])]
    rules = lab.n2.ip_json("rule", "show")
    assert any(r.get("src") == "198.19.1.0" and r.get("srclen") == 24 and r["table"] == "100"
               and r["priority"] == 100 for r in rules), rules
    # Nothing leaves the namespaces: no main table has a default route (n2's is in table 100).
    for node in (lab.n1, lab.n2, lab.n3):
        assert all(route["dst"] != "default" for route in node.ip_json("route", "show")), node
    [default] = lab.n2.ip_json("route", "show", "table", "100")
    assert default["dst"] == "default"
    assert {(hop["gateway"], hop["dev"]) for hop in default["nexthops"]} == {
        ("198.19.3.2", "r3"), ("198.19.4.2", "r3b")}

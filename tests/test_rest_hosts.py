"""Talking to another host's agent reaches that host, or fails (issue 25).

Three "hosts" (network namespaces on a bridge, kvmesh.netlab), each made with `kvmesh node init`
and running `kvmesh node run --config` on the file it wrote:
  h1  REST on 127.0.0.1:8080, plain HTTP (loopback only, the default documented before 0.5:
      the original bug's setup)
  h2  REST on its own address, TLS with the certificate `node init` made (pinned from its
      member record), no token file
  h3  REST on 127.0.0.1:8080, plain HTTP, like h1
The CLI runs inside h1's namespace, talks to h1's KvStore, and has the operator's key and token
(`kvmesh keys token`, beside the key file) and no CA. Membership records are written the way
`kvmesh member add` writes them (`rest_record_fields`, the same function its options call).

The original bug: from h1, `kvmesh values --node h3` printed h1's own values, exit 0 (the CLI
dialled h3's loopback address, which on h1 is h1's agent).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgpack
import pytest

from kvmesh import launch, netlab
from kvmesh.cluster import write_node_config
from kvmesh.rest_pin import member_key, rest_record_fields
from kvstore import ClientCurve, KvStoreClient, load_key_pair, load_public_key
from kvstore.client import make_value
from tests.netns import netns_available
from tests.util import wait_until

pytestmark = [pytest.mark.process, pytest.mark.netns,
              pytest.mark.skipif(not netns_available(), reason="needs root and iproute2")]

KVMESH = [sys.executable, "-m", "kvmesh"]
HOSTS = ("h1", "h2", "h3")
LOOPBACK_REST = {"h1": "127.0.0.1:8080", "h3": "127.0.0.1:8080"}


@dataclass
class Host:
    name: str
    netns: str
    directory: Path
    config: dict[str, Any]
    proc: launch.Launched | None = None

    @property
    def cmd_url(self) -> str:
        return str(self.config["cmd_url"])

    @property
    def public_key(self) -> Path:
        return self.directory / "keys" / f"{self.name}.key"


@dataclass
class Fleet:
    tmp: Path
    lab: netlab.Lab
    ops: Path  # the operator's key pair and token
    hosts: dict[str, Host] = field(default_factory=dict)
    versions: dict[str, int] = field(default_factory=dict)

    def cli(self, on: str, *args: str) -> subprocess.CompletedProcess[str]:
        """`kvmesh ARGS` inside host `on`, talking to its node, as the operator (no CA, no
        token file given: the token beside the key file, the certificates pinned)."""
        host = self.hosts[on]
        env = {k: v for k, v in os.environ.items() if not k.startswith("KVMESH_")}
        return subprocess.run(
            ["ip", "netns", "exec", host.netns, *KVMESH, "--url", host.cmd_url,
             "--key-file", str(self.ops / "op.key_secret"), "--server-key",
             str(host.public_key), *args],
            capture_output=True, text=True, timeout=60, env=env, check=False)

    def client(self, on: str = "h1") -> KvStoreClient:
        host = self.hosts[on]
        curve = ClientCurve(load_key_pair(str(self.ops / "op.key_secret")),
                            load_public_key(str(host.public_key)))
        return KvStoreClient(host.cmd_url, timeout_s=10, curve=curve)

    def write_member(self, name: str, **record: Any) -> None:
        """A `member/<name>` record as `kvmesh member add` writes it (a newer version each
        time: a removal is a newer record with state "removed")."""
        self.versions[name] = self.versions.get(name, 0) + 1
        value = {"name": name, "role": "peer", "peers": [], "added_by": "op",
                 "added_at": int(time.time()), "state": "active", **record}
        with self.client() as client:
            client.set({member_key(name): make_value(msgpack.packb(value),
                                                     version=self.versions[name],
                                                     originator_id="h1")})

    def admit(self, name: str, rest_url: str, cert: Path, **extra: Any) -> None:
        self.write_member(name, **rest_record_fields(rest_url, str(cert), None), **extra)


def token_sha256(ops: Path) -> str:
    return hashlib.sha256((ops / "op.token").read_text().strip().encode()).hexdigest()


def node_init(fleet: Fleet, name: str, join: Host | None) -> Host:
    directory = fleet.tmp / name
    args = [*KVMESH, "node", "init", name, "--dir", str(directory),
            "--cmd-url", f"tcp://{fleet.lab.address(name)}:60002",
            "--data-dir", str(fleet.tmp / "data" / name),
            "--operator-key", str(fleet.ops / "op.key")]
    if name in LOOPBACK_REST:
        args += ["--http", LOOPBACK_REST[name]]
    if join is not None:
        args += ["--join", f"{join.name}={join.cmd_url}", "--join-key", str(join.public_key)]
    done = subprocess.run(args, capture_output=True, text=True, timeout=60, check=True)
    assert "kvmesh member add" in done.stdout
    config = tomllib.loads((directory / f"{name}.toml").read_text())
    return Host(name, fleet.lab.namespaces[name], directory, config)


def start(host: Host, fleet: Fleet) -> None:
    """`kvmesh node run --config NAME.toml`, the file `node init` wrote. h1 and h3 run their
    REST API as documented before 0.5 (plain HTTP on loopback): their files lose the
    certificate. h1 also takes the other side of the joins (`--peer`, and the joiners' keys:
    what `member add --peer h1` does once membership is in the mesh)."""
    path = host.directory / f"{host.name}.toml"
    if host.name in LOOPBACK_REST:
        config = tomllib.loads(path.read_text())
        for option in ("http_cert", "http_key"):
            del config["agent"][option]
        tables = {name: config.pop(name) for name in ("peers", "agent")}
        write_node_config(path, config, tables)
    argv = [*KVMESH, "node", "run", "--config", str(path), "--downstream-resync-s", "3600"]
    if host.name == "h1":
        for other in fleet.hosts.values():
            if other is not host:
                argv += ["--peer", f"{other.name}={other.cmd_url}"]
                (host.directory / "authorized-keys" / "peer" / f"{other.name}.key").write_bytes(
                    other.public_key.read_bytes())
    host.proc = launch.start(launch.in_netns(host.netns, argv), fleet.tmp / f"{host.name}.log")


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    tmp = tmp_path_factory.mktemp("hosts")
    ops = tmp / "ops"
    for command in (["keys", "generate", "op"], ["keys", "token", "op"]):
        subprocess.run([*KVMESH, *command, "--out", str(ops)], check=True, capture_output=True)
    lab = netlab.create_lab(list(HOSTS))
    fleet = Fleet(tmp, lab, ops)
    try:
        h1 = node_init(fleet, "h1", None)
        fleet.hosts["h1"] = h1
        for name in HOSTS[1:]:
            fleet.hosts[name] = node_init(fleet, name, h1)
        for host in fleet.hosts.values():
            start(host, fleet)
        for host in fleet.hosts.values():
            assert host.proc is not None
            host.proc.wait_answering(host.cmd_url, timeout=60, curve=ClientCurve(
                load_key_pair(str(ops / "op.key_secret")),
                load_public_key(str(host.public_key))))
        fleet.write_member("op", role="operator", token_sha256=token_sha256(ops))
        for host in fleet.hosts.values():
            if host.name in LOOPBACK_REST:  # admitted without REST fields (no pin)
                fleet.write_member(host.name, cmd_url=host.cmd_url,
                                   pub_url=host.config["pub_url"])
            else:
                fleet.admit(host.name, f"https://{host.config['agent']['http']}",
                            host.directory / f"{host.name}-rest.pem", cmd_url=host.cmd_url,
                            pub_url=host.config["pub_url"])
        with fleet.client() as client:
            for host in fleet.hosts.values():
                client.set_key(f"config/{host.name}/linux/interface/only-on-{host.name}",
                               msgpack.packb({"type": "dummy"}))

        def agents_announced() -> bool:
            with fleet.client() as client:
                return len(client.dump("node/")) >= len(HOSTS)

        wait_until(agents_announced, timeout=60, interval=0.2, message="agents announced")
        yield fleet
    finally:
        for host in fleet.hosts.values():
            if host.proc is not None:
                host.proc.terminate()
        netlab.destroy_lab(lab)


def values(fleet: Fleet, on: str, node: str) -> subprocess.CompletedProcess[str]:
    return fleet.cli(on, "--json", "values", "--node", node)


def keys_of(done: subprocess.CompletedProcess[str]) -> set[str]:
    assert done.returncode == 0, done.stderr
    return {row["key"] for row in json.loads(done.stdout)}


def keys_once_answered(done: subprocess.CompletedProcess[str]) -> set[str] | None:
    """For waiting: the keys, or None while the agent refuses (an agent learns the operator's
    token from the mesh a moment after it starts: 401 until then)."""
    if done.returncode != 0 and "HTTP 401" in done.stderr:
        return None
    return keys_of(done)


def test_a_loopback_only_agent_on_another_host_is_refused_not_retargeted(fleet: Fleet) -> None:
    """The original bug: h3's agent announced 127.0.0.1:8080; from h1 that is h1's agent."""
    for command in (["--json", "values", "--node", "h3"], ["resync", "--node", "h3"]):
        done = fleet.cli("h1", *command)
        assert done.returncode == 1, done.stdout
        assert "only-on-h1" not in done.stdout
        assert "h3's agent listens only on loopback (127.0.0.1:8080)" in done.stderr
        assert "ask on h3, or give h3's agent a reachable --http address" in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1
    # On h3 itself, the same command reaches h3's agent.
    assert "linux/interface/only-on-h3" in wait_until(
        lambda: keys_of(values(fleet, "h3", "h3")), timeout=30, interval=0.2)


def test_values_of_another_host_come_from_that_host(fleet: Fleet) -> None:
    """h2's REST certificate is pinned from its member record (no CA), the operator's token is
    accepted for its hash in the mesh (h2 has no token file)."""
    shown = wait_until(lambda: keys_once_answered(values(fleet, "h1", "h2")),
                       timeout=30, interval=0.2) or set()
    assert "linux/interface/only-on-h2" in shown and "linux/interface/only-on-h1" not in shown
    assert "linux/interface/only-on-h1" in keys_of(values(fleet, "h1", "h1"))
    # A write too: the member token is an operator's (h2's log records who asked).
    resync = fleet.cli("h1", "resync", "--node", "h2")
    assert resync.returncode == 0, resync.stderr
    h2 = fleet.hosts["h2"].proc
    assert h2 is not None
    wait_until(lambda: "REST POST /scheduler/downstream-resync by member op's operator token "
               "(mesh)" in h2.log(), timeout=10, message="h2 logged the resync")


def test_an_answer_from_another_node_is_an_error(fleet: Fleet) -> None:
    """A member record that points at another node's agent: that agent names itself, and the
    CLI refuses its answer (exit 1, one line, no output)."""
    h2 = fleet.hosts["h2"]
    h2_url = f"https://{h2.config['agent']['http']}"
    fleet.admit("ghost", h2_url, h2.directory / "h2-rest.pem")
    done = values(fleet, "h1", "ghost")
    assert done.returncode == 1 and done.stdout == ""
    assert "answered as node 'h2', not node 'ghost'" in done.stderr
    # Pinned to a certificate h2 does not have: refused before the request (and token) is sent.
    fleet.admit("ghost", h2_url, fleet.hosts["h1"].directory / "h1-rest.pem")
    done = values(fleet, "h1", "ghost")
    assert done.returncode == 1 and done.stdout == ""
    assert "other than the one node ghost's member record pins" in done.stderr


def test_the_operator_token_stops_working_when_the_member_is_removed(fleet: Fleet) -> None:
    assert "linux/interface/only-on-h2" in (wait_until(
        lambda: keys_once_answered(values(fleet, "h1", "h2")), timeout=30, interval=0.2)
        or set())
    digest = token_sha256(fleet.ops)
    fleet.write_member("op", role="operator", token_sha256=digest, state="removed")
    try:
        def refused() -> str:
            done = values(fleet, "h1", "h2")
            return "" if done.returncode == 0 else done.stderr

        error = wait_until(refused, timeout=10, interval=0.2)
        assert "HTTP 401" in error and "wrong bearer token" in error
    finally:
        # Removal is final (kvstore.membership.drop_readmissions): the operator comes back under
        # a new name, with the same token.
        fleet.write_member("op2", role="operator", token_sha256=digest)
    assert "linux/interface/only-on-h2" in (wait_until(
        lambda: keys_once_answered(values(fleet, "h1", "h2")), timeout=10, interval=0.2)
        or set())

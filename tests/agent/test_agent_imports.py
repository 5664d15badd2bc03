"""What a running agent process has imported (issue 21, lighter processes; BENCHMARKS.md says
what each process loads and why).

A real agent (`kvmesh agent run`: a KvStore node, the Linux southbound in a namespace, the REST
API) applies a value, and its own `-X importtime` record (PYTHONPROFILEIMPORTTIME, written to its
log) says what it loaded: not networkx (no longer used), not prometheus_client until /metrics is
scraped, not the console and the stream hub until it is browsed, not the CLI's other commands
(YAML, the REST client), not pyroute2 beyond rtnetlink.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kvmesh import launch
from kvmesh.agent.desired import encode_config_value
from kvmesh.agent.keys import config_key
from kvmesh.rest_client import AgentRest, RestError
from kvstore.client import KvStoreClient
from tests.kvstore.conftest import Mesh, free_port
from tests.netns import netns_available, temporary_netns
from tests.util import wait_until

pytestmark = [
    pytest.mark.netns,
    pytest.mark.skipif(not netns_available(), reason="needs root and iproute2 (ip netns)"),
]

# The record names what `import` statements load, not a module the CLI loads by
# importlib.import_module (a command module): the CLI's other agent commands show by what they
# import (the REST client; YAML, through the operator commands).
NOT_LOADED = (
    "networkx",
    "prometheus_client",  # until the first /metrics scrape
    "kvmesh.agent.ui.console",  # the console: until its first /ui request
    "kvmesh.agent.stream_hub",  # GET /stream's hub: until a stream or the console needs it
    "yaml",
    "kvmesh.rest_client",
    "pyroute2.ndb.main",
    "pyroute2.ipdb",
)
# Loaded for sure: finding them tells that the record is read right.
LOADED = ("kvmesh.agent.supervisor", "kvmesh.agent.agent", "southbound.linux.netlink",
          "kvmesh.agent.http_server")
IMPORT_LINE = re.compile(r"^import time:\s+\d+ \|\s+\d+ \|\s*(\S+)\s*$", re.MULTILINE)
BRIDGE = "linux/interface/br0"


def imported(log: Path) -> set[str]:
    return set(IMPORT_LINE.findall(log.read_text(errors="replace")))


def test_an_agent_at_work_loads_only_what_it_uses(tmp_path: Path) -> None:
    mesh = Mesh(tmp_path)
    agent: launch.Launched | None = None
    log = tmp_path / "agent.log"
    try:
        with temporary_netns("kvi") as ns:
            (node,) = mesh.chain(["n1"])
            port = free_port()
            options = launch.AgentOptions(linux_netns=ns.name, http=f"127.0.0.1:{port}",
                                          downstream_resync_s=3600, assume_current=True)
            agent = launch.start(launch.AgentSpec("n1", node.cmd_url, options), log,
                                 env={"PYTHONPROFILEIMPORTTIME": "1"})

            def rest() -> AgentRest:  # a new one each time: the agent writes its token at start
                return AgentRest.at(f"127.0.0.1:{port}")

            def bridge_configured() -> bool:
                assert agent is not None and agent.alive(), log.read_text(errors="replace")
                try:
                    statuses = rest().json("GET", "/scheduler/status")
                except RestError:
                    return False
                return any(s["key"] == BRIDGE and s["state"] == "CONFIGURED" for s in statuses)

            with KvStoreClient(node.cmd_url) as client:
                client.set_key(config_key("n1", BRIDGE), encode_config_value({"type": "bridge"}))
            wait_until(bridge_configured, timeout=60, message="the agent applied a value")
            loaded = imported(log)
            assert set(LOADED) <= loaded, sorted(loaded)
            assert [module for module in NOT_LOADED if module in loaded] == []

            rest().request("GET", "/metrics")  # prometheus_client loads now, on use
            assert "prometheus_client" in imported(log)
            rest().request("GET", "/ui/login")  # the console: its login page, no credential
            assert {"kvmesh.agent.ui.console", "kvmesh.agent.stream_hub"} <= imported(log)
            assert agent.stop() == 0
    finally:
        if agent is not None:
            agent.kill()
        mesh.close()

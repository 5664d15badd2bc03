"""`kvmesh plan` through the one REST client (issue 17 item 6): it reaches an agent that uses
TLS and a token, fails (exit 1) when a node's scheduler cannot be asked unless `--offline`, and
`--detailed-exitcode` exits 2 for changes only. A real node and agent process on loopback."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from kvmesh import launch
from kvmesh.envnames import HTTP_CA_ENV, HTTP_TOKEN_ENV
from tests import cli_run
from tests.kvstore.conftest import REPO, Mesh, free_port
from tests.util import wait_until

TOKEN = "plan-token-0123456789abcdef"


@dataclass
class PlanSetup:
    url: str
    tmp: Path
    env: dict[str, str]  # the token and the CA of the agent

    def plan(self, *args: str, env: dict[str, str] | None = None,
             ) -> subprocess.CompletedProcess[str]:
        return cli_run.kvmesh(["--url", self.url, "plan", *args], cwd=REPO,
                              env=self.env if env is None else env)

    def state_file(self, text: str, name: str = "state.yaml") -> str:
        path = self.tmp / name
        path.write_text(text)
        return str(path)


@pytest.fixture(scope="module")  # one node and agent: every test only reads (plans)
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PlanSetup]:
    tmp_path = tmp_path_factory.mktemp("plan")
    mesh = Mesh(tmp_path)
    try:
        yield from _plan_setup(mesh, tmp_path)
    finally:
        mesh.close()


def _plan_setup(mesh: Mesh, tmp_path: Path) -> Iterator[PlanSetup]:
    crt, key, token = tmp_path / "agent.crt", tmp_path / "agent.key", tmp_path / "token"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(crt)], check=True, capture_output=True)
    token.write_text(TOKEN + "\n")
    node = mesh.start(mesh.allocate("pl"))
    agent = launch.start(launch.AgentSpec("pl", node.cmd_url, launch.AgentOptions(
        http=f"127.0.0.1:{free_port()}", http_cert=crt, http_key=key, http_token_file=token)),
        None, cwd=REPO)
    try:
        with node.client() as client:
            wait_until(lambda: "node/pl/agent" in client.get(["node/pl/agent"]), timeout=30,
                       message="agent registered its REST address")
        base = {k: v for k, v in os.environ.items() if k not in (HTTP_TOKEN_ENV, HTTP_CA_ENV)}
        yield PlanSetup(node.cmd_url, tmp_path,
                        {**base, HTTP_TOKEN_ENV: str(token), HTTP_CA_ENV: str(crt)})
    finally:
        agent.terminate(timeout=30)


STATE = yaml.safe_dump({"nodes": {"pl": {"linux/interface/br0": {"type": "bridge"}}}})


def test_plan_asks_an_agent_with_tls_and_a_token(setup: PlanSetup) -> None:
    path = setup.state_file(STATE)
    done = setup.plan("-f", path)
    assert done.returncode == 0, done.stderr
    assert "scheduler plan (" in done.stdout and "linux/interface/br0" in done.stdout
    assert setup.plan("-f", path, "--detailed-exitcode").returncode == 2


def test_a_plan_that_could_not_ask_the_scheduler_fails(setup: PlanSetup) -> None:
    path = setup.state_file(STATE)
    no_token = {k: v for k, v in setup.env.items() if k != HTTP_TOKEN_ENV}
    refused = setup.plan("-f", path, env=no_token)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "HTTP 401" in refused.stdout and "could not be asked" in refused.stderr
    assert setup.plan("-f", path, "--detailed-exitcode", env=no_token).returncode == 1
    offline = setup.plan("-f", path, "--offline", env=no_token)
    assert offline.returncode == 0, offline.stderr
    assert "+ linux/interface/br0" in offline.stdout and "scheduler plan" not in offline.stdout
    assert setup.plan("-f", path, "--offline", "--detailed-exitcode",
                      env=no_token).returncode == 2


@pytest.mark.parametrize("content", [None, "nodes: [not, a, map\n",
                                     yaml.safe_dump({"nodes": {"pl": {"linux/interface/b": {
                                         "type": "no-such-type"}}}})])
def test_detailed_exitcode_is_1_for_a_bad_or_missing_file(setup: PlanSetup,
                                                          content: str | None) -> None:
    path = str(setup.tmp / "missing.yaml") if content is None else setup.state_file(content)
    result = setup.plan("-f", path, "--detailed-exitcode")
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stderr.strip(), "a one-line reason"


def test_detailed_exitcode_usage_error_is_1(setup: PlanSetup) -> None:
    assert setup.plan("--detailed-exitcode").returncode == 1  # no -f

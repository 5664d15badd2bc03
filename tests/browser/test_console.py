"""The console in a real browser (Chromium through Playwright), against real clusters.

Two setups, each started once for the module: a 3-node isolated cluster (`kvmesh cluster up
--isolated`: namespaces, TLS, the Linux southbound) for what needs devices and peers, and one
loopback node with an operator and a reader token for the logins and the revision buttons."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kvmesh import cluster, netlab
from tests.browser.conftest import chromium_in, needs_browser, open_page
from tests.netns import netns_available, temporary_netns
from tests.util import agent_pids_serving, wait_until

pytestmark = [pytest.mark.browser, pytest.mark.process, pytest.mark.netns, pytest.mark.slow,
              needs_browser]

OP_TOKEN = "console-operator-token-0123456789"
READ_TOKEN = "console-reader-token-0123456789"


def kvmesh(env: dict[str, str], *args: str, check: bool = True, netns: str | None = None
           ) -> subprocess.CompletedProcess[str]:
    where = ["ip", "netns", "exec", netns] if netns else []
    out = subprocess.run([*where, sys.executable, "-m", "kvmesh", *args], capture_output=True,
                         text=True, timeout=60, env={**os.environ, **env})
    if check:
        assert out.returncode == 0, out.stderr
    return out


def expect(locator: Any, text: str, timeout_s: float = 10.0) -> None:
    from playwright.sync_api import expect as pw_expect

    pw_expect(locator).to_contain_text(text, timeout=timeout_s * 1000)


# -- a 3-node isolated cluster ------------------------------------------------------------------


@dataclass
class Iso:
    state: cluster.ClusterState
    env: dict[str, str]  # the cluster operator's (kvmesh cluster env)
    browser: Any  # Chromium in a namespace of its own on the cluster's bridge

    def url(self, node: str, path: str = "/ui/") -> str:
        return f"https://{self.state.nodes[node].http}{path}"

    def login(self, page: Any, node: str) -> None:
        link = kvmesh(self.env, "ui", "--node", node).stdout.strip()
        page.goto(link)
        assert page.url == self.url(node)


@pytest.fixture(scope="module")
def iso(tmp_path_factory: pytest.TempPathFactory, playwright: Any) -> Iterator[Iso]:
    if not netns_available():
        pytest.skip("needs root and network namespaces")
    tmp = tmp_path_factory.mktemp("console-iso")
    run_dir = tmp / "run"
    try:
        state = cluster.up(3, "chain", run_dir=run_dir, isolated=True, timeout=120)
        lab = state.isolated_lab()
        assert lab is not None
        namespace = netlab.attach_namespace(lab, "browser")
        state.lab = lab.to_json()  # `down` removes the browser's namespace too
        state.save()
        with chromium_in(playwright, namespace, tmp) as browser:
            yield Iso(state, cluster.client_env(run_dir, "n1"), browser)
    finally:
        cluster.down(run_dir)


@pytest.fixture
def iso_page(iso: Iso, request: pytest.FixtureRequest,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    yield from open_page(iso.browser, request, tmp_path_factory)


def agent_pid(http: str) -> int | None:
    """The agent process serving REST on `http`."""
    return next(iter(agent_pids_serving(http)), None)


def test_ticket_login_and_the_cluster_view_lists_every_node_and_its_devices(
        iso: Iso, iso_page: Any) -> None:
    link = kvmesh(iso.env, "ui", "--node", "n2").stdout.strip()
    assert "/ui/login?ticket=" in link
    iso_page.goto(link)
    assert iso_page.url == iso.url("n2")
    cookie = next(c for c in iso_page.context.cookies() if c["name"] == "kvmesh_session")
    assert cookie["httpOnly"] and cookie["secure"] and cookie["sameSite"] == "Strict"
    assert cookie["expires"] > time.time()
    table = iso_page.get_by_role("table", name="Nodes (3)")
    for name in ("n1", "n2", "n3"):
        row = table.get_by_role("row").filter(has=iso_page.get_by_role("link", name=name,
                                                                  exact=True))
        expect(row, "linux: KNOWN")
        expect(row, "full")
    map_svg = iso_page.locator("figure.map svg")
    expect(map_svg, "INITIALIZED")  # peerings drawn with their state, in words
    for name in ("n1", "n2", "n3"):
        expect(map_svg, name)
    # The ticket was for one login: used, it opens nothing.
    other = iso_page.context.browser.new_context(ignore_https_errors=True).new_page()
    other.goto(link)
    expect(other.locator("body"), "used or expired")
    other.goto(iso.url("n2"))
    assert other.url.endswith("/ui/login")  # no session: the login form, no data
    assert "n3" not in other.content()
    other.context.close()


def test_a_failed_value_shows_its_error_on_the_node_view(iso: Iso, iso_page: Any) -> None:
    iso.login(iso_page, "n2")
    iso_page.goto(iso.url("n2", "/ui/node?name=n2&state=FAILED"))
    # The kernel refuses a second VXLAN device with the same VNI and port (not retried).
    for name in ("vx0", "vx1"):
        kvmesh(iso.env, "config", "set", "n2", f"linux/interface/{name}",
               json.dumps({"type": "vxlan", "vxlan": {"vni": 42}}))
    values = iso_page.get_by_role("table", name="Values of n2 in state FAILED")
    expect(values, "VNI 42", timeout_s=20)  # live: no reload
    expect(values, "FAILED")
    row = values.get_by_role("row").filter(has_text="VNI 42")
    row.get_by_role("link").first.click()
    expect(iso_page.get_by_role("region", name="Value"), "vxlan")  # desired vs actual
    # Another agent's console shows it from the mesh too.
    iso.login(iso_page, "n1")
    iso_page.goto(iso.url("n1", "/ui/"))
    row = iso_page.get_by_role("table", name="Nodes (3)").get_by_role("row").filter(
        has=iso_page.get_by_role("link", name="n2", exact=True))
    expect(row, "VNI 42")
    expect(row, "degraded")


def test_a_config_set_on_another_node_appears_without_reload(iso: Iso, iso_page: Any) -> None:
    iso.login(iso_page, "n1")
    iso_page.goto(iso.url("n1", "/ui/keys?prefix=config/n3/"))
    iso_page.evaluate("window.notReloaded = true")
    env = {**iso.env, **cluster.client_env(Path(iso.state.run_dir), "n3")}
    kvmesh(env, "config", "set", "n3", "linux/interface/live7",
           json.dumps({"type": "bridge", "mtu": 1400}))
    started = time.monotonic()  # n3 has it: from here, through the mesh to n1's page
    expect(iso_page.get_by_role("table"), "config/n3/linux/interface/live7", timeout_s=2)
    seen = time.monotonic() - started
    assert iso_page.evaluate("window.notReloaded") is True
    expect(iso_page.get_by_role("table"), '"mtu": 1400')
    print(f"config set on n3 seen by n1's console after {seen:.2f} s")


def test_the_page_survives_an_agent_restart(iso: Iso, iso_page: Any) -> None:
    iso.login(iso_page, "n1")
    iso_page.goto(iso.url("n1", "/ui/keys?prefix=config/n1/"))
    iso_page.evaluate("window.notReloaded = true")
    http = str(iso.state.nodes["n1"].http)
    pid = wait_until(lambda: agent_pid(http) or 0, timeout=10, message="n1's agent")
    os.kill(pid, signal.SIGKILL)  # the node restarts its agent
    banner = iso_page.locator("#connection")
    from playwright.sync_api import expect as pw_expect

    pw_expect(banner).to_be_visible(timeout=15_000)
    expect(banner, "not reachable")
    wait_until(lambda: (agent_pid(http) or pid) != pid, timeout=60,
               message="n1's agent restarted")
    pw_expect(banner).to_be_hidden(timeout=30_000)
    kvmesh(iso.env, "config", "set", "n1", "linux/interface/after9",
           json.dumps({"type": "bridge"}))
    expect(iso_page.get_by_role("table"), "config/n1/linux/interface/after9", timeout_s=10)
    assert iso_page.evaluate("window.notReloaded") is True  # same iso_page, same session cookie


# -- one loopback node with an operator and a reader token -------------------------------------


@dataclass
class Loop:
    base: str
    env: dict[str, str]
    netns: str  # the node, its agent, the CLI calls and the browser all run in it
    browser: Any

    def cli(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return kvmesh(self.env, *args, netns=self.netns, check=check)

    def login_with_token(self, iso_page: Any, token: str) -> None:
        iso_page.goto(f"{self.base}/ui/")
        assert iso_page.url.endswith("/ui/login")
        iso_page.get_by_label("Bearer token").fill(token)
        iso_page.get_by_role("button", name="Log in").click()
        iso_page.wait_for_url(f"{self.base}/ui/")

    def pending_revision(self, tmp: Path, key: str, timeout_s: float) -> int:
        path = tmp / f"{key.replace('/', '_')}.yaml"
        path.write_text(json.dumps({"nodes": {"s1": {key: {"type": "bridge"}}}}))
        self.cli("apply", "-f", str(path), "--no-wait", "--confirm-timeout", str(timeout_s))
        rows = json.loads(self.cli("--json", "config", "history", "s1").stdout)
        assert rows[-1]["confirm"] == "pending"
        return int(rows[-1]["rev"])

    def revision_state(self, rev: int) -> str | None:
        rows = json.loads(self.cli("--json", "config", "history", "s1").stdout)
        return next(row["confirm"] for row in rows if row["rev"] == rev)


@pytest.fixture(scope="module")
def loop(tmp_path_factory: pytest.TempPathFactory, playwright: Any) -> Iterator[Loop]:
    tmp = tmp_path_factory.mktemp("console-loop")
    (tmp / "op.token").write_text(OP_TOKEN + "\n")
    (tmp / "rd.token").write_text(READ_TOKEN + "\n")
    for name in ("op.token", "rd.token"):
        (tmp / name).chmod(0o600)
    # Fixed ports: the namespace is the test's own, nothing else binds in it.
    cmd_url, http = "tcp://127.0.0.1:7001", "127.0.0.1:7003"
    log = (tmp / "node.log").open("wb")
    with temporary_netns("kvui") as ns:
        ns.ip("link", "set", "lo", "up")
        proc = subprocess.Popen(
            ["ip", "netns", "exec", ns.name, sys.executable, "-m", "kvmesh", "node", "run",
             "--name", "s1", "--cmd-url", cmd_url, "--pub-url", "tcp://127.0.0.1:7002",
             "--ephemeral", "--insecure", "--agent", "--assume-current", "--http", http,
             "--http-token-file", str(tmp / "op.token"),
             "--http-read-token-file", str(tmp / "rd.token")], stdout=log, stderr=log)
        env = {"KVMESH_URL": cmd_url, "KVMESH_HTTP_TOKEN_FILE": str(tmp / "op.token")}
        try:
            with chromium_in(playwright, ns.name, tmp) as browser:
                loop = Loop(f"http://{http}", env, ns.name, browser)
                wait_until(lambda: proc.poll() is not None or loop.cli(
                    "ui", check=False).returncode == 0, timeout=60, message="agent of s1")
                assert proc.poll() is None, (tmp / "node.log").read_text()
                yield loop
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            log.close()


@pytest.fixture
def loop_page(loop: Loop, request: pytest.FixtureRequest,
              tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    yield from open_page(loop.browser, request, tmp_path_factory)


def post_from_page(page: Any, path: str, with_csrf: bool) -> int:
    """A POST sent by the page itself (its session cookie rides along)."""
    return int(page.evaluate(
        """async ([path, withCsrf]) => {
             const csrf = document.querySelector('meta[name="csrf-token"]').content;
             const resp = await fetch(path, {method: "POST", credentials: "same-origin",
                                              headers: withCsrf ? {"X-CSRF-Token": csrf} : {}});
             return resp.status;
           }""", [path, with_csrf]))


def test_operator_confirms_a_pending_revision_and_the_agent_does_not_roll_it_back(
        loop: Loop, loop_page: Any, tmp_path: Path) -> None:
    # Long enough for a loaded machine to log in and click first (else the agent rightly rolls
    # it back before the click).
    timeout_s = 15.0
    rev = loop.pending_revision(tmp_path, "linux/interface/keep1", timeout_s)
    applied = time.monotonic()
    loop.login_with_token(loop_page, OP_TOKEN)
    loop_page.goto(f"{loop.base}/ui/revisions?name=s1")
    row = loop_page.get_by_role("row").filter(
        has=loop_page.get_by_role("cell", name=str(rev), exact=True))
    expect(row, "pending")
    row.get_by_role("button", name="Confirm").click()
    expect(loop_page.locator("#notice"), f"Revision {rev} of s1 confirmed")
    expect(row, "confirmed")
    assert loop.revision_state(rev) == "confirmed"
    # Past the confirm timeout (and the agent's 0.5 s poll): nothing was rolled back. A wait
    # for time to pass, not for an event: what is checked is that nothing happens.
    time.sleep(max(0.0, applied + timeout_s + 2.0 - time.monotonic()))
    assert loop.revision_state(rev) == "confirmed"
    desired = json.loads(loop.cli("config", "get", "s1").stdout)
    assert "linux/interface/keep1" in desired


def test_reader_sees_no_buttons_and_the_server_refuses_anyway(loop: Loop, loop_page: Any,
                                                              tmp_path: Path) -> None:
    rev = loop.pending_revision(tmp_path, "linux/interface/rd1", 120)
    loop.login_with_token(loop_page, READ_TOKEN)
    expect(loop_page.locator("header"), "Signed in as reader")
    loop_page.goto(f"{loop.base}/ui/revisions?name=s1")
    row = loop_page.get_by_role("row").filter(
        has=loop_page.get_by_role("cell", name=str(rev), exact=True))
    expect(row, "pending")
    assert loop_page.get_by_role("button", name="Confirm").count() == 0
    assert loop_page.get_by_role("button", name="Roll back").count() == 0
    assert loop_page.get_by_role("button", name="Resync s1").count() == 0
    status = post_from_page(loop_page, f"/revisions/confirm?node=s1&rev={rev}",
                            with_csrf=True)
    assert status == 403
    assert loop.revision_state(rev) == "pending"


def test_a_forged_request_without_the_csrf_token_is_refused(loop: Loop, loop_page: Any,
                                                            tmp_path: Path) -> None:
    rev = loop.pending_revision(tmp_path, "linux/interface/csrf1", 120)
    loop.login_with_token(loop_page, OP_TOKEN)
    loop_page.goto(f"{loop.base}/ui/revisions?name=s1")
    confirm = f"/revisions/confirm?node=s1&rev={rev}"
    assert post_from_page(loop_page, confirm, with_csrf=False) == 403
    assert loop.revision_state(rev) == "pending"
    # The same request with the page's token goes through: it was the token that was missing.
    assert post_from_page(loop_page, confirm, with_csrf=True) == 200
    assert loop.revision_state(rev) == "confirmed"
    # A wrong pasted token opens nothing.
    fresh = loop_page.context.browser.new_context().new_page()
    fresh.goto(f"{loop.base}/ui/login")
    fresh.get_by_label("Bearer token").fill("not-a-token")
    fresh.get_by_role("button", name="Log in").click()
    expect(fresh.locator("body"), "not one of this agent's")
    fresh.context.close()

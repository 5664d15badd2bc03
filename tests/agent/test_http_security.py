"""The agent's REST server: bearer token, TLS, bounds, 405s (kvmesh.agent.http_server).

The server runs in-process with a stub backend, and is spoken to over real TCP sockets (raw
sockets where a test needs a misbehaving client); the CLI test runs real processes."""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kvmesh.agent.http_api import HttpApi
from kvmesh.agent.http_server import HttpConfigError, HttpLimits, HttpSecurity, load_security
from tests.kvstore.conftest import REPO, Mesh, free_port
from tests.kvstore.conftest import mesh as mesh  # the fixture
from tests.util import wait_until

TOKEN = "s3cret-token-0123456789"


class StubBackend:
    resyncs = 0

    def stats(self) -> Any:
        return {"ok": True}

    def metrics_text(self) -> str:
        return "# backend metrics\n"

    def downstream_resync(self, retry: bool) -> Any:
        self.resyncs += 1
        return {"errors": {}, "record": {"seq": self.resyncs}}

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(name)


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n")
    return path


@pytest.fixture
def cert(tmp_path: Path) -> tuple[Path, Path]:
    crt, key = tmp_path / "agent.crt", tmp_path / "agent.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(crt)], check=True, capture_output=True)
    return crt, key


def serve(security: HttpSecurity | None = None, **limits: Any) -> HttpApi:
    return HttpApi(StubBackend(), "127.0.0.1", 0, security=security,
                   limits=HttpLimits(**limits))


@pytest.fixture
def api_factory() -> Iterator[Any]:
    made: list[HttpApi] = []

    def make(security: HttpSecurity | None = None, **limits: Any) -> HttpApi:
        made.append(serve(security, **limits))
        return made[-1]

    yield make
    for api in made:
        api.close()


def call(api: HttpApi, method: str, path: str, headers: dict[str, str] | None = None,
         body: bytes | None = None, context: ssl.SSLContext | None = None,
         ) -> tuple[int, dict[str, Any], http.client.HTTPResponse]:
    host, port = api.address
    conn: http.client.HTTPConnection
    if context is not None:
        conn = http.client.HTTPSConnection(host, port, timeout=10, context=context)
    else:
        conn = http.client.HTTPConnection(host, port, timeout=10)
    conn.request(method, path, body=body, headers=headers or {})
    resp = conn.getresponse()
    raw = resp.read()
    conn.close()
    return resp.status, (json.loads(raw) if raw else {}), resp


def test_token_is_required_on_every_request_when_configured(api_factory: Any,
                                                            token_file: Path) -> None:
    api = api_factory(load_security(None, None, str(token_file)))
    for headers in ({}, {"Authorization": "Bearer wrong-token-0123456789"},
                    {"Authorization": f"Basic {TOKEN}"}):
        status, body, resp = call(api, "GET", "/scheduler/stats", headers)
        assert status == 401 and "token" in body["error"]
        assert resp.getheader("WWW-Authenticate", "").startswith("Bearer")
        status, _, _ = call(api, "POST", "/scheduler/downstream-resync", headers)
        assert status == 401
    assert api.counters["unauthorized"] == 6
    good = {"Authorization": f"Bearer {TOKEN}"}
    assert call(api, "GET", "/scheduler/stats", good)[:2] == (200, {"ok": True})
    assert call(api, "POST", "/scheduler/downstream-resync", good)[:2] == (
        200, {"seq": 1, "errors": {}})
    host, port = api.address
    conn = http.client.HTTPConnection(host, port, timeout=10)
    conn.request("GET", "/metrics", headers=good)
    metrics = conn.getresponse().read().decode()
    conn.close()
    assert "kvmesh_agent_http_unauthorized_total 6" in metrics


def test_loopback_without_token_answers_everyone(api_factory: Any) -> None:
    api = api_factory()
    assert call(api, "GET", "/scheduler/stats")[0] == 200


def test_other_addresses_need_tls_and_token(token_file: Path, cert: tuple[Path, Path]) -> None:
    with pytest.raises(HttpConfigError, match=r"TLS.*token"):
        HttpApi(StubBackend(), "0.0.0.0", 0)
    with pytest.raises(HttpConfigError, match="TLS"):
        HttpApi(StubBackend(), "0.0.0.0", 0,
                security=load_security(None, None, str(token_file)))
    with pytest.raises(HttpConfigError, match="go together"):
        load_security(str(cert[0]), None, None)
    short = token_file.parent / "short"
    short.write_text("abc")
    with pytest.raises(HttpConfigError, match="at least 16"):
        load_security(None, None, str(short))
    api = HttpApi(StubBackend(), "0.0.0.0", 0,
                  security=load_security(str(cert[0]), str(cert[1]), str(token_file)))
    api.close()


def test_tls_serves_https_and_refuses_plaintext(api_factory: Any, cert: tuple[Path, Path],
                                                token_file: Path) -> None:
    api = api_factory(load_security(str(cert[0]), str(cert[1]), str(token_file)))
    context = ssl.create_default_context(cafile=str(cert[0]))
    good = {"Authorization": f"Bearer {TOKEN}"}
    assert call(api, "GET", "/scheduler/stats", good, context=context)[0] == 200
    with pytest.raises((http.client.HTTPException, OSError)):
        call(api, "GET", "/scheduler/stats", good)
    wait_until(lambda: api.counters.get("tls_failures", 0) >= 1, timeout=5)


@pytest.mark.parametrize("method", ["PUT", "DELETE", "PATCH", "OPTIONS", "HEAD"])
def test_unserved_methods_get_405_json(api_factory: Any, method: str) -> None:
    api = api_factory()
    status, body, resp = call(api, method, "/scheduler/stats")
    assert status == 405
    assert resp.getheader("Content-Type") == "application/json"
    assert resp.getheader("Allow") == "GET, POST"
    if method != "HEAD":
        assert "not allowed" in body["error"]


def test_size_limits_answer_json(api_factory: Any) -> None:
    api = api_factory(max_request_line=200, max_header_bytes=300, max_body_bytes=10)
    status, body, _ = call(api, "GET", "/scheduler/stats?x=" + "a" * 300)
    assert status == 414 and "request line" in body["error"]
    status, body, _ = call(api, "GET", "/scheduler/stats", {"X-Big": "b" * 400})
    assert status == 431 and "headers" in body["error"]
    status, body, _ = call(api, "POST", "/scheduler/downstream-resync", body=b"x" * 11)
    assert status == 413 and "body" in body["error"]
    status, body, _ = call(api, "BREW", "/scheduler/stats")
    assert status == 501 and "error" in body  # http.server's own errors are JSON too
    assert api.counters["status_414"] == api.counters["status_431"] == 1


def test_headers_that_never_finish_are_dropped(api_factory: Any) -> None:
    api = api_factory(request_timeout_s=1.0)
    slow = socket.create_connection(api.address, timeout=10)
    slow.sendall(b"GET /scheduler/stats HTTP/1.1\r\nHost: x\r\n")  # and never the blank line
    started = time.monotonic()
    assert slow.recv(100) == b""  # closed by the server
    assert time.monotonic() - started < 5
    slow.close()
    assert api.counters["request_timeouts"] == 1


def test_a_dozen_idle_sockets_do_not_starve_it(api_factory: Any) -> None:
    api = api_factory(request_timeout_s=30.0, max_connections=16)
    idle = [socket.create_connection(api.address, timeout=10) for _ in range(12)]
    try:
        started = time.monotonic()
        assert call(api, "GET", "/scheduler/stats")[0] == 200
        assert time.monotonic() - started < 2
    finally:
        for sock in idle:
            sock.close()


def test_connections_over_the_cap_are_closed_at_once(api_factory: Any) -> None:
    api = api_factory(request_timeout_s=30.0, max_connections=2)
    idle = [socket.create_connection(api.address, timeout=10) for _ in range(2)]
    try:
        wait_until(lambda: len(api._server._deadlines) == 2, timeout=5)
        extra = socket.create_connection(api.address, timeout=10)
        assert extra.recv(100) == b""
        extra.close()
        assert api.counters["rejected_busy"] == 1
    finally:
        for sock in idle:
            sock.close()
    wait_until(lambda: answers(api), timeout=10, message="a slot is free again")


def answers(api: HttpApi) -> bool:
    try:
        return call(api, "GET", "/scheduler/stats")[0] == 200
    except (http.client.HTTPException, OSError):
        return False


def test_cli_passes_the_token_to_an_agent(mesh: Mesh, tmp_path: Path, token_file: Path) -> None:
    node = mesh.start(mesh.allocate("tk"))
    port = free_port()
    agent = subprocess.Popen(
        [sys.executable, "-m", "kvmesh", "--url", node.cmd_url, "agent", "run", "--name", "tk",
         "--http", f"127.0.0.1:{port}", "--http-token-file", str(token_file)],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        with node.client() as client:
            wait_until(lambda: "node/tk/agent" in client.get(["node/tk/agent"]), timeout=30,
                       message="agent registered its REST address")
        base = [sys.executable, "-m", "kvmesh", "--url", node.cmd_url]
        refused = subprocess.run([*base, "values", "--node", "tk"], capture_output=True,
                                 text=True, timeout=60, cwd=REPO)
        assert refused.returncode == 1 and "HTTP 401" in refused.stderr
        ok = subprocess.run([*base, "--http-token-file", str(token_file), "values", "--node",
                             "tk"], capture_output=True, text=True, timeout=60, cwd=REPO)
        assert ok.returncode == 0, ok.stderr
    finally:
        agent.terminate()
        agent.wait(timeout=30)


def test_agent_refuses_an_open_rest_api(mesh: Mesh) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "kvmesh", "agent", "run", "--name", "x", "--http",
         f"0.0.0.0:{free_port()}"], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert result.returncode == 2
    assert "not loopback" in result.stderr and result.stderr.count("\n") == 1

"""The agent's REST server: bearer tokens always, TLS, bounds, slow clients, 405s
(kvmesh.agent.http_server, docs/security.md "REST API").

The server runs in-process with a stub backend, and is spoken to over real TCP sockets (raw
sockets where a test needs a misbehaving client); the agent and CLI tests run real processes,
the "local user" ones as an unprivileged uid."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import socket
import ssl
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kvmesh import launch
from kvmesh.agent.http_api import HttpApi
from kvmesh.agent.http_auth import OPERATOR, READER, AccessPolicy, Credential
from kvmesh.agent.http_security import HttpConfigError, HttpSecurity, load_security
from kvmesh.agent.http_server import HttpLimits
from kvmesh.agent.http_token import (
    TokenFileError,
    read_token,
    token_dir,
    token_name,
    write_token_file,
)
from kvmesh.agent.proc_net import anyone_listens, describe_uid, loopback_peer_uid
from kvmesh.envnames import HTTP_CA_ENV, HTTP_TOKEN_ENV
from kvmesh.rest_client import AgentRest
from tests.kvstore.conftest import REPO, Mesh, free_port
from tests.kvstore.conftest import mesh as mesh  # the fixture
from tests.util import wait_until

TOKEN = "s3cret-token-0123456789"
READ_TOKEN = "r3ader-token-0123456789"
GOOD = {"Authorization": f"Bearer {TOKEN}"}
WRITES = ("/configuration", "/scheduler/downstream-resync", "/agent/assume-current")


class StubBackend:
    resyncs = 0

    def stats(self) -> Any:
        return {"ok": True}

    def metrics_text(self) -> str:
        return "# backend metrics\n"

    def downstream_resync(self, retry: bool) -> Any:
        self.resyncs += 1
        return {"errors": {}, "record": {"seq": self.resyncs}}

    def assume_current(self) -> Any:
        return {"all_known": True}

    def apply_configuration(self, values: dict[str, Any], replace: bool, who: str) -> Any:
        self.applied.append(who)
        return {"ok": True, "seq": 1, "revision": 1, "changed": sorted(values)}

    def __init__(self) -> None:
        self.applied: list[str] = []

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


def policy(public_reads: bool = False) -> HttpSecurity:
    return HttpSecurity(AccessPolicy((Credential(TOKEN, OPERATOR, "test operator token"),
                                      Credential(READ_TOKEN, READER, "test reader token")),
                                     public_reads))


def serve(security: HttpSecurity | None = None, **limits: Any) -> HttpApi:
    return HttpApi(StubBackend(), "127.0.0.1", 0, node="stub", security=security or policy(),
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


def body_of(values: dict[str, Any]) -> bytes:
    return json.dumps({"values": values}).encode()


def test_token_is_required_on_every_request(api_factory: Any) -> None:
    api = api_factory()
    for headers in ({}, {"Authorization": "Bearer wrong-token-0123456789"},
                    {"Authorization": f"Basic {TOKEN}"}):
        status, body, resp = call(api, "GET", "/scheduler/stats", headers)
        assert status == 401 and "token" in body["error"]
        assert resp.getheader("WWW-Authenticate", "").startswith("Bearer")
        status, _, _ = call(api, "POST", "/scheduler/downstream-resync", headers)
        assert status == 401
    assert api.counters["auth_refused"] == 6
    assert call(api, "GET", "/scheduler/stats", GOOD)[:2] == (200, {"ok": True})
    assert call(api, "POST", "/scheduler/downstream-resync", GOOD)[:2] == (
        200, {"seq": 1, "errors": {}})
    host, port = api.address
    conn = http.client.HTTPConnection(host, port, timeout=10)
    conn.request("GET", "/metrics", headers=GOOD)
    metrics = conn.getresponse().read().decode()
    conn.close()
    assert "kvmesh_agent_http_auth_refused_total 6" in metrics


def test_loopback_writes_need_the_token_also_with_public_reads(api_factory: Any) -> None:
    """Issue 17 item 1: on loopback nothing that changes the node is answered without the
    operator token; reads need it too unless --http-public-reads."""
    closed, public = api_factory(), api_factory(policy(public_reads=True))
    for api in (closed, public):
        for path in WRITES:
            status, body, resp = call(api, "POST", path, body=body_of({}))
            assert status == 401, (path, body)
            assert "bearer token is required" in body["error"]
            assert resp.getheader("Content-Type") == "application/json"
        assert api.counters["auth_refused"] == len(WRITES)
    assert call(closed, "GET", "/scheduler/stats")[0] == 401
    assert call(public, "GET", "/scheduler/stats")[:2] == (200, {"ok": True})
    status, body, _ = call(public, "POST", "/configuration", GOOD, body_of({"a/b": {}}))
    assert status in (200, 400), body  # authorised: the values are the API's business


def test_a_reader_token_reads_and_cannot_write(api_factory: Any) -> None:
    api = api_factory()
    reader = {"Authorization": f"Bearer {READ_TOKEN}"}
    assert call(api, "GET", "/scheduler/stats", reader)[0] == 200
    for path in WRITES:
        status, body, _ = call(api, "POST", path, reader, body_of({}))
        assert status == 403 and "may only read" in body["error"], body
    assert api.counters["auth_refused"] == len(WRITES)


def test_a_write_records_the_identity_the_token_proves() -> None:
    stub = StubBackend()
    api = HttpApi(stub, "127.0.0.1", 0, security=policy(), node="stub")
    try:
        status, body, _ = call(api, "POST", "/configuration", GOOD,
                               body_of({"linux/interface/br0": {"type": "bridge"}}))
        assert status == 200, body
        [who] = stub.applied
        assert who.startswith("test operator token from 127.0.0.1:"), who
        assert f"local uid {os.getuid()}" in who  # the account behind the loopback socket
    finally:
        api.close()


def test_other_addresses_need_tls(token_file: Path, cert: tuple[Path, Path]) -> None:
    with pytest.raises(HttpConfigError, match=r"needs TLS"):
        HttpApi(StubBackend(), "0.0.0.0", 0, node="stub",
                security=load_security(None, None, None))
    with pytest.raises(HttpConfigError, match="TLS"):
        HttpApi(StubBackend(), "0.0.0.0", 0, node="stub",
                security=load_security(None, None, str(token_file)))
    with pytest.raises(HttpConfigError, match="go together"):
        load_security(str(cert[0]), None, None)
    short = token_file.parent / "short"
    short.write_text("abc")
    with pytest.raises(HttpConfigError, match="at least 16"):
        load_security(None, None, str(short))
    with pytest.raises(HttpConfigError, match="token of their own"):
        load_security(None, None, str(token_file), str(token_file))
    for token in (str(token_file), None):  # no token file: members' tokens from the mesh
        api = HttpApi(StubBackend(), "0.0.0.0", 0, node="stub",
                      security=load_security(str(cert[0]), str(cert[1]), token))
        api.close()


def test_tls_serves_https_and_refuses_plaintext(api_factory: Any, cert: tuple[Path, Path],
                                                token_file: Path) -> None:
    api = api_factory(load_security(str(cert[0]), str(cert[1]), str(token_file)))
    context = ssl.create_default_context(cafile=str(cert[0]))
    assert call(api, "GET", "/scheduler/stats", GOOD, context=context)[0] == 200
    with pytest.raises((http.client.HTTPException, OSError)):
        call(api, "GET", "/scheduler/stats", GOOD)
    wait_until(lambda: api.counters.get("tls_failures", 0) >= 1, timeout=5)


@pytest.mark.parametrize("method", ["PUT", "DELETE", "PATCH", "OPTIONS", "HEAD", "TRACE",
                                    "BREW"])
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
    status, body, _ = call(api, "POST", "/scheduler/downstream-resync", GOOD, b"x" * 11)
    assert status == 413 and "body" in body["error"]
    assert api.counters["status_414"] == api.counters["status_431"] == 1


def test_malformed_requests_get_400_json(api_factory: Any) -> None:
    api = api_factory()
    for raw in (b"GET\r\n\r\n", b"GET /x HTTP/1.1\r\nno colon here\r\n\r\n",
                b"GET /x HTTP/1.1\r\n folded: x\r\n\r\n", b"GET x HTTP/1.1\r\n\r\n",
                # digits str.isdigit() takes and int() does not (found by fuzzing http_head)
                b"POST /scheduler/downstream-resync HTTP/1.1\r\nAuthorization: Bearer "
                + TOKEN.encode() + b"\r\nContent-Length: 9\xb9\r\n\r\n"):
        with socket.create_connection(api.address, timeout=10) as sock:
            sock.sendall(raw)
            answer = b""
            while chunk := sock.recv(4096):
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 400 "), (raw, answer)
        assert b"\r\n\r\n{\"error\": " in answer


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
        assert call(api, "GET", "/scheduler/stats", GOOD)[0] == 200
        assert time.monotonic() - started < 2
    finally:
        for sock in idle:
            sock.close()


def test_past_the_cap_the_oldest_slow_connection_makes_room(api_factory: Any) -> None:
    api = api_factory(request_timeout_s=30.0, max_connections=2)
    oldest = socket.create_connection(api.address, timeout=10)
    oldest.sendall(b"GET /scheduler/stats HTTP/1.1\r\n")
    wait_until(lambda: len(api._server._connections) == 1, timeout=5)
    younger = socket.create_connection(api.address, timeout=10)
    wait_until(lambda: len(api._server._connections) == 2, timeout=5)
    try:
        assert call(api, "GET", "/scheduler/stats", GOOD)[0] == 200
        assert oldest.recv(100) == b""  # dropped for the newcomer
        assert api.counters["evicted_slow"] == 1
        younger.sendall(b"GET /scheduler/stats HTTP/1.1\r\n")  # still served its chance
    finally:
        oldest.close()
        younger.close()


def slowloris(address: tuple[str, int], count: int) -> list[socket.socket]:
    socks = []
    for _ in range(count):
        sock = socket.create_connection(address, timeout=10)
        sock.sendall(b"GET /scheduler/stats HTTP/1.1\r\nHost: x\r\n")
        socks.append(sock)
    return socks


@pytest.mark.parametrize("cap", [HttpLimits.max_connections, 64])
def test_slowloris_does_not_fail_normal_requests(api_factory: Any, cap: int) -> None:
    """Issue 17 item 5: 200 connections trickling headers, and every normal request is answered
    200, each within a deadline, while they trickle (with the default connection cap, and with
    a cap they exceed: then the oldest trickling ones make room)."""
    api = api_factory(max_connections=cap)
    normal_deadline_s = 2.0
    attackers = slowloris(api.address, 200)
    stop = threading.Event()

    def trickle() -> None:
        while not stop.wait(0.05):
            for sock in list(attackers):
                with contextlib.suppress(OSError):
                    sock.sendall(b"X-a: b\r\n")

    trickler = threading.Thread(target=trickle, daemon=True)
    trickler.start()
    results: list[tuple[int, float]] = []
    lock = threading.Lock()

    def client(n: int) -> None:
        for _ in range(n):
            started = time.monotonic()
            try:
                status = call(api, "GET", "/scheduler/stats", GOOD)[0]
            except (http.client.HTTPException, OSError):
                status = 0
            with lock:
                results.append((status, time.monotonic() - started))

    try:
        clients = [threading.Thread(target=client, args=(15,)) for _ in range(4)]
        for thread in clients:
            thread.start()
        for thread in clients:
            thread.join(timeout=60)
    finally:
        stop.set()
        trickler.join(timeout=10)
        for sock in attackers:
            sock.close()
    assert len(results) == 60
    failed = [r for r in results if r[0] != 200 or r[1] > normal_deadline_s]
    assert not failed, f"{len(failed)} of 60 normal requests failed or were late: {failed[:5]}"
    if cap < 200:
        assert api.counters.get("evicted_slow", 0) > 0  # the cap was reached and held


def test_cli_passes_the_token_to_an_agent(mesh: Mesh, tmp_path: Path, token_file: Path) -> None:
    node = mesh.start(mesh.allocate("tk"))
    port = free_port()
    agent = launch.start(launch.AgentSpec("tk", node.cmd_url, launch.AgentOptions(
        http=f"127.0.0.1:{port}", http_token_file=token_file)), None, cwd=REPO)
    try:
        with node.client() as client:
            wait_until(lambda: "node/tk/agent" in client.get(["node/tk/agent"]), timeout=30,
                       message="agent registered its REST address")
        base = [sys.executable, "-m", "kvmesh", "--url", node.cmd_url]
        refused = subprocess.run([*base, "values", "--node", "tk"], capture_output=True,
                                 text=True, timeout=60, cwd=REPO, env=without_token_env())
        assert refused.returncode == 1 and "HTTP 401" in refused.stderr
        ok = subprocess.run([*base, "--http-token-file", str(token_file), "values", "--node",
                             "tk"], capture_output=True, text=True, timeout=60, cwd=REPO)
        assert ok.returncode == 0, ok.stderr
    finally:
        agent.terminate(timeout=30)


def without_token_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in (HTTP_TOKEN_ENV, HTTP_CA_ENV)}


def test_agent_refuses_an_open_rest_api(mesh: Mesh) -> None:
    # The CLI's own refusal: `kvmesh agent run` is called as a user would, not launched.
    result = subprocess.run(
        [sys.executable, "-m", "kvmesh", "agent", "run", "--name", "x", "--http",
         f"0.0.0.0:{free_port()}"], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert result.returncode == 2
    assert "not loopback" in result.stderr and result.stderr.count("\n") == 1


# -- a local user on the agent's host (issue 17 item 1) ------------------------------------------

NOBODY = 65534
MALLORY = r"""
import http.client, json, sys
host, port, token_path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
out = {}
try:
    open(token_path).read()
    out["token"] = "read"
except OSError as exc:
    out["token"] = exc.strerror
evil = {"values": {"linux/interface/evil0": {"type": "bridge", "addresses": ["10.66.0.1/24"]}}}
for name, method, path, body in [
        ("configure", "POST", "/configuration", evil),
        ("wipe", "POST", "/configuration", {"values": {}, "replace": True}),
        ("resync", "POST", "/scheduler/downstream-resync", None),
        ("assume", "POST", "/agent/assume-current", None),
        ("read", "GET", "/scheduler/dump", None)]:
    conn = http.client.HTTPConnection(host, port, timeout=30)
    conn.request(method, path, body=json.dumps(body).encode() if body else b"")
    resp = conn.getresponse()
    out[name] = [resp.status, json.loads(resp.read())]
    conn.close()
print(json.dumps(out))
"""


def unprivileged_python() -> str:
    """A Python interpreter the unprivileged uid can run (the test only needs its stdlib)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to run a process as another user")
    for candidate in ("/usr/bin/python3", sys.executable):
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            if subprocess.run([candidate, "-c", "pass"], user=NOBODY, group=NOBODY,
                              capture_output=True, timeout=30).returncode == 0:
                return candidate
    pytest.skip("no Python interpreter the unprivileged user can run")


def start_agent(node_url: str, name: str, port: int) -> launch.Launched:
    return launch.start(launch.AgentSpec(name, node_url, launch.AgentOptions(
        http=f"127.0.0.1:{port}")), None, cwd=REPO)


def test_a_local_user_can_neither_use_nor_read_the_agent_token(mesh: Mesh) -> None:
    python = unprivileged_python()
    node = mesh.start(mesh.allocate("lu"))
    port = free_port()
    agent = start_agent(node.cmd_url, "lu", port)  # no --http-token-file: it makes a token
    token = token_dir() / token_name("127.0.0.1", port)
    try:
        with node.client() as client:
            wait_until(lambda: "node/lu/agent" in client.get(["node/lu/agent"]), timeout=30,
                       message="agent registered its REST address")
        st = token.lstat()
        assert stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid()
        assert stat.S_IMODE(st.st_mode) in (0o600, 0o640) and not st.st_mode & 0o007
        mallory = subprocess.run([python, "-c", MALLORY, "127.0.0.1", str(port), str(token)],
                                 user=NOBODY, group=NOBODY, capture_output=True, text=True,
                                 timeout=120, cwd="/")
        assert mallory.returncode == 0, mallory.stderr
        seen = json.loads(mallory.stdout)
        assert seen.pop("token") == "Permission denied"
        for name, (status, body) in seen.items():
            assert status == 401 and "bearer token is required" in body["error"], (name, body)
        with node.client() as client:  # nothing reached the mesh
            assert not client.dump(prefix="config/lu/") and not client.dump(prefix="revision/")
        rest = AgentRest.at(f"127.0.0.1:{port}")  # root's client finds the agent's token
        assert rest.credentials.source == str(token)
        metrics = rest.request("GET", "/metrics").decode()
        assert "kvmesh_agent_http_auth_refused_total 5" in metrics
        values = subprocess.run([sys.executable, "-m", "kvmesh", "--url", node.cmd_url, "values",
                                 "--node", "lu"], capture_output=True, text=True, timeout=60,
                                cwd=REPO, env=without_token_env())
        assert values.returncode == 0, values.stderr
    finally:
        agent.terminate(timeout=30)
    assert not os.path.lexists(token), "the agent removes the token it made"


def test_a_planted_token_file_is_replaced_not_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep me\n")
    directory = tmp_path / "agents"
    directory.mkdir(mode=0o700)
    path = directory / "x.token"
    path.symlink_to(victim)
    write_token_file(path, "t" * 32)
    assert victim.read_text() == "keep me\n"
    assert not path.is_symlink() and read_token(path) == "t" * 32
    assert stat.S_IMODE(path.stat().st_mode) in (0o600, 0o640)
    directory.chmod(0o777)
    with pytest.raises(TokenFileError, match="writable by group or others"):
        write_token_file(path, "u" * 32)


def test_the_socket_table_names_the_local_user_and_the_listeners() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        with socket.create_connection(server.getsockname(), timeout=10) as client:
            assert loopback_peer_uid(client.getsockname(), server.getsockname()) == os.geteuid()
        assert anyone_listens(*server.getsockname())
    assert not anyone_listens("127.0.0.1", free_port())
    assert describe_uid(0) == "local uid 0 (root)"


def test_token_files_of_killed_agents_are_swept(tmp_path: Path) -> None:
    directory = tmp_path / "agents"
    directory.mkdir(mode=0o700)
    stale = directory / token_name("127.0.0.1", free_port())  # nobody listens there
    other_namespace = directory / "1-127.0.0.1-1.token"
    for path in (stale, other_namespace):
        path.write_text("x" * 20)
    with socket.create_server(("127.0.0.1", 0)) as server:
        fresh = directory / token_name(*server.getsockname())
        write_token_file(fresh, "f" * 32)  # sweeps on the way
        assert fresh.exists() and other_namespace.exists() and not stale.exists()


def test_the_client_takes_a_cluster_token_only_from_its_own_run_dir(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kvmesh.cluster import ClusterState, NodeInfo
    from kvmesh.rest_client import AgentAddress, credentials_for

    monkeypatch.delenv(HTTP_TOKEN_ENV, raising=False)
    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o700)
    token = run_dir / "http-token"
    token.write_text(TOKEN + "\n")
    token.chmod(0o600)
    ClusterState(str(run_dir), "chain", {"n1": NodeInfo("tcp://x:1", "tcp://x:2", None,
                                                        "198.18.0.1:8080")},
                 http_cert=str(run_dir / "cert.pem"), http_token_file=str(token)).save()
    address = AgentAddress("198.18.0.1", 8080, tls=True)
    found = credentials_for(address, run_dir)
    assert found.token == TOKEN and found.ca == str(run_dir / "cert.pem")
    assert credentials_for(AgentAddress("198.18.0.2", 8080), run_dir).token is None
    run_dir.chmod(0o777)  # another user could have put that cluster.json there
    assert credentials_for(address, run_dir).token is None


def test_a_forged_agent_address_gets_no_generated_token(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A compromised peer can announce any address for an agent; the client then sends no
    agent-made token anywhere but to the loopback address that token belongs to."""
    import kvmesh.rest_client as rest_client
    from kvmesh.rest_client import AgentAddress, credentials_for

    monkeypatch.delenv(HTTP_TOKEN_ENV, raising=False)
    monkeypatch.setattr(rest_client, "search_dirs", lambda: [tmp_path])
    monkeypatch.setattr(rest_client, "_cluster_credentials", lambda *_: None)
    for host, port in (("127.0.0.1", 8080), ("10.9.9.9", 8080)):
        (tmp_path / token_name(host, port)).write_text(TOKEN + "\n")
    assert credentials_for(AgentAddress("127.0.0.1", 8080)).token == TOKEN
    assert credentials_for(AgentAddress("127.0.0.1", 8081)).token is None  # another port
    assert credentials_for(AgentAddress("10.9.9.9", 8080)).token is None  # not loopback

"""Which node answered, and which tokens the mesh vouches for (issue 25: talking to another
host's agent must reach that host, or fail).

In-process agent REST servers with a stub backend over real TCP (and TLS) sockets; the client is
the CLI's one REST client (kvmesh.rest_client). The end-to-end version, with agents in network
namespaces standing in for hosts, is tests/test_rest_hosts.py."""

from __future__ import annotations

import hashlib
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest

from kvmesh.agent.http_api import HttpApi
from kvmesh.agent.http_auth import OPERATOR, READER, AccessPolicy, Credential, MemberToken
from kvmesh.agent.http_security import HttpSecurity, load_security
from kvmesh.agent.member_tokens import MemberTokens, tokens_of
from kvmesh.rest_client import AgentAddress, AgentRest, Credentials, RestError
from kvmesh.rest_pin import PinError, cert_sha256, member_rest, rest_record_fields
from tests.agent.test_http_security import TOKEN, StubBackend, call

MEMBER_TOKEN = "member-operator-token-0123456789"
READER_MEMBER_TOKEN = "member-reader-token-0123456789"


def sha(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def record(name: str, role: str = OPERATOR, state: str = "active", **extra: Any) -> bytes:
    return bytes(msgpack.packb({"name": name, "role": role, "state": state, **extra}))


def policy(members: MemberTokens | None = None) -> HttpSecurity:
    return HttpSecurity(AccessPolicy((Credential(TOKEN, OPERATOR, "own token"),), False,
                                     members or MemberTokens()))


@pytest.fixture
def serve() -> Iterator[Any]:
    made: list[HttpApi] = []

    def make(node: str, security: HttpSecurity | None = None, host: str = "127.0.0.1") -> HttpApi:
        made.append(HttpApi(StubBackend(), host, 0, security=security or policy(), node=node))
        return made[-1]

    yield make
    for api in made:
        api.close()


def test_every_answer_names_the_node(serve: Any) -> None:
    api = serve("h2")
    good = {"Authorization": f"Bearer {TOKEN}"}
    for method, path, headers, status in (("GET", "/scheduler/stats", good, 200),
                                          ("GET", "/scheduler/stats", {}, 401),
                                          ("GET", "/no/such/endpoint", good, 404),
                                          ("GET", "/scheduler/txn-history?seq-num=x", good, 400),
                                          ("TRACE", "/scheduler/stats", good, 405)):
        got, body, resp = call(api, method, path, headers)
        assert got == status
        assert resp.getheader("X-Kvmesh-Node") == "h2", (method, path)
        if status != 200:  # and every JSON error says it too
            assert body["node"] == "h2"


def test_the_client_refuses_an_answer_from_another_node(serve: Any) -> None:
    api = serve("h1")
    host, port = api.address
    own = Credentials(TOKEN, "test")
    assert AgentRest(AgentAddress(host, port, node="h1"), own).json(
        "GET", "/scheduler/stats") == {"ok": True}
    for expect in ("h2", "h1-"):
        rest = AgentRest(AgentAddress(host, port, node=expect), own)
        with pytest.raises(RestError, match=f"answered as node 'h1', not node '{expect}'") as exc:
            rest.json("GET", "/scheduler/stats")
        assert "listens only on loopback" in str(exc.value)  # the likely cause, said
        # A refusal from the wrong node is the wrong node too, not "wrong token".
        with pytest.raises(RestError, match="answered as node 'h1'"):
            AgentRest(AgentAddress(host, port, node=expect), Credentials("x" * 20, "t")).json(
                "GET", "/scheduler/stats")
    # Without a node to check (an address given by hand), nothing is refused.
    assert AgentRest(AgentAddress(host, port), own).json("GET", "/scheduler/stats") == {
        "ok": True}


def test_an_agent_that_does_not_name_itself_is_refused_when_it_should(serve: Any) -> None:
    """A 0.4.0 agent names nobody: accepted unless its records say it is newer (a pinned
    certificate, a version in its agent record)."""
    import http.server
    import threading

    class Old(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(b'{"old": true}')

        def log_message(self, *_args: Any) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Old)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        host, port = "127.0.0.1", server.server_address[1]
        own = Credentials(TOKEN, "test")
        assert AgentRest(AgentAddress(host, port, node="h2"), own).json("GET", "/x") == {
            "old": True}
        with pytest.raises(RestError, match="an agent that did not say, not node 'h2'"):
            AgentRest(AgentAddress(host, port, node="h2", names_itself=True), own).json(
                "GET", "/x")
    finally:
        server.shutdown()
        server.server_close()


def test_member_tokens_come_from_active_operator_and_reader_records() -> None:
    records = {
        "member/op": record("op", token_sha256=sha(MEMBER_TOKEN)),
        "member/ro": record("ro", READER, token_sha256=sha(READER_MEMBER_TOKEN)),
        "member/gone": record("gone", state="removed", token_sha256=sha("gone" * 8)),
        "member/h1": record("h1", "peer", token_sha256=sha("peer" * 8)),  # not a REST role
        "member/liar": record("other", token_sha256=sha("liar" * 8)),  # name is not its key's
        "member/bad": record("bad", token_sha256="ABC"),
        "member/junk": b"\xc1\xff not msgpack",
        "member/tomb": b"",
    }
    assert tokens_of(records) == (MemberToken(sha(MEMBER_TOKEN), OPERATOR, "op"),
                                  MemberToken(sha(READER_MEMBER_TOKEN), READER, "ro"))


def test_a_member_token_is_accepted_for_its_role_and_not_after_removal(serve: Any) -> None:
    members = MemberTokens()
    api = serve("h2", policy(members))
    operator = {"Authorization": f"Bearer {MEMBER_TOKEN}"}
    reader = {"Authorization": f"Bearer {READER_MEMBER_TOKEN}"}
    assert call(api, "GET", "/scheduler/stats", operator)[0] == 401  # not a member yet
    members.load({"member/op": record("op", token_sha256=sha(MEMBER_TOKEN)),
                  "member/ro": record("ro", READER, token_sha256=sha(READER_MEMBER_TOKEN))})
    assert call(api, "GET", "/scheduler/stats", operator)[0] == 200
    assert call(api, "POST", "/scheduler/downstream-resync", operator)[0] == 200
    assert call(api, "GET", "/scheduler/stats", reader)[0] == 200
    status, body, _ = call(api, "POST", "/scheduler/downstream-resync", reader)
    assert status == 403 and "may only read" in body["error"]
    members.load({"member/op": record("op", state="removed", token_sha256=sha(MEMBER_TOKEN))})
    assert call(api, "GET", "/scheduler/stats", operator)[0] == 401
    assert call(api, "GET", "/scheduler/stats", reader)[0] == 401
    # The agent's own token works throughout.
    assert call(api, "GET", "/scheduler/stats", {"Authorization": f"Bearer {TOKEN}"})[0] == 200


@pytest.fixture
def certs(tmp_path: Path) -> dict[str, tuple[Path, Path]]:
    made = {}
    for name in ("h1", "h2"):
        crt, key = tmp_path / f"{name}.crt", tmp_path / f"{name}.key"
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                        "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1",
                        "-subj", f"/CN={name}", "-keyout", str(key), "-out", str(crt)],
                       check=True, capture_output=True)
        made[name] = (crt, key)
    return made


@pytest.mark.process  # openssl makes the certificates
def test_the_pinned_certificate_is_checked_before_the_token_is_sent(
        serve: Any, certs: dict[str, tuple[Path, Path]]) -> None:
    h2 = serve("h2", load_security(str(certs["h2"][0]), str(certs["h2"][1]), None,
                                   members=MemberTokens()))
    host, port = h2.address
    own = Credentials(h2.security.access.credentials[0].token, "test")
    pinned = AgentRest(AgentAddress(host, port, True, "h2", cert_sha256(certs["h2"][0])), own)
    assert pinned.json("GET", "/scheduler/stats") == {"ok": True}  # no CA: the pin vouches
    wrong = AgentRest(AgentAddress(host, port, True, "h2", cert_sha256(certs["h1"][0])), own)
    with pytest.raises(RestError, match="other than the one node h2's member record pins"):
        wrong.json("GET", "/scheduler/stats")
    assert h2.counters.get("auth_refused", 0) == 0  # the request (its token) never went out
    unpinned = AgentRest(AgentAddress(host, port, True, "h2"), own)
    with pytest.raises(RestError, match="CERTIFICATE_VERIFY_FAILED"):
        unpinned.json("GET", "/scheduler/stats")  # self-signed and no CA given


@pytest.mark.process
def test_member_rest_fields_and_the_member_add_options(
        tmp_path: Path, certs: dict[str, tuple[Path, Path]]) -> None:
    token = tmp_path / "op.token"
    token.write_text(MEMBER_TOKEN + "\n")
    fields = rest_record_fields("https://198.18.0.2:8080", str(certs["h2"][0]), str(token))
    assert fields == {"rest_url": "https://198.18.0.2:8080",
                      "rest_cert_sha256": cert_sha256(certs["h2"][0]),
                      "token_sha256": sha(MEMBER_TOKEN)}
    assert MEMBER_TOKEN not in repr(fields)
    rest = member_rest(record("h2", "peer", **fields, cmd_url="tcp://198.18.0.2:60002"))
    assert (rest.rest_address, rest.rest_tls, rest.cert_sha256, rest.cmd_url) == (
        "198.18.0.2:8080", True, fields["rest_cert_sha256"], "tcp://198.18.0.2:60002")
    assert member_rest(record("h2", "peer", state="removed", **fields)).cert_sha256 is None
    for bad, message in ((("http://h:1", str(certs["h2"][0]), None), "https://HOST:PORT"),
                         (("https://h", str(certs["h2"][0]), None), "https://HOST:PORT"),
                         (("https://h:1", None, None), "go together"),
                         (("https://h:1", str(token), None), "not a PEM certificate"),
                         ((None, None, str(tmp_path / "missing")), "cannot read")):
        with pytest.raises(PinError, match=message):
            rest_record_fields(*bad)


def test_the_operator_token_beside_the_key_goes_only_to_pinned_or_local_agents(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every agent accepts it, so a forged `node/<N>/agent` address must not get it."""
    from kvmesh.rest_client import credentials_for
    from kvstore import KEY_FILE_ENV, generate

    for env in ("KVMESH_HTTP_TOKEN_FILE", "KVMESH_RUN_DIR"):
        monkeypatch.delenv(env, raising=False)
    _public, secret = generate("op", tmp_path / "ops")
    token = tmp_path / "ops" / "op.token"
    token.write_text(MEMBER_TOKEN + "\n")
    token.chmod(0o600)
    monkeypatch.setenv(KEY_FILE_ENV, str(secret))
    run_dir = tmp_path / "no-cluster"
    unpinned = credentials_for(AgentAddress("198.18.0.9", 8080, True, "h9"), run_dir)
    assert unpinned.token is None and "sent only to agents whose member record pins" in \
        unpinned.source
    pinned = AgentAddress("198.18.0.9", 8080, True, "h9", "ab" * 32)
    assert credentials_for(pinned, run_dir).token == MEMBER_TOKEN
    assert credentials_for(AgentAddress("127.0.0.1", 1), run_dir).token == MEMBER_TOKEN
    token.chmod(0o644)  # readable by others: not the operator's alone, not used
    assert credentials_for(pinned, run_dir).token is None

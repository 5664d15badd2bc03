"""The one client of the agents' REST API: every CLI command, the cluster launcher, the tests.

It finds an agent through the mesh (`node/<N>/agent`: address, and `tls`; the node's member
record `member/<N>`: its pinned REST certificate), speaks HTTP or HTTPS, sends a bearer token,
and turns every failure into one `RestError` line.

Reaching node N's agent, or failing (issue 25: from h1, `values --node h2` once showed h1's own
values, the CLI having dialled h2's loopback address on h1):
- every answer names the node that gave it (`X-Kvmesh-Node`); an answer from another node than
  the one asked for is an error, never output (a missing name too, when the agent is known to
  give one: its member record pins a certificate, or its record carries a version);
- N's agent announced on loopback while N is on another host (its member record's or a peer's
  command URL is not loopback, or it is the very address of the local node's agent) is refused
  at once: ask on N, or give N's agent a reachable --http address;
- TLS is verified by the fingerprint pinned in N's member record (`rest_cert_sha256`, set by an
  operator: kvmesh.rest_pin) before any token is sent; without a pin, against `--http-ca` /
  KVMESH_HTTP_CA, a cluster's certificate, else the system's CAs.

The token, first found of:
1. `--http-token-file` / KVMESH_HTTP_TOKEN_FILE (what the user says);
2. the cluster run directory (`kvmesh cluster up`): the token of the cluster that lists an
   agent at this address;
3. for an agent on loopback, the token it made at start, under the token directory of this user
   or root's, by the agent's network namespace and address (kvmesh.agent.http_token) — readable
   by root and the group `kvmesh` only;
4. the operator's own token beside their key file (`KVMESH_KEY_FILE` NAME.key_secret ->
   NAME.token, `kvmesh keys token`): accepted by every agent once its hash is in the operator's
   member record, so sent only to an agent on loopback or one whose certificate the member
   record pins (a forged `node/<N>/agent` address gets no token that opens every agent).
Never a path the mesh names: a forged agent record cannot make the client read a file and send
it elsewhere.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import http.client
import json
import os
import ssl
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvmesh import cluster_state as cluster
from kvmesh.agent.http_token import TokenFileError, read_token, search_dirs, token_name
from kvmesh.agent.http_wire import NODE_HEADER
from kvmesh.envnames import HTTP_CA_ENV, HTTP_TOKEN_ENV
from kvstore import KEY_FILE_ENV, is_loopback_host, safefs

HTTP_TIMEOUT_S = 30.0


class RestError(Exception):
    """One line for the user. `status`: the HTTP status when the agent answered (`answer`: its
    JSON body, if it was JSON); `exit_code`: 2 for unusable settings (a token or CA file), 1
    otherwise."""

    def __init__(self, message: str, status: int | None = None, exit_code: int = 1,
                 answer: Any = None) -> None:
        super().__init__(message)
        self.status = status
        self.exit_code = exit_code
        self.answer = answer


@dataclass(frozen=True)
class AgentAddress:
    """Where an agent listens and, when found through the mesh, what it must prove: the node
    it must name in every answer, the certificate it must present."""

    host: str
    port: int
    tls: bool = False
    node: str | None = None  # the node whose agent this must be (None: not checked)
    cert_sha256: str | None = None  # the pinned certificate (member record)
    names_itself: bool = False  # known to send X-Kvmesh-Node: an answer without it is refused

    @classmethod
    def parse(cls, text: str, tls: bool = False, **expect: Any) -> AgentAddress:
        host, sep, port = text.rpartition(":")
        if not sep or not port.isdigit():
            raise RestError(f"bad agent address {text!r} (expected HOST:PORT)")
        return cls(host.strip("[]"), int(port), tls, **expect)

    @property
    def text(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.text}"


def find_agent(client: Any, node: str) -> AgentAddress:
    """`node`'s agent as announced in the mesh (`client`: a KvStoreClient), with what it must
    prove (see the module doc); RestError when it cannot be reached from here."""
    from kvmesh.agent.keys import agent_key
    from kvmesh.agent.status import decode_status
    from kvmesh.rest_pin import member_key, member_rest

    found = client.get([agent_key(node), member_key(node)])
    announced = found.get(agent_key(node))
    record = decode_status(announced.value if announced else None) or {}
    member_record = found.get(member_key(node))
    member = member_rest(member_record.value if member_record else None)
    text, tls = record.get("http"), bool(record.get("tls"))
    if not text and member.rest_address:
        text, tls = member.rest_address, member.rest_tls
    if not text:
        raise RestError(f"no agent with a REST API is registered for node {node!r} "
                        f"(start it with --http)")
    address = AgentAddress.parse(str(text), tls, node=node, cert_sha256=member.cert_sha256,
                                 names_itself=bool(member.cert_sha256 or record.get("version")))
    if is_loopback_host(address.host) and node != client.node_info().name \
            and _on_another_host(client, node, member.cmd_url, address):
        raise RestError(loopback_only(node, address))
    if address.cert_sha256 and not address.tls:
        raise RestError(f"node {node!r}'s member record pins a REST certificate but its agent "
                        f"announces plain HTTP ({address.text}): not sending a token in clear")
    return address


def loopback_only(node: str, address: AgentAddress) -> str:
    return (f"node {node}'s agent listens only on loopback ({address.text}), which is this "
            f"host's, not {node}'s: ask on {node}, or give {node}'s agent a reachable --http "
            f"address")


def _on_another_host(client: Any, node: str, member_cmd_url: str | None,
                     address: AgentAddress) -> bool:
    """Is `node` (whose agent announced a loopback `address`) known to run on another host
    than the node `client` talks to? Its command URL (member record, else a peer's entry) is
    not loopback, or its loopback address is the local node's own agent's."""
    from kvmesh.agent.keys import agent_key
    from kvmesh.agent.status import decode_status

    cmd_url = member_cmd_url
    if cmd_url is None:
        spec = client.peers().get(node)
        cmd_url = getattr(spec, "cmd_url", None)
    if cmd_url:
        host = urllib.parse.urlsplit(cmd_url).hostname
        if host and host != "*" and not is_loopback_host(host):
            return True
    local = client.node_info().name
    found = client.get([agent_key(local)]).get(agent_key(local))
    mine = (decode_status(found.value if found else None) or {}).get("http")
    return mine is not None and str(mine) == address.text


@dataclass(frozen=True)
class Credentials:
    token: str | None = field(default=None, repr=False)
    source: str = ""  # where the token came from, or why there is none (for error messages)
    ca: str | None = None


def credentials_for(address: AgentAddress, run_dir: Path | None = None) -> Credentials:
    """The token (and CA) to use with `address` (see the module doc for the order)."""
    ca = os.environ.get(HTTP_CA_ENV) or None
    explicit = os.environ.get(HTTP_TOKEN_ENV)
    if explicit:
        try:
            return Credentials(read_token(explicit), explicit, ca)
        except TokenFileError as exc:
            raise RestError(str(exc), exit_code=2) from None
    cluster = _cluster_credentials(address, run_dir)
    if cluster is not None:
        return Credentials(cluster.token, cluster.source, ca or cluster.ca)
    reasons = []
    if is_loopback_host(address.host):
        for directory in search_dirs():
            try:
                path = directory / token_name(address.host, address.port)
                return Credentials(read_token(path), str(path), ca)
            except TokenFileError as exc:
                reasons.append(str(exc))
    operator = operator_token_file()
    if operator is not None:
        token, why = _operator_token(operator, address)
        if token is not None:
            return Credentials(token, str(operator), ca)
        reasons.append(why)
    if not is_loopback_host(address.host):
        reasons.append(f"no token for {address.text}")
    return Credentials(None, "; ".join(reasons) + " (root and the group kvmesh can read a local "
                       "agent's token; or give --http-token-file, or keep your operator token "
                       "beside your key file: kvmesh keys token)", ca)


def operator_token_file() -> Path | None:
    """Where the operator's token would be: beside their key file (NAME.key_secret ->
    NAME.token), if it exists."""
    key_file = os.environ.get(KEY_FILE_ENV)
    if not key_file or not key_file.endswith(".key_secret"):
        return None
    path = Path(key_file[:-len(".key_secret")] + ".token")
    return path if os.path.lexists(path) else None


def _operator_token(path: Path, address: AgentAddress) -> tuple[str | None, str]:
    """The operator's token for `address`, or why not. Every agent accepts it: it goes only to
    an agent that proves, by the certificate its member record pins, to be that node's (or to
    one on loopback); and only from a file that is theirs alone (safefs: not one another user
    could have planted or can read)."""
    if not (address.cert_sha256 or is_loopback_host(address.host)):
        return None, (f"{path} is sent only to agents whose member record pins their "
                      f"certificate, and {address.text} has none")
    try:
        safefs.check_private_file(path)
        if os.lstat(path).st_mode & 0o077:
            raise safefs.UnsafePathError(path, "readable by others (chmod 600)")
        return read_token(path), ""
    except (OSError, TokenFileError) as exc:
        return None, str(exc)


def _cluster_credentials(address: AgentAddress, run_dir: Path | None) -> Credentials | None:
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        # Each must be this user's and writable by nobody else (UnsafePathError, an OSError):
        # a run directory someone else made could name any file as "the token" and any
        # certificate as "the CA".
        directory = run_dir or cluster.DEFAULT_RUN_DIR
        safefs.check_private_dir(directory)
        safefs.check_private_file(directory / cluster.STATE_FILE)
        state = cluster.ClusterState.load(directory)
        if state is None or not state.http_token_file:
            return None
        safefs.check_private_file(state.http_token_file)
        if not any(info.http == address.text for info in state.nodes.values()):
            return None
        try:
            token = read_token(state.http_token_file)
        except TokenFileError as exc:
            return Credentials(None, str(exc), state.http_cert)
        return Credentials(token, state.http_token_file, state.http_cert)
    return None


class AgentRest:
    """Requests to one agent."""

    def __init__(self, address: AgentAddress, credentials: Credentials | None = None,
                 timeout_s: float = HTTP_TIMEOUT_S, run_dir: Path | None = None) -> None:
        self.address = address
        self.credentials = credentials or credentials_for(address, run_dir)
        self.timeout_s = timeout_s

    @classmethod
    def at(cls, address: str, tls: bool = False, **kwargs: Any) -> AgentRest:
        return cls(AgentAddress.parse(address, tls), **kwargs)

    def _connection(self) -> http.client.HTTPConnection:
        host, port = self.address.host, self.address.port
        if not self.address.tls:
            return http.client.HTTPConnection(host, port, timeout=self.timeout_s)
        if self.address.cert_sha256:
            # Pinned: the certificate is checked by its fingerprint (`_check_pin`) once
            # connected, before a byte of the request (its token) is sent.
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        else:
            try:
                context = ssl.create_default_context(cafile=self.credentials.ca)
            except (OSError, ssl.SSLError) as exc:
                raise RestError(f"{self.credentials.ca}: cannot load the CA: {exc}",
                                exit_code=2) from None
        return http.client.HTTPSConnection(host, port, timeout=self.timeout_s, context=context)

    def _check_pin(self, conn: http.client.HTTPConnection) -> None:
        pin = self.address.cert_sha256
        if not pin:
            return
        sock = conn.sock
        der = sock.getpeercert(binary_form=True) if isinstance(sock, ssl.SSLSocket) else None
        seen = hashlib.sha256(der or b"").hexdigest()
        if not hmac.compare_digest(seen, pin):
            raise RestError(f"agent at {self.address.url} presented a certificate (sha256 "
                            f"{seen[:16]}...) other than the one node {self.address.node}'s "
                            f"member record pins ({pin[:16]}...): not talking to it")

    def _check_node(self, answered: str | None) -> None:
        """The answer must come from the node asked for (see the module doc)."""
        expected = self.address.node
        if expected is None or answered == expected:
            return
        if answered is None and not self.address.names_itself:
            return  # an agent older than 0.5 names nobody; the loopback check still applies
        hint = (f"; {loopback_only(expected, self.address)}"
                if is_loopback_host(self.address.host) else "")
        who = f"node {answered!r}" if answered is not None else "an agent that did not say"
        raise RestError(f"agent at {self.address.url} answered as {who}, not node "
                        f"{expected!r}: its answer is refused{hint}")

    def request(self, method: str, path: str, params: dict[str, Any] | None = None,
                body: Any = None) -> bytes:
        """The answer's body (2xx), else RestError; `body`: sent as JSON."""
        query = urllib.parse.urlencode({k: v for k, v in (params or {}).items()
                                        if v is not None})
        headers = {"Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        elif method == "POST":
            data = b""
        if self.credentials.token:
            headers["Authorization"] = f"Bearer {self.credentials.token}"
        conn = self._connection()
        try:
            conn.connect()
            self._check_pin(conn)
            conn.request(method, path + (f"?{query}" if query else ""), body=data,
                         headers=headers)
            resp = conn.getresponse()
            payload = resp.read()
        except (OSError, http.client.HTTPException) as exc:
            raise RestError(f"agent at {self.address.url} unreachable: {exc}") from None
        finally:
            conn.close()
        self._check_node(resp.getheader(NODE_HEADER))
        if 200 <= resp.status < 300:
            return payload
        detail = payload.decode(errors="replace").strip()
        answer = None
        with contextlib.suppress(ValueError):
            answer = json.loads(detail)
        if isinstance(answer, dict) and isinstance(answer.get("error"), str):
            detail = answer["error"]
        if resp.status == 401 and not self.credentials.token:
            detail += f" [no token: {self.credentials.source}]"
        raise RestError(f"{path}: HTTP {resp.status}: {detail}", resp.status, answer=answer)

    def events(self, path: str, params: dict[str, Any] | None = None
               ) -> Iterator[tuple[str, str]]:
        """Follow a Server-Sent Events answer (GET /stream): (event, data) as they come; ends
        when the agent closes the stream."""
        from kvmesh.agent.sse import EventParser

        query = urllib.parse.urlencode({k: v for k, v in (params or {}).items()
                                        if v is not None})
        headers = {"Accept": "text/event-stream"}
        if self.credentials.token:
            headers["Authorization"] = f"Bearer {self.credentials.token}"
        conn = self._connection()
        try:
            conn.request("GET", path + (f"?{query}" if query else ""), headers=headers)
            resp = conn.getresponse()
            if resp.status != 200:
                detail = resp.read().decode(errors="replace").strip()
                with contextlib.suppress(ValueError, AttributeError):
                    detail = json.loads(detail).get("error", detail)
                raise RestError(f"{path}: HTTP {resp.status}: {detail}", resp.status)
            # (The read timeout stays: the agent sends a heartbeat every 15 s, so a stream
            # silent for longer than HTTP_TIMEOUT_S is a dead agent or connection.)
            parser = EventParser()
            for raw in resp:
                event = parser.feed(raw.decode("utf-8", errors="replace"))
                if event is not None:
                    yield event
        except (OSError, http.client.HTTPException) as exc:
            raise RestError(f"agent at {self.address.url}: stream broken: {exc}") from None
        finally:
            conn.close()

    def json(self, method: str, path: str, params: dict[str, Any] | None = None,
             body: Any = None) -> Any:
        raw = self.request(method, path, params, body)
        try:
            return json.loads(raw)
        except ValueError:
            raise RestError(f"{path}: the agent's answer is not JSON") from None

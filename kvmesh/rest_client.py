"""The one client of the agents' REST API: every CLI command, the cluster launcher, the tests.

It finds an agent through the mesh (`node/<N>/agent`: address, and `tls`), speaks HTTP or HTTPS
(verified against `--http-ca` / KVMESH_HTTP_CA, a cluster's certificate, else the system's CAs),
sends a bearer token, and turns every failure into one `RestError` line.

The token, first found of:
1. `--http-token-file` / KVMESH_HTTP_TOKEN_FILE (what the user says);
2. the cluster run directory (`kvmesh cluster up`): the token of the cluster that lists an
   agent at this address;
3. for an agent on loopback, the token it made at start, under the token directory of this user
   or root's, by the agent's network namespace and address (kvmesh.agent.http_token) — readable
   by root and the group `kvmesh` only. Never a path the mesh names: a forged agent record cannot
   make the client read a file and send it elsewhere.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import ssl
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvmesh import cluster_state as cluster
from kvmesh.agent.http_token import TokenFileError, read_token, search_dirs, token_name
from kvmesh.envnames import HTTP_CA_ENV, HTTP_TOKEN_ENV
from kvstore import is_loopback_host, safefs

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
    host: str
    port: int
    tls: bool = False

    @classmethod
    def parse(cls, text: str, tls: bool = False) -> AgentAddress:
        host, sep, port = text.rpartition(":")
        if not sep or not port.isdigit():
            raise RestError(f"bad agent address {text!r} (expected HOST:PORT)")
        return cls(host.strip("[]"), int(port), tls)

    @property
    def text(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.text}"


def find_agent(client: Any, node: str) -> AgentAddress:
    """`node`'s agent as announced in the mesh (`client`: a KvStoreClient)."""
    from kvmesh.agent.keys import agent_key
    from kvmesh.agent.status import decode_status

    found = client.get([agent_key(node)]).get(agent_key(node))
    record = decode_status(found.value if found else None)
    if not record or not record.get("http"):
        raise RestError(f"no agent with a REST API is registered for node {node!r} "
                        f"(start it with --http)")
    return AgentAddress.parse(str(record["http"]), bool(record.get("tls")))


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
    if not is_loopback_host(address.host):
        return Credentials(None, f"no token for {address.text} (give --http-token-file)", ca)
    reasons = []
    for directory in search_dirs():
        try:
            path = directory / token_name(address.host, address.port)
            return Credentials(read_token(path), str(path), ca)
        except TokenFileError as exc:
            reasons.append(str(exc))
    return Credentials(None, "; ".join(reasons) + " (root and the group kvmesh can read an "
                       "agent's token; or give --http-token-file)", ca)


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
        try:
            context = ssl.create_default_context(cafile=self.credentials.ca)
        except (OSError, ssl.SSLError) as exc:
            raise RestError(f"{self.credentials.ca}: cannot load the CA: {exc}",
                            exit_code=2) from None
        return http.client.HTTPSConnection(host, port, timeout=self.timeout_s, context=context)

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
            conn.request(method, path + (f"?{query}" if query else ""), body=data,
                         headers=headers)
            resp = conn.getresponse()
            payload = resp.read()
        except (OSError, http.client.HTTPException) as exc:
            raise RestError(f"agent at {self.address.url} unreachable: {exc}") from None
        finally:
            conn.close()
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

    def json(self, method: str, path: str, params: dict[str, Any] | None = None,
             body: Any = None) -> Any:
        raw = self.request(method, path, params, body)
        try:
            return json.loads(raw)
        except ValueError:
            raise RestError(f"{path}: the agent's answer is not JSON") from None

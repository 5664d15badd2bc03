"""`kvmesh node init NAME --dir DIR`: everything a new node needs, and the command admitting it.

Writes, in DIR (issue 25, "A new node in two commands"):

  NAME.toml                        the node's configuration (`kvmesh node run --config`): name,
                                   sockets, data dir, key file, authorized keys, [peers] (the
                                   join peer), [agent] (enabled, REST address, certificate)
  keys/NAME.key, NAME.key_secret   its CurveZMQ key pair (the secret 0600; never overwritten)
  authorized-keys/operator/OP.key  the operator's public key (--operator-key)
  authorized-keys/peer/PEER.key    the join peer's public key (--join-key)
  NAME-rest.pem, NAME-rest.key     a self-signed certificate (and its key, 0600) for the agent's
                                   REST API; its fingerprint goes into the node's member record
                                   (`member add --rest-cert`), which is what clients pin

and returns the `kvmesh member add` command an operator runs (on any node) to admit it.

Nothing half-written: every input is checked first, then everything is made in a private
staging directory and moved into DIR (DIR itself renamed into place when it is new). A DIR that
already holds a node (its keys, a configuration, any of the names above) is refused with one
line, and nothing is touched.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import shutil
import subprocess
import tempfile
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from kvmesh.cluster import write_node_config
from kvstore import (
    DEFAULT_DATA_ROOT,
    ConfigError,
    CurveError,
    NodeConfig,
    PeerAddress,
    generate,
    load_public_key,
    parse_peer,
    safefs,
)

DEFAULT_REST_PORT = 8080
DEFAULT_PUB_PORT = 60001
CERT_DAYS = 3650  # pinned by fingerprint, not trusted by expiry: rotated by re-admission
KEYS, AUTHORIZED = "keys", "authorized-keys"


class NodeInitError(ValueError):
    """Unusable input or a DIR that holds something already; one line naming it."""


@dataclass(frozen=True)
class InitRequest:
    name: str
    directory: Path
    cmd_url: str | None = None
    pub_url: str | None = None
    http: str | None = None  # ADDR:PORT of the REST API [cmd-url's host:8080]
    data_dir: str | None = None  # [/var/lib/kvmesh/NAME]
    operator_key: Path | None = None
    join: str | None = None  # PEER=CMD_URL[,PUB_URL]
    join_key: Path | None = None
    # The agent's southbounds: this host's Linux networking, a VPP API socket.
    linux: bool = False
    vpp_socket: str | None = None


@dataclass(frozen=True)
class InitResult:
    config: Path
    public_key: Path
    secret_key: Path
    rest_cert: Path
    rest_url: str
    admit: list[str]  # the `kvmesh member add` argv an operator runs

    @property
    def admit_command(self) -> str:
        return " ".join(self.admit)


@dataclass(frozen=True)
class _Plan:
    """A checked request: every value final, every key read."""

    name: str
    directory: Path
    config: NodeConfig
    http: str
    operator: tuple[str, bytes] | None  # (file name stem, the key file's bytes)
    join: tuple[str, PeerAddress, bytes] | None
    southbounds: dict[str, object]  # [agent] entries: linux, vpp_socket


def entries(name: str) -> tuple[str, ...]:
    """What `node init NAME` puts in DIR (the config file last: it is moved in last)."""
    return (KEYS, AUTHORIZED, f"{name}-rest.pem", f"{name}-rest.key", f"{name}.toml")


def init_node(request: InitRequest) -> InitResult:
    """Check, make, move into place; NodeInitError (nothing written) when unusable."""
    plan = _check(request)
    directory = plan.directory
    parent = directory.parent
    fresh = not os.path.lexists(directory)
    try:
        safefs.private_dir(parent if fresh else directory)  # nobody else may plant files there
    except OSError as exc:
        raise NodeInitError(f"--dir {directory}: {exc}") from None
    with tempfile.TemporaryDirectory(dir=parent if fresh else directory,
                                     prefix=f".{plan.name}-init-") as staging_name:
        staging = Path(staging_name)
        _make(plan, staging)
        if fresh:
            staging.rename(directory)  # all at once
            staging.mkdir()  # for TemporaryDirectory's cleanup
        else:
            for entry in entries(plan.name):
                (staging / entry).rename(directory / entry)
    keys = directory / KEYS
    scheme_host = _rest_url(plan.http)
    result_cert = directory / f"{plan.name}-rest.pem"
    address = plan.config.cmd_url + (f",{plan.config.pub_url}" if plan.config.pub_url else "")
    admit = ["kvmesh", "member", "add", plan.name, "--key", str(keys / f"{plan.name}.key"),
             "--address", address]
    if plan.join is not None:
        admit += ["--peer", plan.join[0]]
    admit += ["--rest-url", scheme_host, "--rest-cert", str(result_cert)]
    return InitResult(directory / f"{plan.name}.toml", keys / f"{plan.name}.key",
                      keys / f"{plan.name}.key_secret", result_cert, scheme_host, admit)


def _check(request: InitRequest) -> _Plan:
    name = request.name
    if not name or "/" in name or name.startswith(".") or name.strip() != name:
        raise NodeInitError(f"invalid node name {name!r}: non-empty, no '/', no leading '.', "
                            f"no spaces")
    directory = Path(os.path.abspath(request.directory))
    _check_directory(directory, name)
    cmd_url = request.cmd_url or NodeConfig.cmd_url
    pub_url = request.pub_url or _default_pub_url(cmd_url)
    peers: dict[str, PeerAddress] = {}
    join = None
    if (request.join is None) != (request.join_key is None):
        raise NodeInitError("--join and --join-key go together (the peer's address and its "
                            "public key)")
    if request.join is not None and request.join_key is not None:
        try:
            peer, address = parse_peer(request.join)
        except ValueError as exc:
            raise NodeInitError(f"--join: {exc}") from None
        peers[peer] = address
        join = (peer, address, _public_key(request.join_key, "--join-key"))
    operator = None
    if request.operator_key is not None:
        stem = request.operator_key.name.removesuffix(".key")
        if not stem or stem.startswith("."):
            raise NodeInitError(f"--operator-key {request.operator_key}: name it OPNAME.key")
        operator = (stem, _public_key(request.operator_key, "--operator-key"))
    data_dir = request.data_dir or str(Path(DEFAULT_DATA_ROOT) / name)
    try:
        config = NodeConfig(name=name, cmd_url=cmd_url, pub_url=pub_url, peers=peers,
                            data_dir=os.path.abspath(data_dir))
        config.validate("node init")
    except ConfigError as exc:
        raise NodeInitError(str(exc)) from None
    http = request.http or _default_http(cmd_url)
    _check_http(http)
    southbounds: dict[str, object] = {"linux": True} if request.linux else {}
    if request.vpp_socket:
        southbounds["vpp_socket"] = request.vpp_socket
    return _Plan(name, directory, config, http, operator, join, southbounds)


def _check_directory(directory: Path, name: str) -> None:
    """DIR must hold no node yet: none of our names, no node's secret key, no config."""
    if not os.path.lexists(directory):
        return
    if not directory.is_dir() or directory.is_symlink():
        raise NodeInitError(f"--dir {directory}: not a directory")
    secrets = sorted((directory / KEYS).glob("*.key_secret")) if (directory / KEYS).is_dir() \
        else []
    others = [p.name.removesuffix(".key_secret") for p in secrets]
    if others:
        whose = "its own" if others == [name] else f"node {', '.join(others)}'s"
        raise NodeInitError(f"--dir {directory} already holds {whose} keys ({KEYS}/"
                            f"{secrets[0].name}): one node per directory, keys never "
                            f"overwritten; nothing written")
    configs = sorted(p.name for p in directory.glob("*.toml"))
    taken = [entry for entry in entries(name) if os.path.lexists(directory / entry)]
    if configs or taken:
        raise NodeInitError(f"--dir {directory} already holds {(configs or taken)[0]}: one "
                            f"node per directory; nothing written")


def _public_key(path: Path, option: str) -> bytes:
    try:
        load_public_key(str(path))
        return path.read_bytes()
    except (CurveError, OSError) as exc:
        raise NodeInitError(f"{option} {path}: {exc}") from None


def _host_of(url: str) -> str | None:
    with contextlib.suppress(ValueError):
        return urllib.parse.urlsplit(url).hostname
    return None


def _default_pub_url(cmd_url: str) -> str:
    parsed = urllib.parse.urlsplit(cmd_url)
    if parsed.scheme != "tcp" or not parsed.hostname:
        raise NodeInitError(f"--cmd-url {cmd_url!r}: give --pub-url too (no host to derive "
                            f"it from)")
    if parsed.port == DEFAULT_PUB_PORT:
        raise NodeInitError(f"--cmd-url {cmd_url!r} uses port {DEFAULT_PUB_PORT}, the "
                            f"default publication port: give --pub-url")
    return f"tcp://{parsed.netloc.rsplit(':', 1)[0]}:{DEFAULT_PUB_PORT}"


def _default_http(cmd_url: str) -> str:
    host = _host_of(cmd_url)
    if not host or host in ("*", "0.0.0.0", "::"):
        raise NodeInitError(f"--cmd-url {cmd_url!r} names no one host: give --http ADDR:PORT "
                            f"(the agent's REST address)")
    return f"[{host}]:{DEFAULT_REST_PORT}" if ":" in host else f"{host}:{DEFAULT_REST_PORT}"


def _check_http(http: str) -> None:
    host, sep, port = http.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise NodeInitError(f"--http {http!r}: expected ADDR:PORT")


def _rest_url(http: str) -> str:
    return f"https://{http}"


def _san(http: str, name: str) -> str:
    host = http.rpartition(":")[0].strip("[]")
    names = [f"DNS:{name}"]
    try:
        ipaddress.ip_address(host)
        names.append(f"IP:{host}")
    except ValueError:
        if host != name:
            names.append(f"DNS:{host}")
    return ",".join(names)


def make_rest_certificate(directory: Path, name: str, http: str) -> tuple[Path, Path]:
    """`NAME-rest.pem` and `NAME-rest.key` (0600) in `directory` (a private one of ours:
    openssl follows links and opens without O_EXCL), self-signed, naming the node and its REST
    host. Clients pin its fingerprint; they need no CA."""
    if shutil.which("openssl") is None:
        raise NodeInitError("openssl not found: it makes the REST certificate (tools/setup.sh "
                            "installs it)")
    cert, key = directory / f"{name}-rest.pem", directory / f"{name}-rest.key"
    try:
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                        "ec_paramgen_curve:prime256v1", "-nodes", "-days", str(CERT_DAYS),
                        "-subj", f"/CN={name}", "-addext", f"subjectAltName={_san(http, name)}",
                        "-keyout", str(key), "-out", str(cert)],
                       check=True, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        detail = getattr(exc, "stderr", "") or exc
        raise NodeInitError(f"openssl could not make the REST certificate: "
                            f"{str(detail).strip().splitlines()[-1:]}") from None
    key.chmod(safefs.SECRET_MODE)
    cert.chmod(0o644)
    return cert, key


def _make(plan: _Plan, staging: Path) -> None:
    """Every file of the node under `staging`, with the paths they will have in DIR."""
    final = plan.directory
    name = plan.name
    try:
        generate(name, staging / KEYS)
    except CurveError as exc:
        raise NodeInitError(str(exc)) from None
    auth = staging / AUTHORIZED
    for role in ("operator", "peer"):  # both made: where keys go, should one be added by hand
        safefs.private_dir(auth / role)
    if plan.operator is not None:
        safefs.write_new(auth / "operator" / f"{plan.operator[0]}.key", plan.operator[1], 0o644)
    if plan.join is not None:
        safefs.write_new(auth / "peer" / f"{plan.join[0]}.key", plan.join[2], 0o644)
    make_rest_certificate(staging, name, plan.http)
    config = plan.config
    values: dict[str, object] = {
        "name": name, "cmd_url": config.cmd_url, "pub_url": config.pub_url,
        "data_dir": config.data_dir,
        "key_file": str(final / KEYS / f"{name}.key_secret"),
        "authorized_keys": str(final / AUTHORIZED),
    }
    tables: dict[str, dict[str, object]] = {
        "peers": {peer: address.cmd_url + (f",{address.pub_url}" if address.pub_url else "")
                  for peer, address in config.peers.items()},
        "agent": {"enabled": True, **plan.southbounds, "http": plan.http,
                  "http_cert": str(final / f"{name}-rest.pem"),
                  "http_key": str(final / f"{name}-rest.key")},
    }
    write_node_config(staging / f"{name}.toml", values, tables)

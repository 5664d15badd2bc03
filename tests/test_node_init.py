"""`kvmesh node init` (issue 25, "A new node in two commands"): what it writes, and that bad
input writes nothing (kvmesh.node_init). `keys token`: a member's REST token."""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from kvmesh.node_init import InitRequest, NodeInitError, init_node
from kvmesh.rest_pin import cert_sha256
from kvstore import generate, load_key_pair, load_public_key

pytestmark = pytest.mark.process  # openssl makes the certificates

KVMESH = [sys.executable, "-m", "kvmesh"]


@pytest.fixture
def keys(tmp_path: Path) -> dict[str, Path]:
    generate("op", tmp_path / "ops")
    generate("h1", tmp_path / "h1keys")
    return {"op": tmp_path / "ops" / "op.key", "h1": tmp_path / "h1keys" / "h1.key"}


def tree(directory: Path) -> dict[str, bytes]:
    """Every file under `directory` with its content (to see that nothing changed)."""
    if not directory.exists():
        return {}
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*"))
            if p.is_file()}


def request(tmp_path: Path, keys: dict[str, Path], name: str = "h2",
            directory: Path | None = None, **changes: object) -> InitRequest:
    fields: dict[str, object] = {
        "cmd_url": "tcp://198.18.0.2:60002", "data_dir": str(tmp_path / "data"),
        "operator_key": keys["op"], "join": "h1=tcp://198.18.0.1:60002",
        "join_key": keys["h1"], **changes}
    return InitRequest(name, directory or tmp_path / "etc", **fields)  # type: ignore[arg-type]


def test_node_init_writes_the_config_keys_authorized_keys_and_certificate(
        tmp_path: Path, keys: dict[str, Path]) -> None:
    result = init_node(request(tmp_path, keys))
    etc = tmp_path / "etc"
    assert result.config == etc / "h2.toml"
    config = tomllib.loads(result.config.read_text())
    assert config == {
        "name": "h2", "cmd_url": "tcp://198.18.0.2:60002", "pub_url": "tcp://198.18.0.2:60001",
        "data_dir": str(tmp_path / "data"), "key_file": str(etc / "keys" / "h2.key_secret"),
        "authorized_keys": str(etc / "authorized-keys"),
        "peers": {"h1": "tcp://198.18.0.1:60002"},
        "agent": {"enabled": True, "http": "198.18.0.2:8080",
                  "http_cert": str(etc / "h2-rest.pem"), "http_key": str(etc / "h2-rest.key")}}
    pair = load_key_pair(config["key_file"])
    assert pair.public == load_public_key(str(result.public_key))
    for secret in (result.secret_key, etc / "h2-rest.key", result.config):
        assert stat.S_IMODE(secret.stat().st_mode) == 0o600, secret
    assert stat.S_IMODE(etc.stat().st_mode) == 0o700
    auth = etc / "authorized-keys"
    assert (auth / "operator" / "op.key").read_bytes() == keys["op"].read_bytes()
    assert (auth / "peer" / "h1.key").read_bytes() == keys["h1"].read_bytes()
    assert sorted(os.listdir(etc)) == ["authorized-keys", "h2-rest.key", "h2-rest.pem",
                                       "h2.toml", "keys"]  # no staging left behind
    text = subprocess.run(["openssl", "x509", "-in", str(result.rest_cert), "-noout", "-text"],
                          capture_output=True, text=True, check=True).stdout
    assert "IP Address:198.18.0.2" in text and "DNS:h2" in text
    assert result.admit == [
        "kvmesh", "member", "add", "h2", "--key", str(result.public_key), "--address",
        "tcp://198.18.0.2:60002,tcp://198.18.0.2:60001", "--peer", "h1",
        "--rest-url", "https://198.18.0.2:8080", "--rest-cert", str(result.rest_cert)]
    assert len(cert_sha256(result.rest_cert)) == 64


def test_an_existing_empty_directory_is_filled(tmp_path: Path, keys: dict[str, Path]) -> None:
    etc = tmp_path / "etc"
    etc.mkdir(mode=0o700)
    result = init_node(request(tmp_path, keys, operator_key=None, join=None, join_key=None,
                               http="127.0.0.1:9090"))
    config = tomllib.loads(result.config.read_text())
    assert config["peers"] == {} and config["agent"]["http"] == "127.0.0.1:9090"
    assert sorted(os.listdir(etc / "authorized-keys")) == ["operator", "peer"]
    assert "--peer" not in result.admit


@pytest.mark.parametrize("holder", ["h1", "h2"])
def test_a_directory_holding_a_node_is_refused_and_left_alone(
        tmp_path: Path, keys: dict[str, Path], holder: str) -> None:
    etc = tmp_path / "etc"
    init_node(request(tmp_path, keys, name=holder, join=None, join_key=None))
    before = tree(etc)
    with pytest.raises(NodeInitError) as exc:
        init_node(request(tmp_path, keys, name="h2"))
    message = str(exc.value)
    whose = "its own" if holder == "h2" else "node h1's"
    assert f"already holds {whose} keys (keys/{holder}.key_secret)" in message
    assert "nothing written" in message and "\n" not in message
    assert tree(etc) == before
    assert not [p for p in etc.iterdir() if p.name.startswith(".")]


def test_a_directory_with_a_config_or_our_names_is_refused(
        tmp_path: Path, keys: dict[str, Path]) -> None:
    for planted in ("other.toml", "h2-rest.pem", "authorized-keys"):
        etc = tmp_path / planted
        etc.mkdir(mode=0o700)
        (etc / planted).mkdir() if planted == "authorized-keys" else (etc / planted).write_text("")
        before = tree(etc)
        with pytest.raises(NodeInitError, match=f"already holds {planted}"):
            init_node(request(tmp_path, keys, directory=etc))
        assert tree(etc) == before and sorted(os.listdir(etc)) == [planted]


def test_bad_input_is_one_line_and_writes_nothing(tmp_path: Path,
                                                  keys: dict[str, Path]) -> None:
    not_a_key = tmp_path / "junk.key"
    not_a_key.write_text("not a key\n")
    cases: list[tuple[dict[str, Any], str]] = [
        ({"join_key": None}, "--join and --join-key go together"),
        ({"join": "h1"}, "--join: peer must be NAME=CMD_URL"),
        ({"join_key": not_a_key}, "--join-key"),
        ({"join_key": tmp_path / "missing.key"}, "--join-key"),
        ({"operator_key": not_a_key}, "--operator-key"),
        ({"cmd_url": "198.18.0.2:60002"}, "--pub-url"),
        ({"cmd_url": "tcp://198.18.0.2:60002", "pub_url": "nope"}, "pub_url must be a ZeroMQ URL"),
        ({"http": "nohost"}, "--http 'nohost': expected ADDR:PORT"),
        ({"cmd_url": "tcp://*:60002"}, "give --http"),
    ]
    for changes, message in cases:
        with pytest.raises(NodeInitError, match=message) as exc:
            init_node(request(tmp_path, keys, **changes))
        assert "\n" not in str(exc.value)
        assert not (tmp_path / "etc").exists(), changes
    with pytest.raises(NodeInitError, match="invalid node name"):
        init_node(request(tmp_path, keys, name="a/b"))
    assert sorted(os.listdir(tmp_path)) == ["h1keys", "junk.key", "ops"]


def test_the_command_prints_the_admission_and_refuses_with_one_line(
        tmp_path: Path, keys: dict[str, Path]) -> None:
    args = [*KVMESH, "node", "init", "h2", "--dir", str(tmp_path / "etc"),
            "--cmd-url", "tcp://198.18.0.2:60002", "--data-dir", str(tmp_path / "data"),
            "--operator-key", str(keys["op"]),
            "--join", "h1=tcp://198.18.0.1:60002", "--join-key", str(keys["h1"])]
    done = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert (f"kvmesh member add h2 --key {tmp_path}/etc/keys/h2.key --address "
            f"tcp://198.18.0.2:60002,tcp://198.18.0.2:60001 --peer h1 --rest-url "
            f"https://198.18.0.2:8080 --rest-cert {tmp_path}/etc/h2-rest.pem") in done.stdout
    # The file is what `node run --config` takes (its loader, with the agent and its TLS).
    check = subprocess.run([*KVMESH, "node", "run", "--config", str(tmp_path / "etc" / "h2.toml"),
                            "--check"], capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stderr
    assert 'http_cert = "' + str(tmp_path / "etc" / "h2-rest.pem") + '"  # file' in check.stdout
    again = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert again.returncode == 2 and again.stdout == ""
    assert again.stderr.startswith("error: --dir") and len(again.stderr.splitlines()) == 1


def test_keys_token_writes_a_private_token_once(tmp_path: Path) -> None:
    args = [*KVMESH, "--json", "keys", "token", "op", "--out", str(tmp_path / "ops")]
    done = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    path = tmp_path / "ops" / "op.token"
    token = path.read_text().strip()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and len(token) >= 32
    assert hashlib.sha256(token.encode()).hexdigest() in done.stdout
    again = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert again.returncode == 2 and "exists already" in again.stderr
    assert path.read_text().strip() == token


@pytest.mark.parametrize("existing", [False, True])
def test_a_failure_half_way_leaves_nothing_behind(tmp_path: Path, keys: dict[str, Path],
                                                  monkeypatch: pytest.MonkeyPatch,
                                                  existing: bool) -> None:
    """The key pair is made before the certificate: when openssl is missing, the pair (in the
    staging directory) goes too."""
    etc = tmp_path / "etc"
    if existing:
        etc.mkdir(mode=0o700)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(NodeInitError, match="openssl not found"):
        init_node(request(tmp_path, keys))
    assert (sorted(os.listdir(etc)) == []) if existing else not etc.exists()
    assert sorted(os.listdir(tmp_path)) == ["etc", "h1keys", "ops"][0 if existing else 1:]

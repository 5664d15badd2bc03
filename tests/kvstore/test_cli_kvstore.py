"""The `kvmesh` KvStore commands against real nodes (the commands run in the test's process,
through tests/cli_run.py; `snoop` runs as a process of its own)."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import msgpack
import pytest

from kvstore import wire
from kvstore.client import make_value
from kvstore.gen.kvstore_thrift.ttypes import Command, KeySetParams, Request
from tests import cli_run
from tests.kvstore.conftest import REPO, Mesh, Node, free_port, wait_for_value
from tests.util import wait_until


def cli(
    *args: str, url: str | None = None, timeout_s: float | str = 3.0, check: bool = True
) -> subprocess.CompletedProcess[str]:
    url_option = ["--url", url] if url is not None else []
    result = cli_run.kvmesh([*url_option, *args], cwd=REPO,
                            env={**os.environ, "KVMESH_TIMEOUT": str(timeout_s)})
    if check:
        assert result.returncode == 0, result.stderr
    return result


def cli_json(*args: str, url: str) -> Any:
    return json.loads(cli("--json", *args, url=url).stdout)


@pytest.fixture
def node(mesh: Mesh) -> Node:
    return mesh.start(mesh.allocate("cli-node"))


def test_key_set_and_get_json_shape(node: Node) -> None:
    cli("key", "set", "greeting", "hello", url=node.cmd_url)
    out = cli_json("key", "get", "greeting", "missing", url=node.cmd_url)
    assert isinstance(out, dict)
    assert list(out) == ["greeting"]  # missing keys are absent
    entry = out["greeting"]
    assert set(entry) == {"version", "originator", "value", "ttl_ms", "ttl_version", "hash"}
    assert entry["version"] == 1
    assert entry["originator"] == "cli-node"  # the node's name by default
    assert entry["value"] == "hello"
    assert entry["ttl_ms"] is None  # infinite
    assert entry["ttl_version"] == 0
    assert isinstance(entry["hash"], int)
    assert cli_json("key", "get", "nothing-here", url=node.cmd_url) == {}


def test_key_set_defaults_and_options(node: Node, tmp_path: Path) -> None:
    url = node.cmd_url
    cli("key", "set", "k", "one", url=url)
    cli("key", "set", "k", "two", url=url)  # version: current + 1
    entry = cli_json("key", "get", "k", url=url)["k"]
    assert (entry["version"], entry["value"]) == (2, "two")
    cli("key", "set", "k", "ten", "--version", "10", "--originator", "op", "--ttl-ms", "60000",
        url=url)
    entry = cli_json("key", "get", "k", url=url)["k"]
    assert (entry["version"], entry["originator"], entry["value"]) == (10, "op", "ten")
    assert 0 < entry["ttl_ms"] <= 60000
    # A lower version is refused: one line, non-zero exit.
    result = cli("key", "set", "k", "old", "--version", "3", url=url, check=False)
    assert result.returncode == 1
    assert result.stderr.strip().count("\n") == 0 and "OLD_VERSION" in result.stderr
    # Bytes from a file: not UTF-8, so value_b64 instead of value.
    raw = bytes(range(250, 256)) + b"\x00\x01"
    blob = tmp_path / "blob.bin"
    blob.write_bytes(raw)
    cli("key", "set", "bin", "--file", str(blob), url=url)
    entry = cli_json("key", "get", "bin", url=url)["bin"]
    assert "value" not in entry
    assert base64.b64decode(entry["value_b64"]) == raw


def test_dump_hashes_and_tables(node: Node) -> None:
    with node.client() as client:
        client.set(
            {
                "a/1": make_value(b"x", version=1, originator_id="o1"),
                "a/2": make_value(b"y", version=2, originator_id="o2"),
                "b/1": make_value(b"z", version=3, originator_id="o1"),
            }
        )
    url = node.cmd_url
    assert set(cli_json("key", "dump", url=url)) == {"a/1", "a/2", "b/1"}
    assert set(cli_json("key", "dump", "--prefix", "a/", url=url)) == {"a/1", "a/2"}
    assert set(cli_json("key", "dump", "--originator", "o1", url=url)) == {"a/1", "b/1"}
    assert set(cli_json("key", "dump", "--prefix", "a/", "--originator", "o1", url=url)) == {"a/1"}
    hashes = cli_json("key", "hashes", "--prefix", "a/", url=url)
    assert isinstance(hashes, dict) and set(hashes) == {"a/1", "a/2"}
    assert all("value" not in e and "value_b64" not in e for e in hashes.values())
    assert hashes["a/2"]["version"] == 2
    table = cli("key", "dump", url=url).stdout
    assert table.splitlines()[0].split() == [
        "Key", "Version", "Originator", "TTL", "TTL-Ver", "Hash", "Value"
    ]
    assert "3 key(s)" in table


def test_key_erase_makes_the_key_expire(node: Node) -> None:
    cli("key", "set", "doomed", "x", url=node.cmd_url)
    out = cli("key", "erase", "doomed", url=node.cmd_url).stdout
    assert "expires in 1000ms" in out
    wait_for_value([node], "doomed", lambda v: v is None, timeout=10)
    result = cli("key", "erase", "doomed", url=node.cmd_url, check=False)
    assert result.returncode == 1 and "not found" in result.stderr


def test_peer_add_dump_del(mesh: Mesh) -> None:
    a = mesh.start(mesh.allocate("pa"))
    b = mesh.start(mesh.allocate("pb"))
    cli("peer", "add", "pb", b.cmd_url, b.pub_url, url=a.cmd_url)
    peers = cli_json("peer", "dump", url=a.cmd_url)
    assert isinstance(peers, dict) and set(peers) == {"pb"}
    assert peers["pb"]["cmd_url"] == b.cmd_url and peers["pb"]["pub_url"] == b.pub_url
    wait_until(
        lambda: cli_json("peer", "dump", url=a.cmd_url)["pb"]["state"] == "INITIALIZED",
        timeout=20,
    )
    assert "INITIALIZED" in cli("peer", "dump", url=a.cmd_url).stdout
    cli("peer", "del", "pb", url=a.cmd_url)
    assert cli_json("peer", "dump", url=a.cmd_url) == {}
    bad = cli("peer", "add", "pa", b.cmd_url, url=a.cmd_url, check=False)
    assert bad.returncode == 1 and "BAD_ARGUMENT" in bad.stderr


def test_counters_signature_compare(mesh: Mesh) -> None:
    a, b = mesh.chain(["ca", "cb"])
    cli("key", "set", "same", "v", url=a.cmd_url)
    wait_for_value([b], "same", lambda v: v is not None)
    counters = cli_json("counters", url=a.cmd_url)
    assert isinstance(counters, dict) and counters["kvstore.num_keys"] == 1
    sig_a = cli_json("signature", url=a.cmd_url)
    sig_b = cli_json("signature", url=b.cmd_url)
    assert sig_a == sig_b and sig_a["keys"] == 1
    assert "in sync" in cli("compare", a.cmd_url, b.cmd_url).stdout
    assert cli_json("compare", a.cmd_url, b.cmd_url, url=a.cmd_url) == {}
    # Make b differ without flooding: a publication whose path already names ca.
    with b.client() as client:
        request = Request(
            cmd=Command.KEY_SET,
            key_set=KeySetParams(
                key_vals={"only-b": make_value(b"b", version=1, originator_id="cb")},
                node_ids=["ca"],
            ),
        )
        client.request_raw(wire.encode(request))
    assert cli_json("signature", url=a.cmd_url) != cli_json("signature", url=b.cmd_url)
    diff = cli_json("compare", a.cmd_url, b.cmd_url, url=a.cmd_url)
    assert isinstance(diff, dict) and set(diff) == {"only-b"}
    assert diff["only-b"][a.cmd_url] is None
    assert diff["only-b"][b.cmd_url]["version"] == 1
    text = cli("compare", a.cmd_url, b.cmd_url).stdout
    assert "only-b" in text and "(missing)" in text


MAP = msgpack.packb({"type": "bridge", "mtu": 1400, "raw": b"\xff"}, use_bin_type=True)


def test_snoop_prints_the_stream(node: Node) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "kvmesh", "--url", node.cmd_url, "--json", "snoop",
         "--prefix", "snoop/", "--duration", "20"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout or []), daemon=True)
    reader.start()
    versions = iter(range(1, 10_000))
    try:
        with node.client() as client:

            def seen() -> bool:
                version = next(versions)
                client.set({"snoop/map": make_value(MAP, version=version, originator_id="t"),
                            "snoop/bin": make_value(b"\xff\x00", version=version,
                                                    originator_id="t")})
                client.set({"snoop/k": make_value(b"v", version=version, originator_id="t")})
                client.set({"other/k": make_value(b"v", version=version, originator_id="t")})
                return any("snoop/k" in line for line in lines)

            wait_until(seen, timeout=20, interval=0.1, message="snoop output")
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        reader.join(timeout=10)
    publication = json.loads(next(line for line in lines if "snoop/k" in line))
    assert set(publication) == {"key_vals", "expired_keys", "node_ids"}
    assert publication["node_ids"] == ["cli-node"]
    assert "other/k" not in "".join(lines)  # prefix filter
    # Values decoded: a msgpack map as JSON (not base64 msgpack), other bytes base64.
    both = json.loads(next(line for line in lines if "snoop/map" in line))["key_vals"]
    assert both["snoop/map"]["value"] == {"type": "bridge", "mtu": 1400, "raw": {"b64": "/w=="}}
    assert "value_b64" not in both["snoop/map"]
    assert both["snoop/bin"]["value_b64"] == "/wA="


def test_snoop_duration_ends_it(node: Node) -> None:
    result = cli("snoop", "--duration", "0.5", url=node.cmd_url)
    assert result.returncode == 0


def test_unreachable_node_is_one_line_and_nonzero() -> None:
    url = f"tcp://127.0.0.1:{free_port()}"
    result = cli("key", "get", "x", url=url, timeout_s=0.5, check=False)
    assert result.returncode == 1
    assert result.stderr.strip().startswith("error:")
    assert len(result.stderr.strip().splitlines()) == 1
    assert "no reply" in result.stderr


def test_bad_url_and_bad_arguments_are_one_line() -> None:
    result = cli("key", "get", "x", url="not-a-url", check=False)
    assert result.returncode == 1 and len(result.stderr.strip().splitlines()) == 1
    assert "bad URL" in result.stderr
    result = cli("key", "set", "only-key", check=False)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1
    result = cli("key", "set", "k", "v", "--version", "zero", check=False)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1
    result = cli("compare", "tcp://127.0.0.1:1", url="tcp://127.0.0.1:1", check=False)
    assert result.returncode == 2 and "two different URLs" in result.stderr


@pytest.mark.parametrize("option", ["--version", "--ttl-ms"])
def test_key_set_beyond_64_bits_is_one_line_exit_2(node: Node, option: str) -> None:
    result = cli("key", "set", "k", "v", option, str(2**63), url=node.cmd_url, check=False)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "9223372036854775807" in result.stderr


def test_key_at_the_highest_version_cannot_be_bumped(node: Node) -> None:
    top = str(2**63 - 1)
    cli("key", "set", "k", "v", "--version", top, url=node.cmd_url)
    result = cli("key", "set", "k", "w", url=node.cmd_url, check=False)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "highest version" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    # The agent's desired state: `config set` (current + 1) and `config del` (tombstone).
    cli("key", "set", "config/n9/linux/interface/br7", '{"type": "bridge"}', "--version", top,
        url=node.cmd_url)
    for args in (
        ["config", "set", "n9", "linux/interface/br7", '{"type": "bridge", "mtu": 1400}'],
        ["config", "del", "n9", "linux/interface/br7"],
    ):
        result = cli(*args, url=node.cmd_url, check=False)
        assert result.returncode == 1, result
        assert "highest version" in result.stderr and "Traceback" not in result.stderr
    with node.client() as client:
        assert client.get(["k"])["k"].value == b"v"


@pytest.mark.parametrize("given", ["abc", "0", "-1", "nan", "inf"])
def test_a_bad_timeout_is_one_line_and_exit_2(given: str) -> None:
    """KVMESH_TIMEOUT is read when a command makes its client: a bad one is the user's error,
    said in one line (it was a ValueError traceback from the client module's import)."""
    result = cli("key", "get", "k", url=f"tcp://127.0.0.1:{free_port()}", check=False,
                 timeout_s=given)
    assert result.returncode == 2, result
    assert result.stderr == (f"error: KVMESH_TIMEOUT must be a positive number of seconds, "
                             f"got {given!r}\n")

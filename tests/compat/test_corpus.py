"""Every release's golden corpus (tests/compat/<version>/, written by that release's own code:
tools/compat/record_corpus.py) is read by today's code: every message decodes, the durable store
opens (migrated, and saying so once, if its schema is older), the state file and the agent's
records parse. And the Thrift IDL keeps every field id, name and type of the newest corpus."""

from __future__ import annotations

import json
import logging
import re
import sqlite3
import tarfile
from pathlib import Path
from typing import Any

import msgpack
import pytest
import zmq

from kvmesh import launch
from kvmesh.agent import revisions
from kvmesh.agent.desired import decode_config_value
from kvmesh.agent.status import decode_status
from kvmesh.statefile import parse_state
from kvstore import wire
from kvstore.client import KvStoreClient
from kvstore.gen.kvstore_thrift.ttypes import Command
from kvstore.node_ports import free_tcp_port
from kvstore.storage import DB_FILE, SCHEMA_VERSION, DurableStore
from kvstore.value import TTL_INFINITY
from tests.compat.conftest import ALL_RELEASES, corpus_dir
from tools.compat.recorder import canonical_digest, idl_fields
from tools.compat.release_tree import extract_safely

REPO = Path(__file__).resolve().parents[2]
IDL = REPO / "if" / "KvStore.thrift"


def test_every_release_has_a_corpus() -> None:
    for version in ALL_RELEASES:
        assert (corpus_dir(version) / "RECORDED.json").is_file(), (
            f"release {version} has no corpus: python -m tools.compat.record_corpus {version}")
        recorded = json.loads((corpus_dir(version) / "RECORDED.json").read_text())
        assert recorded["version"] == version


def _messages(version: str) -> dict[str, dict[str, bytes]]:
    data: dict[str, dict[str, bytes]] = msgpack.unpackb(
        (corpus_dir(version) / "messages.msgpack").read_bytes(), raw=False)
    return data


@pytest.mark.parametrize("version", ALL_RELEASES)
def test_every_recorded_message_decodes(version: str) -> None:
    messages = _messages(version)
    requests = {name: wire.decode_request(raw) for name, raw in messages["requests"].items()}
    # One of every command, at least.
    assert {r.cmd for r in requests.values()} == set(Command._VALUES_TO_NAMES)
    for name, request in requests.items():
        command = "KEY_GET" if name == "BAD_ARGUMENT" else next(
            c for c in Command._NAMES_TO_VALUES if name == c or name.startswith(f"{c}_"))
        assert request.cmd == Command._NAMES_TO_VALUES[command], name
    replies = {name: wire.decode_response(raw) for name, raw in messages["replies"].items()}
    assert "KEY_SET_FLOOD" not in replies  # one-way: no reply
    for name, reply in replies.items():
        assert (reply.error is not None) == (name == "BAD_ARGUMENT"), (name, reply.error)
    assert replies["BAD_ARGUMENT"].error is not None
    assert replies["BAD_ARGUMENT"].error.code == wire.BAD_ARGUMENT
    assert replies["KEY_SET"].no_merge_reasons == {"old": "OLD_VERSION"}
    got = replies["KEY_GET"].publication
    assert got is not None and set(got.key_vals) == {"a", "b"}
    assert got.key_vals["a"].value == b"v1" and got.key_vals["a"].ttl_ms == TTL_INFINITY
    assert got.key_vals["b"].ttl_version == 4  # the TTL-only update was applied
    dump = replies["KEY_DUMP"].publication
    assert dump is not None and {"a", "b", "c", "f", "old"} <= set(dump.key_vals)
    assert dump.key_vals["c"].value == b""
    sync = replies["KEY_DUMP_SYNC"].publication
    assert sync is not None and "mine" in sync.tobe_updated_keys
    digest = replies["DIGEST_GET"].digest
    assert digest is not None and set(digest.digests) == set(range(1, 33))  # children of 0, 1
    assert digest.protocol is None or version != "0.4.0"  # 0.4.0 says no protocol
    assert replies["PEER_DUMP"].peers is not None and "p9" in replies["PEER_DUMP"].peers
    assert replies["COUNTERS_GET"].counters
    info = replies["NODE_INFO"].node_info
    assert info is not None and info.name == "rec"
    # A release before 0.5.0 says no version (so peers and `kvmesh cluster status` say
    # protocol 1, "0.4.0?"); later ones say theirs.
    assert info.version in (None, version)
    publications = {n: wire.decode_publication(raw)
                    for n, raw in messages["publications"].items()}
    assert set(publications["KEY_SET"].key_vals) == {"a", "b", "c"}
    assert "short" in publications["EXPIRED"].expired_keys
    assert publications["PADDING"].key_vals == {}


@pytest.mark.parametrize("version", ALL_RELEASES)
def test_state_file_and_agent_records_parse(version: str) -> None:
    folder = corpus_dir(version)
    state = parse_state((folder / "state.yaml").read_text(), "corpus state.yaml")
    assert state["n1"]["linux/interface/veth0"]["veth"] == {"peer": "veth1"}
    assert state["n2"]["vpp/interface/loop0"]["enabled"] is True
    records: dict[str, bytes] = msgpack.unpackb((folder / "records.msgpack").read_bytes(),
                                                raw=False)
    revision = revisions.decode(records["revision"])
    assert revision is not None and revision["rev"] == 7
    assert revisions.is_pending(revision)
    assert revisions.rollback_values(revision) == {"linux/interface/veth0": None}
    status = decode_status(records["status"])
    assert status is not None and (status["state"], status["seq"]) == ("CONFIGURED", 42)
    failed = decode_status(records["status_failed"])
    assert failed is not None and failed["state"] == "RETRYING"
    assert "unreachable" in failed["error"]
    agent = decode_status(records["agent"])
    assert agent == {"http": "127.0.0.1:8080", "tls": True}
    assert decode_config_value(records["config_value"]) == state["n1"]["linux/interface/veth0"]
    assert decode_config_value(records["config_tombstone"]) is None


def extract_store(version: str, dest: Path) -> tuple[Path, dict[str, Any]]:
    """The corpus's data directory, unpacked under `dest`, and what must be found in it."""
    with tarfile.open(corpus_dir(version) / "store.tar.xz") as archive:
        extract_safely(archive, dest)
    manifest: dict[str, Any] = json.loads((corpus_dir(version) / "store.json").read_text())
    return dest / "data", manifest


@pytest.mark.parametrize("version", ALL_RELEASES)
def test_durable_store_opens_with_every_row(version: str, tmp_path: Path,
                                            caplog: pytest.LogCaptureFixture) -> None:
    data_dir, manifest = extract_store(version, tmp_path)
    with sqlite3.connect(data_dir / DB_FILE) as conn:
        recorded_schema = conn.execute("PRAGMA user_version").fetchone()[0]
    assert recorded_schema <= SCHEMA_VERSION
    caplog.set_level(logging.INFO, logger="kvstore.storage")
    store = DurableStore(data_dir, manifest["node"])
    try:
        store.open()
        rows = [(k, v.version, v.originator_id, v.value, v.ttl_version)
                for chunk in store.rows() for k, v in chunk]
    finally:
        store.close()
    assert len(rows) == manifest["infinite"]
    assert sum(1 for r in rows if r[3] == b"") == manifest["tombstones"] > 0
    assert canonical_digest(rows) == manifest["rows_sha256"]
    keys = {r[0] for r in rows}
    assert not keys & set(manifest["finite_sample"])  # finite TTLs are never on disk
    # A schema migration says so once; the same schema says nothing about it.
    migrations = [r for r in caplog.records if "migrat" in r.getMessage().lower()]
    assert len(migrations) == (1 if recorded_schema < SCHEMA_VERSION else 0), migrations


# ------------------------------------------------------------------------------ the IDL


def optional_fields(idl: str) -> dict[str, set[int]]:
    """struct -> the ids declared `optional` in the IDL text."""
    out: dict[str, set[int]] = {}
    for match in re.finditer(r"struct\s+(\w+)\s*\{(.*?)\n\}", idl, re.S):
        body = re.sub(r"/\*.*?\*/", "", match.group(2), flags=re.S)
        out[match.group(1)] = {int(m.group(1)) for m in
                               re.finditer(r"^\s*(\d+)\s*:\s*optional\b", body, re.M)}
    return out


def idl_changes(old: dict[str, Any], new: dict[str, Any], optional: dict[str, set[int]],
                ) -> list[str]:
    """What breaks the rules of docs/compatibility.md between two field tables."""
    problems: list[str] = []
    for struct, fields in old["structs"].items():
        now = new["structs"].get(struct)
        if now is None:
            problems.append(f"struct {struct} was removed")
            continue
        for fid, field in fields.items():
            got = now.get(fid)
            if got is None:
                problems.append(f"{struct} field {fid} ({field['name']}) was removed")
            elif got != field:
                problems.append(f"{struct} field {fid} was {field}, is now {got}")
        for fid in sorted(set(now) - set(fields), key=int):
            if int(fid) not in optional.get(struct, set()):
                problems.append(f"{struct} field {fid} ({now[fid]['name']}) is new but not "
                                "optional")
    for enum, values in old["enums"].items():
        now_values = new["enums"].get(enum, {})
        for name, value in values.items():
            if now_values.get(name) != value:
                problems.append(f"enum {enum}.{name} was {value}, is now {now_values.get(name)}")
    return problems


def test_the_idl_keeps_every_field_of_the_newest_corpus() -> None:
    newest = json.loads((corpus_dir(ALL_RELEASES[-1]) / "idl_fields.json").read_text())
    assert idl_changes(newest, idl_fields(), optional_fields(IDL.read_text())) == []


def test_the_idl_check_sees_a_renumbered_retyped_or_required_field() -> None:
    newest = json.loads((corpus_dir(ALL_RELEASES[-1]) / "idl_fields.json").read_text())
    today = idl_fields()
    optional = optional_fields(IDL.read_text())
    renumbered = json.loads(json.dumps(today))
    value = renumbered["structs"]["Value"]
    value["7"] = value.pop("6")  # hash moved to a new id
    retyped = json.loads(json.dumps(today))
    retyped["structs"]["NodeInfo"]["5"]["type"] = 8  # num_keys i64 -> i32
    required = json.loads(json.dumps(today))
    required["structs"]["Error"]["3"] = {"name": "detail", "type": [11, "UTF8"]}
    enum = json.loads(json.dumps(today))
    enum["enums"]["PeerState"]["SYNCING"] = 5
    assert idl_changes(newest, renumbered, optional) == [
        "Value field 6 (hash) was removed",
        "Value field 7 (hash) is new but not optional"]
    assert idl_changes(newest, retyped, optional) == [
        "NodeInfo field 5 was {'name': 'num_keys', 'type': 10}, is now "
        "{'name': 'num_keys', 'type': 8}"]
    assert idl_changes(newest, required, optional) == [
        "Error field 3 (detail) is new but not optional"]
    assert idl_changes(newest, enum, optional) == ["enum PeerState.SYNCING was 1, is now 5"]


@pytest.mark.process
@pytest.mark.parametrize("version", ALL_RELEASES)
def test_todays_node_serves_every_recorded_request_and_store(version: str,
                                                             tmp_path: Path) -> None:
    """Today's node, started on the release's data directory, holds its rows, and answers each
    request the release's clients and peers sent (an error only where the release got one)."""
    data_dir, manifest = extract_store(version, tmp_path)
    cmd_url, pub_url = (f"tcp://127.0.0.1:{free_tcp_port()}" for _ in range(2))
    spec = launch.NodeSpec(manifest["node"], cmd_url, pub_url, data_dir=data_dir)
    node = launch.start(spec, tmp_path / "node.log", cwd=tmp_path)
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    try:
        node.wait_answering(cmd_url)
        with KvStoreClient(cmd_url) as client:
            info = client.node_info(refresh=True)
        assert (info.num_keys, info.store_state) == (manifest["infinite"], "RESTORED")
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(cmd_url)
        messages = _messages(version)
        for name, payload in messages["requests"].items():
            sock.send_multipart([b"", payload])
            if name not in messages["replies"]:  # one-way
                continue
            assert sock.poll(10_000), f"no reply to {name}"
            reply = wire.decode_response(sock.recv_multipart()[-1])
            recorded = wire.decode_response(messages["replies"][name])
            assert (reply.error is None) == (recorded.error is None), (name, reply.error)
        assert node.alive()
    finally:
        ctx.destroy(linger=0)
        assert node.terminate() == 0, node.log(tail=3000)


def test_a_schema_migration_runs_once_says_so_and_keeps_every_row(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """The migration path a schema change will take (kvstore/storage.py MIGRATIONS), tried on
    the newest corpus's store with a stand-in schema 2."""
    from kvstore import storage

    version = ALL_RELEASES[-1]
    data_dir, manifest = extract_store(version, tmp_path)
    monkeypatch.setattr(storage, "SCHEMA_VERSION", SCHEMA_VERSION + 1)
    monkeypatch.setitem(storage.MIGRATIONS, SCHEMA_VERSION, (
        "CREATE TABLE IF NOT EXISTS migrated_marker (x INTEGER) STRICT",))
    caplog.set_level(logging.INFO, logger="kvstore.storage")
    for _ in range(2):
        store = DurableStore(data_dir, manifest["node"])
        try:
            store.open()
            rows = [(k, v.version, v.originator_id, v.value, v.ttl_version)
                    for chunk in store.rows() for k, v in chunk]
        finally:
            store.close()
        assert canonical_digest(rows) == manifest["rows_sha256"]
    migrations = [r.getMessage() for r in caplog.records if "migrated" in r.getMessage()]
    assert len(migrations) == 1, migrations
    assert f"from schema {SCHEMA_VERSION} to {SCHEMA_VERSION + 1}" in migrations[0]
    with sqlite3.connect(data_dir / DB_FILE) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION + 1
        assert conn.execute("SELECT count(*) FROM migrated_marker").fetchone()[0] == 0

"""Records a release's golden corpus, BY THAT RELEASE'S OWN CODE (run by record_corpus.py).

It runs with the release's tree first on sys.path (record_corpus.py sets PYTHONPATH and checks
where `kvstore` comes from), so everything here must work with the oldest recorded release's
API: it uses only what 0.4.0 had (kvstore.client, kvstore.wire, kvmesh.launch, the agent's
record helpers), and nothing of the repository it is stored in.

What it writes into OUT (see tests/compat/test_corpus.py for how each is read back):
- messages.msgpack: {"requests", "replies", "publications"}: name -> encoded bytes. The replies
  are the real answers of a node of the release to the recorded requests;
- idl_fields.json: the field table of the release's Thrift IDL (struct -> id -> name, type), and
  its enums, for the test that fails when the IDL renumbers or retypes a field;
- store.tar.xz: the data directory of node `old1` after 10 000 key-values were written to it
  (finite and infinite TTLs, empty-value tombstones), stopped cleanly; store.json: what a reader
  must find in it (counts and a digest of the canonical rows);
- state.yaml: a state file (`kvmesh apply` input) exported by the release;
- records.msgpack: a revision record, a status record, the agent's record, a config value and a
  config tombstone, as the release's agent writes them into the mesh.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

import msgpack
import zmq

import kvmesh
import kvstore
from kvmesh import launch
from kvmesh.agent import revisions
from kvmesh.agent.desired import encode_config_value
from kvmesh.agent.status import status_record
from kvmesh.statefile import export_state
from kvstore import wire
from kvstore.client import KvStoreClient, make_value
from kvstore.gen.kvstore_thrift import ttypes
from kvstore.gen.kvstore_thrift.ttypes import (
    Command,
    DigestParams,
    KeyDumpParams,
    KeyFilters,
    KeyGetParams,
    KeySetParams,
    PeerAddParams,
    PeerDelParams,
    PeerSpec,
    Request,
    Value,
)
from kvstore.node_ports import free_tcp_port
from scheduler import TxnOperation, ValueOrigin, ValueState, ValueStatus

TTL_INFINITY = -2147483648
NODE = "old1"
STORE_KEYS = 10_000


def _log(msg: str) -> None:
    print(f"recorder: {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------- IDL field table


def _type_of(ttype: int, args: Any) -> Any:
    """A field's type as plain data: the Thrift type id, with what it holds (element, key and
    value types, the struct's name, UTF8 or BINARY for a string)."""
    if ttype == 12:  # struct: [cls, cls.thrift_spec]
        return [ttype, args[0].__name__]
    if ttype in (14, 15):  # set, list: (elem type, elem args, sorted)
        return [ttype, _type_of(args[0], args[1])]
    if ttype == 13:  # map: (key type, key args, value type, value args, sorted)
        return [ttype, _type_of(args[0], args[1]), _type_of(args[2], args[3])]
    if ttype == 11:  # string: 'UTF8' or 'BINARY'
        return [ttype, args]
    if ttype == 8 and isinstance(args, type):  # an enum-typed i32 (generated with its class)
        return [ttype, args.__name__]
    return ttype


def idl_fields() -> dict[str, Any]:
    structs: dict[str, Any] = {}
    enums: dict[str, Any] = {}
    for name in sorted(dir(ttypes)):
        obj = getattr(ttypes, name)
        if isinstance(obj, type) and hasattr(obj, "thrift_spec"):
            fields = {}
            for entry in obj.thrift_spec:
                if entry is None:
                    continue
                fid, ttype, fname, args = entry[0], entry[1], entry[2], entry[3]
                fields[str(fid)] = {"name": fname, "type": _type_of(ttype, args)}
            structs[name] = fields
        elif isinstance(obj, type) and hasattr(obj, "_NAMES_TO_VALUES"):
            enums[name] = dict(sorted(obj._NAMES_TO_VALUES.items()))
    return {"structs": structs, "enums": enums}


# ---------------------------------------------------------------------------- messages


def _value(i: int, **kw: Any) -> Value:
    return make_value(kw.pop("value", b"v%d" % i), version=kw.pop("version", 1),
                      originator_id=kw.pop("originator_id", "rec"), **kw)


def requests(peer_url: str) -> dict[str, Request]:
    leaf = KeyFilters(key_prefixes=["config/x/"], originator_ids=["x"])
    return {
        "KEY_SET": Request(cmd=Command.KEY_SET, key_set=KeySetParams(key_vals={
            "a": _value(1),
            "b": _value(2, ttl_ms=600_000, ttl_version=3),
            "c": _value(3, value=b""),  # a tombstone (empty value)
            "old": _value(4, version=1, originator_id="aaa"),  # loses to the stored one
        })),
        "KEY_SET_FLOOD": Request(cmd=Command.KEY_SET, key_set=KeySetParams(
            key_vals={"f": _value(5, version=2)}, solicit_response=False,
            node_ids=["p1", "p2"], sender_id="p2", timestamp_ms=int(time.time() * 1000))),
        "KEY_SET_TTL_ONLY": Request(cmd=Command.KEY_SET, key_set=KeySetParams(key_vals={
            "b": make_value(None, version=1, originator_id="rec", ttl_ms=600_000,
                            ttl_version=4)})),
        "KEY_GET": Request(cmd=Command.KEY_GET, key_get=KeyGetParams(keys=["a", "b", "none"])),
        "KEY_DUMP": Request(cmd=Command.KEY_DUMP, key_dump=KeyDumpParams(prefix="")),
        "KEY_DUMP_SYNC": Request(cmd=Command.KEY_DUMP, key_dump=KeyDumpParams(
            prefix="", key_val_hashes={"a": Value(version=1, originator_id="rec", hash=1,
                                                  ttl_ms=TTL_INFINITY),
                                       "mine": Value(version=9, originator_id="z", hash=2,
                                                     ttl_ms=TTL_INFINITY)},
            sender_id="p1", buckets=list(range(0, 65536, 4096)))),
        "KEY_DUMP_LEAF": Request(cmd=Command.KEY_DUMP, key_dump=KeyDumpParams(
            prefix="", originator_ids={"rec"}, key_val_hashes={}, sender_id="p1",
            filters=leaf)),
        "HASH_DUMP": Request(cmd=Command.HASH_DUMP, key_dump=KeyDumpParams(prefix="a")),
        "PEER_ADD": Request(cmd=Command.PEER_ADD, peer_add=PeerAddParams(peers={
            "p9": PeerSpec(cmd_url=peer_url)})),
        "PEER_DUMP": Request(cmd=Command.PEER_DUMP),
        "PEER_DEL": Request(cmd=Command.PEER_DEL, peer_del=PeerDelParams(peer_names=["p9"])),
        "COUNTERS_GET": Request(cmd=Command.COUNTERS_GET),
        "DIGEST_GET": Request(cmd=Command.DIGEST_GET, digest=DigestParams(
            node_ids=[0, 1], sender_id="p1")),
        "DIGEST_GET_LEAF": Request(cmd=Command.DIGEST_GET, digest=DigestParams(
            node_ids=[0], filters=leaf, sender_id="p1")),
        "NODE_INFO": Request(cmd=Command.NODE_INFO),
        "BAD_ARGUMENT": Request(cmd=Command.KEY_GET),  # no parameters: an error reply
    }


def _ask(sock: zmq.Socket[bytes], payload: bytes, reply: bool = True) -> bytes | None:
    sock.send_multipart([b"", payload])
    if not reply:
        return None
    if not sock.poll(10_000):
        raise RuntimeError("the node did not answer")
    return sock.recv_multipart()[-1]


def record_messages(node: launch.NodeSpec, ctx: zmq.Context[zmq.Socket[bytes]],
                    ) -> dict[str, dict[str, bytes]]:
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.connect(node.pub_url)
    req = ctx.socket(zmq.DEALER)
    req.setsockopt(zmq.LINGER, 0)
    req.connect(node.cmd_url)
    with KvStoreClient(node.cmd_url) as client:  # "old" is newer on the node than in KEY_SET
        client.set({"old": _value(0, version=5, originator_id="zzz")})
    # A subscription is live once it sees a publication (the slow-joiner problem).
    deadline = time.monotonic() + 10
    while not sub.poll(100):
        with KvStoreClient(node.cmd_url) as client:
            client.set({"probe": _value(0, version=int(time.monotonic() * 1000))})
        if time.monotonic() > deadline:
            raise RuntimeError("no publication received")
    while sub.poll(200):
        sub.recv_multipart()
    out: dict[str, dict[str, bytes]] = {"requests": {}, "replies": {}, "publications": {}}
    dead_peer = f"tcp://127.0.0.1:{free_tcp_port()}"
    for name, request in requests(dead_peer).items():
        payload = wire.encode(request)
        out["requests"][name] = payload
        one_way = request.key_set is not None and request.key_set.solicit_response is False
        answer = _ask(req, payload, reply=not one_way)
        if answer is not None:
            out["replies"][name] = answer
        if name == "KEY_SET":
            out["publications"]["KEY_SET"] = sub.recv_multipart()[-1]
    # A key that expires: its publication lists it in expired_keys.
    with KvStoreClient(node.cmd_url) as client:
        client.set({"short": _value(9, ttl_ms=300)})
    deadline = time.monotonic() + 10
    while "EXPIRED" not in out["publications"]:
        if time.monotonic() > deadline:
            raise RuntimeError("no expiry publication")
        if not sub.poll(200):
            continue
        frame = sub.recv_multipart()[-1]
        publication = wire.decode_publication(frame)
        if publication.expired_keys:
            out["publications"]["EXPIRED"] = frame
    out["publications"]["PADDING"] = wire.PUBLICATION_PADDING
    sub.close()
    req.close()
    return out


# ---------------------------------------------------------------------------- the durable store


def store_values() -> dict[str, Value]:
    """10 000 key-values: 7 000 infinite (1 000 of them empty-value tombstones, some with a
    ttl_version, several originators), 3 000 finite (never written to disk by 0.4.0)."""
    out: dict[str, Value] = {}
    for i in range(STORE_KEYS):
        if i < 6000:
            model = {"name": f"eth{i}", "mtu": 1500 + i % 100, "enabled": i % 2 == 0}
            out[f"config/n{i % 7}/linux/interface/eth{i}"] = make_value(
                encode_config_value(model), version=1 + i % 5, originator_id=f"op{i % 3}",
                ttl_version=i % 4)
        elif i < 7000:
            out[f"config/n{i % 7}/linux/route/r{i}"] = make_value(
                b"", version=2 + i % 3, originator_id="op0")  # a deleted value
        else:
            out[f"status/n{i % 7}/x{i}"] = make_value(
                b"s%d" % i, version=1, originator_id=f"n{i % 7}", ttl_ms=3_600_000)
    return out


def canonical_digest(rows: list[tuple[str, int, str, bytes | None, int]]) -> str:
    """sha256 of the sorted (key, version, originator, value, ttl_version) rows."""
    digest = hashlib.sha256()
    for row in sorted(rows):
        digest.update(msgpack.packb(list(row), use_bin_type=True))
    return digest.hexdigest()


def record_store(work: Path, out: Path) -> None:
    data_dir = work / "data"
    node = launch.NodeSpec(NODE, f"tcp://127.0.0.1:{free_tcp_port()}",
                           f"tcp://127.0.0.1:{free_tcp_port()}", data_dir=data_dir)
    proc = launch.start(node, work / "store-node.log", cwd=work)
    try:
        proc.wait_answering(node.cmd_url)
        values = store_values()
        items = sorted(values.items())
        with KvStoreClient(node.cmd_url, timeout_s=30) as client:
            for i in range(0, len(items), 500):
                client.set(dict(items[i:i + 500]))
            stored = client.dump()
        if len(stored) != STORE_KEYS:
            raise RuntimeError(f"the node holds {len(stored)} keys, not {STORE_KEYS}")
        infinite = [(k, v.version, v.originator_id, v.value, v.ttl_version)
                    for k, v in stored.items() if v.ttl_ms == TTL_INFINITY]
        finite = sorted(k for k, v in stored.items() if v.ttl_ms != TTL_INFINITY)
    finally:
        code = proc.stop()
    if code != 0:
        raise RuntimeError(f"the store node exited {code}:\n{proc.log()}")
    with tarfile.open(out / "store.tar.xz", "w:xz", preset=9) as archive:
        for path in sorted(data_dir.iterdir()):
            if path.name.startswith("kvstore.sqlite3"):
                archive.add(path, arcname=f"data/{path.name}")
    manifest = {
        "node": NODE, "keys_written": STORE_KEYS, "infinite": len(infinite),
        "tombstones": sum(1 for row in infinite if row[3] == b""),
        "finite": len(finite), "finite_sample": finite[:5],
        "rows_sha256": canonical_digest(infinite),
        "sample": {row[0]: [row[1], row[2], (row[3] or b"").hex(), row[4]]
                   for row in sorted(infinite)[::1000]},
    }
    (out / "store.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")


# ---------------------------------------------------------------------------- agent records


def record_agent(out: Path) -> None:
    state: dict[str, dict[str, dict[str, Any]]] = {
        "n1": {"linux/interface/veth0": {"name": "veth0", "type": "veth",
                                         "veth": {"peer": "veth1"}, "mtu": 1400},
               "linux/route/main/10.9.0.0/24/veth0": {"dst": "10.9.0.0/24", "dev": "veth0"}},
        "n2": {"vpp/interface/loop0": {"name": "loop0", "type": "loopback", "enabled": True}}}
    (out / "state.yaml").write_text(export_state(state, "yaml"))
    status = ValueStatus(key="linux/interface/veth0", state=ValueState.CONFIGURED,
                         last_op=TxnOperation.CREATE, details=("created",),
                         origin=ValueOrigin.FROM_NB, seq=42)
    failed = ValueStatus(key="linux/route/main/10.9.0.0/24/veth0", state=ValueState.RETRYING,
                         error=OSError("Network is unreachable"), last_op=TxnOperation.CREATE,
                         origin=ValueOrigin.FROM_NB, seq=43)
    revision = revisions.new_revision(
        7, "operator@host", 1_700_000_000.0,
        before={"linux/interface/veth0": None},
        after={"linux/interface/veth0": state["n1"]["linux/interface/veth0"]},
        confirm_timeout_s=60.0, description="apply state.yaml")
    records = {
        "revision": revisions.encode(revision),
        "status": msgpack.packb(status_record(status, now=1_700_000_001.0), use_bin_type=True),
        "status_failed": msgpack.packb(status_record(failed, now=1_700_000_002.0),
                                       use_bin_type=True),
        "agent": msgpack.packb({"http": "127.0.0.1:8080", "tls": True}, use_bin_type=True),
        "config_value": encode_config_value(state["n1"]["linux/interface/veth0"]),
        "config_tombstone": encode_config_value(None),
    }
    (out / "records.msgpack").write_bytes(msgpack.packb(records, use_bin_type=True))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--version", required=True)
    parser.add_argument("--commit", required=True)
    args = parser.parse_args()
    _log(f"kvstore from {kvstore.__path__[0]}, kvmesh from {kvmesh.__path__[0]}")
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="kvm-rec-"))
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    try:
        (out / "idl_fields.json").write_text(json.dumps(idl_fields(), indent=1) + "\n")
        node = launch.NodeSpec("rec", f"tcp://127.0.0.1:{free_tcp_port()}",
                               f"tcp://127.0.0.1:{free_tcp_port()}", ephemeral=True)
        proc = launch.start(node, work / "msg-node.log", cwd=work)
        try:
            proc.wait_answering(node.cmd_url)
            messages = record_messages(node, ctx)
        finally:
            proc.stop()
        (out / "messages.msgpack").write_bytes(msgpack.packb(messages, use_bin_type=True))
        _log(f"{sum(len(v) for v in messages.values())} messages")
        record_store(work, out)
        _log("store recorded")
        record_agent(out)
        meta = {"version": args.version, "commit": args.commit,
                "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "python": sys.version.split()[0], "zmq": zmq.zmq_version()}
        (out / "RECORDED.json").write_text(json.dumps(meta, indent=1) + "\n")
    finally:
        ctx.destroy(linger=0)
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Writes the seed corpus of every harness: `python -m tests.fuzz.seeds` (idempotent).

Seeds are valid inputs of every kind a harness takes, so the fuzzer starts from deep inside
each decoder instead of having to discover the Thrift and msgpack layouts by itself.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import msgpack

from kvstore import wire
from kvstore.gen.kvstore_thrift import ttypes as tt
from kvstore.hashing import value_hash
from kvstore.value import TTL_INFINITY

CORPUS = Path(__file__).resolve().parent / "corpus"


def _value(
    version: int = 1,
    originator: str = "o",
    value: bytes | None = b"v",
    ttl: int = TTL_INFINITY,
    hashed: bool = False,
) -> tt.Value:
    return tt.Value(version, originator, value, ttl, 0,
                 value_hash(version, originator, value) if hashed else None)


def request_seeds() -> list[bytes]:
    kv = {"a": _value(), "b/c": _value(2, "p", b"x" * 40, 5000), "t": _value(3, "o", None)}
    requests = [
        tt.Request(cmd=tt.Command.NODE_INFO),
        tt.Request(cmd=tt.Command.COUNTERS_GET),
        tt.Request(cmd=tt.Command.PEER_DUMP),
        tt.Request(cmd=tt.Command.KEY_SET, key_set=tt.KeySetParams(key_vals=kv)),
        tt.Request(
            cmd=tt.Command.KEY_SET, key_set=tt.KeySetParams(key_vals=kv, solicit_response=False)
        ),
        tt.Request(cmd=tt.Command.KEY_SET, key_set=tt.KeySetParams(
            key_vals={"f": _value(hashed=True)}, node_ids=["x", "y"], solicit_response=False,
            timestamp_ms=1)),
        tt.Request(cmd=tt.Command.KEY_SET, key_set=tt.KeySetParams(
            key_vals={"s": _value(hashed=True)}, sender_id="peer", solicit_response=True)),
        tt.Request(cmd=tt.Command.KEY_GET, key_get=tt.KeyGetParams(keys=["a", "b/c", "zz"])),
        tt.Request(
            cmd=tt.Command.KEY_DUMP, key_dump=tt.KeyDumpParams(prefix="b/", originator_ids={"p"})
        ),
        tt.Request(cmd=tt.Command.KEY_DUMP, key_dump=tt.KeyDumpParams(
            key_val_hashes={"a": _value(value=None, hashed=True), "q": _value(4, "z", None)},
            sender_id="peer", buckets=[0, 1, 4095])),
        tt.Request(cmd=tt.Command.HASH_DUMP, key_dump=tt.KeyDumpParams(prefix="")),
        tt.Request(cmd=tt.Command.DIGEST_GET, digest=tt.DigestParams(node_ids=[0, 1, 2])),
        tt.Request(cmd=tt.Command.DIGEST_GET, digest=tt.DigestParams(node_ids=[-1, 10**9])),
        tt.Request(cmd=tt.Command.PEER_ADD, peer_add=tt.PeerAddParams(peers={
            "p1": tt.PeerSpec(cmd_url="tcp://127.0.0.1:1", pub_url="tcp://127.0.0.1:2"),
            "p2": tt.PeerSpec(cmd_url="ipc:///nonexistent/fuzz")})),
        tt.Request(cmd=tt.Command.PEER_DEL, peer_del=tt.PeerDelParams(peer_names=["p1", "nope"])),
        tt.Request(cmd=99),
    ]
    seeds = [wire.encode(r) for r in requests]
    invalid = tt.Request(
        cmd=tt.Command.KEY_SET, key_set=tt.KeySetParams(key_vals={"KK": _value(originator="OO")})
    )
    seeds.append(wire.encode(invalid).replace(b"KK", b"k\xff"))  # invalid UTF-8 in a key
    seeds.append(wire.encode(invalid).replace(b"OO", b"\xfe!"))  # ... in an originator
    return seeds


def _framed(*replies: bytes) -> bytes:
    return b"".join(len(r).to_bytes(2, "big") + r for r in replies)


def sync_reply_seeds() -> list[bytes]:
    digests = {i: i * 7 for i in range(1, 17)}
    digest = wire.encode(tt.Response(digest=tt.DigestReply(digests=digests)))
    dump = wire.encode(tt.Response(publication=tt.Publication(
        key_vals={"k/1": _value(2, "peer", b"new", hashed=True), "k/x": _value(1, "peer")},
        tobe_updated_keys=["k/2"])))
    return [
        _framed(digest),
        _framed(digest, digest, dump),
        _framed(digest, digest, digest, dump, dump),
        _framed(wire.encode(tt.Response())),
        _framed(wire.error_response("BAD_ARGUMENT", "no")),
    ]


def agent_value_seeds() -> list[bytes]:
    values = [
        {"type": "bridge", "mtu": 1400},
        {"type": "veth", "veth": {"peer": "v1"}, "addresses": ["10.0.0.1/24"]},
        {"type": "vxlan", "vxlan": {"vni": 5, "remote": "10.0.0.2", "device": "eth0"}},
        {"dst": "10.0.0.0/24", "dev": "x", "gateway": "10.0.0.1"},
        {"type": "loopback", "enabled": True, "ip_addresses": ["10.1.0.1/32"]},
        {"interfaces": [{"name": "x", "bvi": False}]},
    ]
    seeds = [msgpack.packb(v, use_bin_type=True) for v in values]
    seeds += [b"", b"\xc1", msgpack.packb([1, 2]), b"\x91" * 40 + b"\x80"]
    seeds.append(b"\x81\xa1a" * 40 + b"\x80")
    return seeds


def rest_query_seeds() -> list[bytes]:
    queries = [b"", b"format=text&seq-num=3", b"since=2024-01-01T00:00:00&until=1700000000",
               b"descriptor=linux-interface&view=cached", b"key=linux/interface/x",
               b"retry=true", b"time=1e400", b"seq-num=-1&seq-num=2", b"format=%ff%fe"]
    return [bytes([route, 0]) + q for route in range(0, 16, 3) for q in queries]


def http_head_seeds() -> list[bytes]:
    return [b"GET /scheduler/stats HTTP/1.1\r\nHost: x\r\n\r\n",
            b"POST /configuration HTTP/1.0\r\nContent-Length: 12\r\nAuthorization: Bearer "
            b"abcdefghijklmnop\r\n\r\n{\"values\": {}}",
            b"TRACE / HTTP/1.1\r\n\r\n", b"GET / HTTP/2.0\r\n\r\n", b"GET\r\n\r\n",
            b"GET / HTTP/1.1\r\n folded: x\r\n\r\n",
            b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"POST / HTTP/1.1\r\nContent-Length: 99999\r\n\r\n",
            b"GET /\xff HTTP/1.1\n\n", b"G\x00T / HTTP/1.1\r\nA:\r\n\r\n"]


SEEDS = {
    "http_head": http_head_seeds,
    "request": request_seeds,
    "sync_reply": sync_reply_seeds,
    "agent_value": agent_value_seeds,
    "rest_query": rest_query_seeds,
}


def main() -> None:
    for harness, make in SEEDS.items():
        directory = CORPUS / harness
        directory.mkdir(parents=True, exist_ok=True)
        for seed in make():
            (directory / f"seed-{hashlib.sha1(seed).hexdigest()[:16]}").write_bytes(seed)


if __name__ == "__main__":
    main()

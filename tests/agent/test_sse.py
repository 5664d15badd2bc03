"""The publication stream as Server-Sent Events, I/O-free (kvmesh.agent.sse)."""

from __future__ import annotations

import json

import msgpack

from kvmesh.agent.sse import (
    ClientBuffer,
    EventParser,
    SnapshotMerge,
    decode_value,
    encode_event,
    event_line,
    publication_events,
    value_event,
)
from kvstore import TTL_INFINITY, Publication, Value


def val(version: int, raw: bytes | None = b"\x81\xa1a\x01", ttl_version: int = 0,
        ttl: int = TTL_INFINITY) -> Value:
    return Value(version=version, originator_id="n1", value=raw, ttl_ms=ttl,
                 ttl_version=ttl_version)


def parse(stream: bytes) -> list[tuple[str, dict]]:
    parser = EventParser()
    out = []
    for line in stream.decode().splitlines(keepends=True):
        event = parser.feed(line)
        if event is not None:
            out.append((event[0], json.loads(event[1])))
    return out


def test_values_are_decoded_json_for_msgpack_maps_base64_otherwise() -> None:
    assert decode_value(msgpack.packb({"mtu": 1500, "name": "x"})) == {"mtu": 1500, "name": "x"}
    assert decode_value(b"bar") == {"b64": "YmFy"}
    assert decode_value(msgpack.packb([1, 2])) == {"b64": "kgEC"}  # a list is not a map
    assert decode_value(msgpack.packb({"k": b"\xff"})) == {"b64": "gaFrxAH/"}  # bytes inside


def test_event_types_value_tombstone_refresh_and_expired() -> None:
    kind, data = value_event("k", val(3, ttl=5000, ttl_version=2))
    assert kind == "value"
    assert data == {"key": "k", "version": 3, "originator": "n1", "ttl": 5000, "ttl_version": 2,
                    "value": {"a": 1}, "size": 4}
    assert value_event("k", val(1))[1]["ttl"] == -1  # infinite
    assert value_event("k", val(4, b""))[0] == "tombstone"
    assert value_event("k", val(4, None, ttl_version=7))[0] == "refresh"
    pub = Publication(key_vals={"a/1": val(1), "b/1": val(1), "a/0": val(2, b"")},
                      expired_keys=["a/9", "b/9"])
    assert [(kind, d["key"]) for kind, d in publication_events(pub, "a/")] == [
        ("tombstone", "a/0"), ("value", "a/1"), ("expired", "a/9")]


def test_a_value_cannot_break_out_of_its_event() -> None:
    raw = msgpack.packb({"x": "line\n\nevent: expired\ndata: {\"key\": \"forged\"}\n\n"})
    frame = encode_event(*value_event("k", val(1, raw)))
    assert frame.count(b"\n\n") == 1 and frame.endswith(b"\n\n")
    assert parse(frame) == [("value", value_event("k", val(1, raw))[1])]


def test_snapshot_then_live_without_gap_or_duplicate() -> None:
    merge = SnapshotMerge()
    # Subscribed before the dump: these arrive while the dump is being taken.
    early = [value_event("k1", val(1)), value_event("k2", val(5)), value_event("k3", val(1)),
             value_event("k2", val(5, None, ttl_version=1))]
    assert merge.live(early) == []  # held until the snapshot is out
    out = merge.snapshot({"k1": val(1), "k2": val(5), "k9": val(2)})
    kinds = [(kind, d.get("key"), d.get("version")) for kind, d in out]
    assert kinds == [("value", "k1", 1), ("value", "k2", 5), ("value", "k9", 2),
                     ("synced", None, None),
                     # k1 v1 and k2 v5 were in the dump: not sent twice; k3 was not; the
                     # TTL refresh of k2 is newer than the dump's copy
                     ("value", "k3", 1), ("refresh", "k2", 5)]
    assert merge.live([value_event("k3", val(1))]) == []  # a duplicate
    assert len(merge.live([value_event("k3", val(2))])) == 1
    assert merge.live([("expired", {"key": "k3"})]) == [("expired", {"key": "k3"})]
    assert len(merge.live([value_event("k3", val(1))])) == 1  # re-created after its expiry


def test_a_client_that_does_not_read_overflows_once_with_a_final_event() -> None:
    buffer = ClientBuffer(limit=100)
    assert buffer.offer(b"x" * 60)
    assert not buffer.offer(b"y" * 60)
    assert buffer.overflowed and not buffer.offer(b"z")
    events = parse(buffer.take())
    assert [kind for kind, _ in events] == ["dropped"]
    assert "did not read" in events[0][1]["reason"]


def test_event_lines_for_snoop() -> None:
    assert event_line(*value_event("k", val(2))) == '+ k  v2 n1  ttl=inf  {"a": 1}'
    assert event_line("expired", {"key": "k"}) == "- k  expired"
    assert event_line("synced", {"keys": 3}).startswith("= synced: 3")

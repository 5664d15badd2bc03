"""kvstore.forward: a received flood KEY_SET spliced into the next hop's KEY_SET, byte for byte."""

from __future__ import annotations

import struct

from kvstore import wire
from kvstore.db import KvStoreDb
from kvstore.forward import Received, envelope_tail, forwarded_payload
from kvstore.gen.kvstore_thrift.ttypes import Command, KeySetParams, Request, Value
from kvstore.hashing import value_hash
from kvstore.value import TTL_INFINITY, WireKeyVals


def values(n: int, ttl: int = TTL_INFINITY) -> dict[str, Value]:
    return {
        f"k/{i}": Value(2, "src", b"v%d" % i, ttl, 0, value_hash(2, "src", b"v%d" % i))
        for i in range(n)
    }


def flood_request(key_vals: dict[str, Value], **params: object) -> Request:
    fields: dict[str, object] = {"solicit_response": False, "node_ids": ["a"], "timestamp_ms": 7}
    fields.update(params)
    return Request(cmd=Command.KEY_SET, key_set=KeySetParams(key_vals=key_vals, **fields))


def received(payload: bytes) -> Received:
    return Received(payload, wire.decode_request(payload))


def test_forwarded_payload_equals_a_fresh_encoding_with_the_new_envelope() -> None:
    key_vals = values(40)
    message = received(wire.encode(flood_request(key_vals, sender_id="peer")))
    end = message.entries_end()
    assert end is not None
    out = forwarded_payload(message, end, envelope_tail(["a", "me"], 99))
    expected = flood_request(key_vals, node_ids=["a", "me"], timestamp_ms=99)
    assert out == wire.encode(expected)  # sender_id is not carried over either
    decoded = wire.decode_request(out).key_set
    assert decoded is not None
    assert decoded.key_vals == key_vals
    assert decoded.node_ids == ["a", "me"]
    assert decoded.sender_id is None


def test_empty_map_and_missing_optional_fields_are_laid_out_as_expected() -> None:
    for request in (
        flood_request({}),
        Request(cmd=Command.KEY_SET, key_set=KeySetParams(key_vals=values(3))),
    ):
        message = received(wire.encode(request))
        end = message.entries_end()
        assert end is not None
        out = forwarded_payload(message, end, envelope_tail(["x"], 1))
        decoded = wire.decode_request(out).key_set
        assert decoded is not None and request.key_set is not None
        assert decoded.key_vals == request.key_set.key_vals
        assert decoded.node_ids == ["x"] and decoded.solicit_response is False


def test_other_layouts_are_not_forwarded() -> None:
    key_vals = values(3)
    payload = wire.encode(flood_request(key_vals))
    # node_ids written before the map (another encoder's field order).
    node_ids_field = struct.pack(">bhbi", 15, 3, 11, 1) + struct.pack(">i", 1) + b"a"
    reordered = payload[:10] + node_ids_field + payload[10:]
    assert wire.decode_request(reordered).key_set is not None
    assert received(reordered).entries_end() is None
    # A map that repeats a key: the decoded map is smaller than the wire map.
    doubled = wire.encode(flood_request({"k/0": key_vals["k/0"], "k/1": key_vals["k/1"]}))
    doubled = doubled.replace(b"k/1", b"k/0")
    message = received(doubled)
    assert len(message.key_vals) == 1
    assert message.entries_end() is None
    # A different envelope after the map than the decoded one (a field written twice).
    twice = payload[:-2] + struct.pack(">bhq", 10, 5, 8) + payload[-2:]
    assert received(twice).request.key_set.timestamp_ms == 8
    assert received(twice).entries_end() is None


def test_whatever_is_spliced_the_next_hop_decodes_the_same_key_vals() -> None:
    # Bytes after the map entries that the decoder skips (an unknown field) travel inside the
    # spliced part: the next hop parses them in the same place, so it decodes what we decoded.
    key_vals = values(3)
    payload = wire.encode(flood_request(key_vals))
    map_end = received(payload).entries_end()
    assert map_end is not None
    odd = payload[:map_end] + struct.pack(">bhq", 10, 99, 5) + payload[map_end:]
    message = received(odd)
    end = message.entries_end()
    assert end is not None
    out = wire.decode_request(forwarded_payload(message, end, envelope_tail(["a", "me"], 3)))
    assert out.key_set is not None
    assert out.key_set.key_vals == message.key_vals == key_vals
    assert out.key_set.node_ids == ["a", "me"]
    assert out.key_set.timestamp_ms == 3


def test_stored_as_merged_only_for_unchanged_infinite_values() -> None:
    db = KvStoreDb("me")
    key_vals = WireKeyVals(values(5))
    db.merge_decoded(key_vals, 0)
    assert db.stored_as_merged(key_vals)
    finite = WireKeyVals(values(5, ttl=10_000))
    db.merge_decoded(finite, 0)
    assert not db.stored_as_merged(finite)  # stored as copies holding the absolute expiry
    fresh = WireKeyVals(values(2))
    db.merge_decoded(fresh, 0)
    newer = WireKeyVals({"k/0": Value(3, "src", b"new", TTL_INFINITY, 0)})
    db.merge_decoded(newer, 0)
    assert not db.stored_as_merged(fresh)  # one of them was superseded
    assert db.stored_as_merged(newer)
    assert not db.stored_as_merged({"absent": Value(1, "x", b"")})

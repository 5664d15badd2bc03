"""3-way full sync between two KvStoreDb instances (reference scenario `FullSync`)."""

from __future__ import annotations

from kvstore.db import KvStoreDb
from kvstore.value import TTL_INFINITY, Value


def _v(version: int, originator: str, value: bytes = b"x") -> Value:
    return Value(version, originator, value, TTL_INFINITY, 0)


def _summary(db: KvStoreDb) -> dict[str, tuple[int, str]]:
    return {k: (v.version, v.originator_id) for k, v in db.dump(0).items()}


def test_full_sync_reference_scenario_converges_both_sides() -> None:
    a = KvStoreDb("a")
    b = KvStoreDb("b")
    a.merge({"k0": _v(5, "a"), "k1": _v(1, "a"), "k2": _v(9, "a"), "k3": _v(1, "a")}, 0)
    b.merge({"k1": _v(1, "a"), "k2": _v(1, "b"), "k3": _v(9, "b"), "k4": _v(6, "b")}, 0)

    # A asks B: B answers with what A lacks or has worse, and names what it wants back.
    send, want = b.dump_difference(a.hash_dump(0), 0)
    assert sorted(send) == ["k3", "k4"]
    assert sorted(want) == ["k0", "k2"]
    a.merge(send, 0)
    b.merge(a.get(want, 0), 0)  # the finalize step

    expected = {"k0": (5, "a"), "k1": (1, "a"), "k2": (9, "a"), "k3": (9, "b"), "k4": (6, "b")}
    assert _summary(a) == expected
    assert _summary(b) == expected
    assert a.root_digest() == b.root_digest()
    assert a.signature(0) == b.signature(0)

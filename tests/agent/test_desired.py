"""Desired-state tracking: prefix filtering, tombstones, expiry, coalescing, bad values."""

from __future__ import annotations

import msgpack
import pytest

from kvmesh.agent.desired import (
    DesiredState,
    ValueDecodeError,
    decode_config_value,
    encode_config_value,
)


def enc(value: dict) -> bytes:
    return encode_config_value(value)


def test_dump_keeps_only_this_nodes_config() -> None:
    ds = DesiredState("n2")
    ds.load_dump({
        "config/n2/linux/interface/veth0": enc({"type": "veth"}),
        "config/n3/linux/interface/veth0": enc({"type": "bridge"}),
        "config/n2x/linux/interface/x": enc({"type": "tap"}),
        "status/n2/linux/interface/veth0": enc({"state": "CONFIGURED"}),
        "config/n2/linux/route/main/10.0.0.0/24/veth0": b"",  # tombstone: not desired
    })
    assert ds.desired == {"linux/interface/veth0": {"type": "veth"}}
    assert ds.take_pending() == {"linux/interface/veth0": {"type": "veth"}}


def test_updates_coalesce_to_latest_value() -> None:
    ds = DesiredState("n1")
    key = "config/n1/vpp/interface/loop0"
    ds.update({key: enc({"mtu": 1500})})
    ds.update({key: enc({"mtu": 9000})})
    assert ds.take_pending() == {"vpp/interface/loop0": {"mtu": 9000}}
    assert ds.take_pending() == {}


def test_tombstone_and_expiry_mean_delete() -> None:
    ds = DesiredState("n1")
    ds.load_dump({"config/n1/a/x": enc({"v": 1}), "config/n1/a/y": enc({"v": 2})})
    ds.take_pending()
    ds.update({"config/n1/a/x": b""}, expired=["config/n1/a/y", "config/n9/a/z"])
    assert ds.take_pending() == {"a/x": None, "a/y": None}
    assert ds.desired == {}
    assert ds.counters["tombstones"] == 1 and ds.counters["expired"] == 1


def test_ttl_only_update_and_unchanged_value_are_not_changes() -> None:
    ds = DesiredState("n1")
    ds.load_dump({"config/n1/a/x": enc({"v": 1})})
    ds.take_pending()
    assert ds.update({"config/n1/a/x": None}) == 0
    assert ds.update({"config/n1/a/x": enc({"v": 1})}) == 0
    assert ds.update({"config/n1/a/gone": b""}) == 0
    assert ds.take_pending() == {}


def test_batches_are_bounded() -> None:
    ds = DesiredState("n1")
    ds.update({f"config/n1/k/{i}": enc({"i": i}) for i in range(5)})
    first = ds.take_pending(max_items=3)
    assert list(first) == ["k/0", "k/1", "k/2"]
    assert list(ds.take_pending()) == ["k/3", "k/4"]


def test_undecodable_value_is_reported_and_not_desired() -> None:
    ds = DesiredState("n1")
    ds.load_dump({"config/n1/a/x": enc({"v": 1})})
    ds.take_pending()
    ds.update({"config/n1/a/x": b"\xc1"})  # 0xc1 is never valid msgpack
    assert ds.take_pending() == {"a/x": None}
    assert "not valid msgpack" in ds.decode_errors["a/x"]
    ds.update({"config/n1/a/x": enc({"v": 2})})
    assert "a/x" not in ds.decode_errors


@pytest.mark.parametrize("raw", [msgpack.packb([1, 2]), msgpack.packb("text"), b"\xc1"])
def test_decode_rejects_non_maps(raw: bytes) -> None:
    with pytest.raises(ValueDecodeError):
        decode_config_value(raw)


def test_held_back_changes_stay_pending_in_order() -> None:
    ds = DesiredState("n1")
    ds.update({"config/n1/vpp/interface/a": enc({"i": 1}),
               "config/n1/linux/interface/b": enc({"i": 2}),
               "config/n1/vpp/interface/c": enc({"i": 3})})
    assert list(ds.take_pending(accept=lambda k: k.startswith("linux/"))) == [
        "linux/interface/b"]
    assert list(ds.take_pending()) == ["vpp/interface/a", "vpp/interface/c"]
    assert ds.first_pending_at is None


def test_redump_stages_only_differences() -> None:
    ds = DesiredState("n1")
    ds.load_dump({"config/n1/a/x": enc({"v": 1}), "config/n1/a/y": enc({"v": 2})})
    ds.take_pending()
    changed = ds.load_dump({"config/n1/a/x": enc({"v": 1}), "config/n1/a/z": enc({"v": 3})})
    assert changed == 2
    assert ds.take_pending() == {"a/z": {"v": 3}, "a/y": None}


def test_refusals_are_reported_once_and_withdrawn() -> None:
    import msgpack

    from kvmesh.agent.desired import MAX_VALUE_DEPTH, DesiredState

    state = DesiredState("n1")
    deep: dict[str, object] = {}
    for _ in range(MAX_VALUE_DEPTH + 1):
        deep = {"x": deep}
    state.update({
        "config/n1/a": b"\xc1",
        "config/n1/b": msgpack.packb([1]),
        "config/n1/c": msgpack.packb(deep),
        "config/n1/ok": msgpack.packb({"type": "bridge"}),
    })
    refusals = state.take_refusals()
    assert set(refusals) == {"a", "b", "c"}
    assert "msgpack map" in (refusals["b"] or "") and "deeper" in (refusals["c"] or "")
    assert state.take_refusals() == {}  # reported once
    assert "ok" in state.desired and "a" not in state.desired
    state.update({"config/n1/a": msgpack.packb({"type": "bridge"}), "config/n1/b": b""})
    assert state.take_refusals() == {"a": None, "b": None}
    state.update({}, expired=["config/n1/ok"])
    assert state.take_refusals() == {"ok": None}  # no longer desired: any refusal withdrawn


def test_depth_at_the_bound_is_accepted() -> None:
    import msgpack

    from kvmesh.agent.desired import MAX_VALUE_DEPTH, decode_config_value

    value: dict[str, object] = {}
    for _ in range(MAX_VALUE_DEPTH - 1):
        value = {"x": value}
    assert decode_config_value(msgpack.packb(value)) == value


def test_a_scoped_resync_takes_its_values_and_drops_only_their_pending_changes() -> None:
    ds = DesiredState("n2")
    ds.load_dump({"config/n2/vpp/interface/loop1": enc({"type": "loopback"}),
                  "config/n2/linux/interface/br0": enc({"type": "bridge"})})
    ds.update({"config/n2/vpp/interface/loop2": b""})  # not desired: nothing staged
    vpp = ds.take_scope(lambda key: key.startswith("vpp/"))
    assert vpp == {"vpp/interface/loop1": {"type": "loopback"}}
    assert list(ds.pending) == ["linux/interface/br0"]
    assert ds.take_scope(lambda key: key.startswith("linux/")) == {
        "linux/interface/br0": {"type": "bridge"}}
    assert ds.pending == {} and ds.first_pending_at is None


def test_shared_desired_state_reports_refusals_while_it_changes() -> None:
    from kvmesh.agent.desired import Refusals, SharedDesiredState

    reported: list[Refusals] = []
    shared = SharedDesiredState("n2", reported.append)
    shared.load_dump({"config/n2/linux/interface/bad": b"\xc1"})
    shared.update({"config/n2/linux/interface/bad": enc({"type": "bridge"})}, ())
    refusals = [r for r in reported if r]
    assert len(refusals) == 2
    assert "msgpack" in str(refusals[0]["linux/interface/bad"])  # refused, with why
    assert refusals[1] == {"linux/interface/bad": None}  # withdrawn
    assert shared.take_batch(10, window_s=60.0, quiet=False, accept=lambda k: True) == {}
    assert shared.take_batch(10, window_s=60.0, quiet=True, accept=lambda k: True) == {
        "linux/interface/bad": {"type": "bridge"}}

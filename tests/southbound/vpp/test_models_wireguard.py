"""The WireGuard models: the `wireguard` interface type and `vpp/wireguard/peer/<name>`, with
WireGuard's key form and VPP's limits; a key is never quoted by an error."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from scheduler import REDACTED, InvalidValueError
from southbound.vpp.models import normalize_interface
from southbound.vpp.models.wireguard_peer import check_peer, peer_conflicts
from southbound.vpp.wireguard_api import redact_private_key

PRIVATE = base64.b64encode(bytes(range(32))).decode()
PUBLIC = base64.b64encode(bytes([7] * 32)).decode()
WG: dict[str, Any] = {"type": "wireguard", "wireguard": {
    "private_key": PRIVATE, "port": 51820, "src_addr": "192.0.2.1"}}
PEER: dict[str, Any] = {"interface": "wg0", "public_key": PUBLIC, "endpoint": "198.51.100.2",
                        "port": 51820, "allowed_ips": ["fd00::/64", "10.2.0.0/16"]}


def problems(check, key, value) -> dict[str, str]:
    with pytest.raises(InvalidValueError) as info:
        check(key, value)
    return dict(info.value.problems)  # type: ignore[attr-defined]


def test_interface_section_defaults_and_limits():
    v = normalize_interface("vpp/interface/wg0", WG)
    assert v["wireguard"] == {"private_key": PRIVATE, "port": 51820, "src_addr": "192.0.2.1",
                              "instance": None}
    assert problems(normalize_interface, "vpp/interface/wg0", {"type": "wireguard"}) == {
        "wireguard": "required with type 'wireguard'"}
    bad = problems(normalize_interface, "vpp/interface/wg0", {**WG, "mtu": 1420,
                                                              "mac": "02:00:00:00:00:01"})
    assert set(bad) == {"mtu", "mac"}  # an L3 tunnel: nothing of the kind to set
    section = WG["wireguard"]
    for field, value in [("port", 0), ("port", 65536), ("instance", 16384),
                         ("src_addr", "192.0.2")]:
        found = problems(normalize_interface, "vpp/interface/wg0",
                         {**WG, "wireguard": {**section, field: value}})
        assert f"wireguard.{field}" in found, (field, found)
    assert "wireguard" in problems(normalize_interface, "vpp/interface/lo",
                                   {"type": "loopback", "wireguard": section})


@pytest.mark.parametrize("key", [
    "", "abc", PRIVATE[:-1], PRIVATE[:-1] + "A",  # too short, no padding
    PRIVATE[:-2] + "B=",  # bits beyond the 32 bytes: not a canonical encoding
    "!" * 43 + "=", base64.b64encode(bytes(33)).decode()[:44],
    12345, None, ["x"],
])
def test_keys_are_wireguards_and_never_quoted(key):
    found = problems(normalize_interface, "vpp/interface/wg0",
                     {**WG, "wireguard": {**WG["wireguard"], "private_key": key}})
    expected = "is required" if key is None else "44 characters of base64"  # null: absent
    assert expected in found["wireguard.private_key"]
    text = str(found)
    if isinstance(key, str) and key:
        assert key not in text
    assert "12345" not in text
    assert expected in problems(check_peer, "vpp/wireguard/peer/b",
                                {**PEER, "public_key": key})["public_key"]


def test_peer_canonical_form_and_limits():
    v = check_peer("vpp/wireguard/peer/b", PEER)
    assert v == {**PEER, "allowed_ips": ["10.2.0.0/16", "fd00::/64"],
                 "persistent_keepalive": 0, "table": 0}
    for field, value in [("allowed_ips", []), ("allowed_ips", ["10.2.0.1/16"]),
                         ("allowed_ips", ["10.2.0.0/16", "10.2.0.0/16"]),
                         ("allowed_ips", [f"10.{i // 256}.{i % 256}.0/24" for i in range(256)]),
                         ("port", 0), ("persistent_keepalive", 65536), ("endpoint", "x"),
                         ("interface", "a/b"), ("table", -1)]:
        found = problems(check_peer, "vpp/wireguard/peer/b", {**PEER, field: value})
        assert any(k.startswith(field) for k in found), (field, found)
    assert "(key)" in problems(check_peer, "vpp/wireguard/peer/vpp-3", PEER)
    assert "(key)" in problems(check_peer, "vpp/wireguard/peer/a/b", PEER)


def test_two_peers_with_one_key_conflict():
    found = peer_conflicts({"vpp/wireguard/peer/a": PEER, "vpp/wireguard/peer/b": PEER,
                            "vpp/wireguard/peer/c": {**PEER, "public_key": PRIVATE}})
    assert list(found) == ["vpp/wireguard/peer/b"]
    assert "ENTRY_ALREADY_EXISTS" in found["vpp/wireguard/peer/b"]


def test_the_private_key_is_redacted():
    shown = redact_private_key("vpp/interface/wg0", WG)
    assert shown["wireguard"]["private_key"] == REDACTED
    assert WG["wireguard"]["private_key"] == PRIVATE  # the value itself is untouched
    loop = {"type": "loopback"}
    assert redact_private_key("vpp/interface/lo", loop) is loop


def test_the_agents_validation_finds_the_conflict():
    from kvmesh.agent.models import invalid_values

    errors = invalid_values({"vpp/interface/wg0": WG, "vpp/wireguard/peer/a": PEER,
                             "vpp/wireguard/peer/b": PEER})
    assert list(errors) == ["vpp/wireguard/peer/b"]

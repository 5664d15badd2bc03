"""Validation and normalisation of the VPP models: canonical forms and field-level errors."""

from __future__ import annotations

import pytest

from scheduler import InvalidValueError
from southbound.vpp.models import normalize_bd, normalize_interface, normalize_route


def problems(fn, key, value) -> dict:
    with pytest.raises(InvalidValueError) as info:
        fn(key, value)
    return {field: str(info.value) for field in info.value.fields}


def test_interface_defaults_and_canonical_form():
    v = normalize_interface(
        "vpp/interface/lo1",
        {
            "type": "loopback",
            "addresses": ["fd00::1/64", "10.0.0.1/24"],
            "mac": "02:AA:00:00:00:01",
        },
    )
    assert v == {
        "type": "loopback",
        "enabled": True,
        "mtu": None,
        "mac": "02:aa:00:00:00:01",
        "vrf": 0,
        "addresses": ["10.0.0.1/24", "fd00::1/64"],
        "unnumbered": None,
        "tap": None,
        "af_packet": None,
        "sub_interface": None,
        "vxlan": None,
        "memif": None,
        "bond": None,
        "gre": None,
        "ipip": None,
        "wireguard": None,
    }
    tap = normalize_interface("vpp/interface/t", {"type": "tap"})
    assert tap["tap"] == {"host_if_name": None, "rx_ring_size": 256, "tx_ring_size": 256}


def test_interface_errors_name_every_bad_field():
    found = problems(
        normalize_interface,
        "vpp/interface/lo1",
        {
            "type": "loopback",
            "mtu": 10,
            "mac": "01:00:5e:00:00:01",
            "vrf": -1,
            "enabled": "yes",
            "addresses": ["10.0.0.1", "10.0.0.300/24"],
            "tap": {},
            "colour": "blue",
        },
    )
    assert set(found) == {
        "mtu",
        "mac",
        "vrf",
        "enabled",
        "addresses[0]",
        "addresses[1]",
        "tap",
        "colour",
    }
    message = next(iter(found.values()))
    assert message.startswith("vpp/interface/lo1: field 'colour': unknown field")
    assert "field 'mtu': must be an integer 64..9216, got 10" in message


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ({"type": "geneve"}, "type"),
        ({"type": "tap", "tap": {"rx_ring_size": 300}}, "tap.rx_ring_size"),
        ({"type": "tap", "tap": {"host_if_name": "a/b"}}, "tap.host_if_name"),
        ({"type": "af_packet"}, "af_packet"),
        ({"type": "af_packet", "af_packet": {}}, "af_packet.host_if_name"),
        (
            {"type": "loopback", "unnumbered": {"interface_with_ip": "lo1"}},
            "unnumbered.interface_with_ip",
        ),
        (
            {
                "type": "loopback",
                "unnumbered": {"interface_with_ip": "x"},
                "addresses": ["1.1.1.1/32"],
            },
            "unnumbered",
        ),
    ],
)
def test_interface_single_field_errors(value, field):
    assert field in problems(normalize_interface, "vpp/interface/lo1", value)


def test_bad_keys_and_non_objects():
    assert "(key)" in problems(normalize_interface, "vpp/interface/" + "x" * 60, {"type": "tap"})
    assert "(key)" in problems(normalize_interface, "vpp/interface/bad name", {"type": "tap"})
    with pytest.raises(InvalidValueError, match="must be a JSON object"):
        normalize_interface("vpp/interface/lo1", ["loopback"])


def test_bridge_domain_model():
    v = normalize_bd(
        "vpp/bd/b1", {"bd_id": 7, "interfaces": [{"name": "z"}, {"name": "a", "bvi": True}]}
    )
    assert v["interfaces"] == [{"name": "a", "bvi": True}, {"name": "z", "bvi": False}]
    assert (v["flood"], v["arp_term"]) == (True, False)
    found = problems(
        normalize_bd,
        "vpp/bd/b1",
        {
            "interfaces": [
                {"name": "a", "bvi": True},
                {"name": "b", "bvi": True},
                {"name": "c"},
                {"name": "c"},
            ]
        },
    )
    assert {"bd_id", "interfaces", "interfaces[3].name"} <= set(found)
    assert "bd_id" in problems(normalize_bd, "vpp/bd/b1", {"bd_id": 1 << 24})


def test_route_model_takes_missing_fields_from_the_key():
    v = normalize_route("vpp/route/0/10.1.0.0/16/10.0.0.2", {"outgoing_interface": "lo1"})
    assert v == {
        "dst": "10.1.0.0/16",
        "next_hop": "10.0.0.2",
        "outgoing_interface": "lo1",
        "vrf": 0,
        "weight": 1,
        "preference": 0,
    }
    v6 = normalize_route("vpp/route/3/fd01::/64/::", {"outgoing_interface": "lo1"})
    assert (v6["next_hop"], v6["vrf"]) == ("::", 3)


@pytest.mark.parametrize(
    ("key", "value", "field"),
    [
        ("vpp/route/0/10.1.0.0/16/10.0.0.2", {"dst": "10.2.0.0/16"}, "dst"),
        ("vpp/route/0/10.1.0.1/16/10.0.0.2", {}, "dst"),
        ("vpp/route/0/10.1.0.0/16/10.0.0.2", {"vrf": 4}, "vrf"),
        ("vpp/route/x/10.1.0.0/16/10.0.0.2", {}, "vrf"),
        ("vpp/route/0/10.1.0.0/16/10.0.0.2", {"next_hop": "10.0.0.3"}, "next_hop"),
        ("vpp/route/0/10.1.0.0/16/fd00::1", {}, "next_hop"),
        ("vpp/route/0/10.1.0.0/16/0.0.0.0", {}, "outgoing_interface"),
        ("vpp/route/0/10.1.0.0/16/10.0.0.2", {"weight": 0}, "weight"),
        ("vpp/route/0/10.1.0.0/16", {}, "(key)"),
    ],
)
def test_route_errors(key, value, field):
    assert field in problems(normalize_route, key, value)


def test_keys_build_and_parse():
    from southbound.vpp import keys

    assert keys.is_interface_key("vpp/interface/lo1")
    assert not keys.is_interface_key("vpp/interface/lo1/unnumbered")
    assert keys.interface_name("vpp/interface/lo1") == "lo1"
    address = keys.address_key("lo1", "10.0.0.1/24")
    assert keys.is_address_key(address) and not keys.is_interface_key(address)
    assert keys.parse_address_key(address) == ("lo1", "10.0.0.1/24")
    assert keys.unnumbered_interface(keys.unnumbered_key("lo1")) == "lo1"
    assert keys.parse_bd_member_key(keys.bd_member_key("b1", "lo1")) == ("b1", "lo1")
    route = keys.route_key(0, "10.1.0.0/16", "10.0.0.2")
    assert keys.is_route_key(route) and not keys.is_route_key("vpp/route/0/10.1.0.0/16")
    assert keys.parse_route_key(route) == ("0", "10.1.0.0/16", "10.0.0.2")
    assert keys.is_route_key(keys.route_key(3, "fd01::/64", "::"))

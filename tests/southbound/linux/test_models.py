"""Validation and canonical forms of the interface and route models (no kernel needed)."""

from __future__ import annotations

import ipaddress

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from southbound.linux import addr, keys
from southbound.linux.errors import InvalidValueError
from southbound.linux.models.interface import parse_interface
from southbound.linux.models.route import gateway_in_address, parse_route


def invalid_fields(parse, key, value) -> dict[str, str]:
    with pytest.raises(InvalidValueError) as caught:
        parse(key, value)
    assert str(caught.value).startswith(f"{key}: field ")
    assert caught.value.fields == tuple(caught.value.problems)
    return caught.value.problems


def test_keys_round_trip_and_do_not_overlap() -> None:
    assert keys.parse_interface_key("linux/interface/veth0") == "veth0"
    assert keys.parse_address_key(keys.address_key("v0", "10.0.0.1/24")) == ("v0", "10.0.0.1/24")
    assert keys.parse_master_key(keys.master_key("v0")) == "v0"
    assert keys.parse_host_key(keys.host_key("eth0")) == "eth0"
    assert keys.parse_host_address_key(keys.host_address_key("eth0", "fd00::1/64")) == (
        "eth0", "fd00::1/64")
    route = keys.parse_route_key(keys.route_key(254, "10.1.0.0/16", "v0"))
    assert route == keys.RouteKey("main", "10.1.0.0/16", "v0")
    # A host link named "master" or with addresses is never mistaken for kvmesh derived values.
    assert keys.parse_master_key(keys.host_key("master")) is None
    assert keys.parse_address_key(keys.host_address_key("eth0", "10.0.0.1/24")) is None
    assert keys.parse_interface_key(keys.address_key("v0", "10.0.0.1/24")) is None
    assert keys.parse_host_key(keys.host_address_key("eth0", "10.0.0.1/24")) is None


def test_interface_canonical_form_fills_defaults_and_normalises() -> None:
    spec = parse_interface("linux/interface/v0", {
        "type": "veth", "veth": {"peer": "v1"}, "mac": "02:AA:bb:00:00:01",
        "addresses": ["FD00::1/64", "10.0.0.1/24"],
    })
    assert spec.to_value() == {
        "type": "veth", "enabled": True, "mtu": None, "mac": "02:aa:bb:00:00:01",
        "addresses": ["10.0.0.1/24", "fd00::1/64"], "master": None, "veth": {"peer": "v1"},
    }


def test_interface_types_have_their_sections() -> None:
    vxlan = parse_interface("linux/interface/vx0", {
        "type": "vxlan", "vxlan": {"vni": 10, "remote": "10.0.0.2", "device": "eth0"}})
    assert vxlan.to_value()["vxlan"] == {
        "vni": 10, "local": None, "remote": "10.0.0.2", "port": 4789, "device": "eth0"}
    assert vxlan.lower_device == "eth0"
    macvlan = parse_interface("linux/interface/mv0", {"type": "macvlan",
                                                      "macvlan": {"parent": "eth0"}})
    assert macvlan.to_value()["macvlan"] == {"parent": "eth0", "mode": "bridge"}
    assert parse_interface("linux/interface/t0", {"type": "tap"}).to_value()["tap"] == {}
    assert "veth" not in parse_interface("linux/interface/br0", {"type": "bridge"}).to_value()


@pytest.mark.parametrize(("value", "field", "fragment"), [
    ({"type": "veth", "veth": {"peer": "v1"}, "mtu": 10}, "mtu", "integer 68..65535"),
    ({"type": "veth", "veth": {"peer": "v1"}, "mtu": "1500"}, "mtu", "integer 68..65535"),
    ({"type": "veth", "veth": {"peer": "v1"}, "mtu": True}, "mtu", "integer"),
    ({"type": "dummy"}, "type", "one of"),
    ({}, "type", "required"),
    ({"type": "veth"}, "veth", "required"),
    ({"type": "veth", "veth": {"peer": "a-name-that-is-too-long"}}, "veth.peer", "15 characters"),
    ({"type": "veth", "veth": {"peer": "v0"}}, "veth.peer", "differ"),
    ({"type": "bridge", "mac": "01:00:00:00:00:01"}, "mac", "unicast"),
    ({"type": "bridge", "mac": "zz"}, "mac", "MAC address"),
    ({"type": "bridge", "addresses": ["10.0.0.1"]}, "addresses[0]", "CIDR"),
    ({"type": "bridge", "addresses": ["10.0.0.1/33"]}, "addresses[0]", "CIDR"),
    ({"type": "bridge", "addresses": ["10.0.0.1/24", "10.0.0.1/24"]}, "addresses[1]",
     "duplicate"),
    ({"type": "bridge", "addresses": "10.0.0.1/24"}, "addresses", "list"),
    ({"type": "bridge", "enabled": "yes"}, "enabled", "true or false"),
    ({"type": "bridge", "master": "v0"}, "master", "own master"),
    ({"type": "bridge", "master": "a b"}, "master", "whitespace"),
    ({"type": "bridge", "colour": "red"}, "colour", "unknown field"),
    ({"type": "bridge", "veth": {"peer": "x"}}, "veth", "only allowed with type 'veth'"),
    ({"type": "vxlan", "vxlan": {"vni": 2**24}}, "vxlan.vni", "0..16777215"),
    ({"type": "vxlan", "vxlan": {"vni": 1, "port": 0}}, "vxlan.port", "1..65535"),
    ({"type": "vxlan", "vxlan": {"vni": 1, "local": "10.0.0.1", "remote": "fd00::1"}},
     "vxlan.remote", "same address family"),
    ({"type": "vxlan", "vxlan": {"vni": 1, "remote": "239.1.1.1"}}, "vxlan.device", "multicast"),
    ({"type": "macvlan", "macvlan": {"parent": "eth0", "mode": "weird"}}, "macvlan.mode",
     "one of"),
    ({"type": "macvlan", "macvlan": {}}, "macvlan.parent", "required"),
    ({"type": "tap", "tap": {"queues": 2}}, "tap.queues", "unknown field"),
])
def test_interface_field_errors_name_the_field(value, field, fragment) -> None:
    fields = invalid_fields(parse_interface, "linux/interface/v0", value)
    assert field in fields, fields
    assert fragment in fields[field]


def test_an_unquoted_mac_in_yaml_is_told_to_be_quoted() -> None:
    """YAML 1.1 reads `mac: 12:34:56:00:01:02` as a base-60 integer."""
    value = yaml.safe_load("{type: bridge, mac: 12:34:56:00:01:02}")  # as kvmesh.statefile
    assert value["mac"] == 9783936062
    fields = invalid_fields(parse_interface, "linux/interface/v0", value)
    assert fields["mac"] == ("must be a string, got 9783936062 (quote it in YAML: unquoted, "
                             "12:34:56:00:01:02 reads as a number)")


def test_interface_errors_are_all_reported_together() -> None:
    fields = invalid_fields(parse_interface, "linux/interface/v0",
                            {"type": "bridge", "mtu": 1, "mac": "x", "enabled": 3})
    assert set(fields) == {"mtu", "mac", "enabled"}


def test_interface_message_format() -> None:
    with pytest.raises(InvalidValueError) as caught:
        parse_interface("linux/interface/veth0", {"type": "veth", "veth": {"peer": "v1"},
                                                  "mtu": 1})
    assert str(caught.value) == ("linux/interface/veth0: field 'mtu': must be an integer "
                                 "68..65535, got 1")


@pytest.mark.parametrize(("key", "fragment"), [
    ("linux/interface/host", "reserved"),
    ("linux/interface/abcdefghijklmnop", "15 characters"),
    ("linux/interface/a:b", "must not contain"),
])
def test_interface_names_from_keys_are_checked(key, fragment) -> None:
    fields = invalid_fields(parse_interface, key, {"type": "bridge"})
    assert fragment in fields["(key)"]


def test_non_mapping_values_are_invalid() -> None:
    assert "(value)" in invalid_fields(parse_interface, "linux/interface/v0", ["veth"])
    assert "(value)" in invalid_fields(parse_route, "linux/route/main/10.0.0.0/8/v0", "x")


def test_route_canonical_defaults() -> None:
    v4 = parse_route("linux/route/main/10.1.0.0/16/v0", {"gateway": "10.0.0.2"})
    assert v4.to_value() == {"dst": "10.1.0.0/16", "dev": "v0", "gateway": "10.0.0.2",
                             "metric": 0, "table": 254, "scope": "universe", "type": "unicast",
                             "src": None, "nexthops": []}
    connected = parse_route("linux/route/100/10.2.0.0/16/v0", {})
    assert (connected.scope, connected.table, connected.gateway) == ("link", 100, None)
    v6 = parse_route("linux/route/main/fd01::/64/v0", {"gateway": "FD00::2", "metric": 0})
    assert (v6.metric, v6.scope, v6.gateway) == (1024, "universe", "fd00::2")


@pytest.mark.parametrize(("key", "value", "field", "fragment"), [
    ("linux/route/main/10.1.0.1/16/v0", {}, "(key)", "host bits zero"),
    ("linux/route/main/fd01:0::/64/v0", {}, "(key)", "as fd01::/64"),
    ("linux/route/mainx/10.1.0.0/16/v0", {}, "(key)", "table must be one of"),
    ("linux/route/0/10.1.0.0/16/v0", {}, "(key)", "table must be one of"),
    ("linux/route/main/10.1.0.0/16/v0", {"table": 100}, "table", "match the key"),
    ("linux/route/main/10.1.0.0/16/v0", {"dev": "v1"}, "dev", "match the key"),
    ("linux/route/main/10.1.0.0/16/v0", {"dst": "10.2.0.0/16"}, "dst", "match the key"),
    ("linux/route/main/10.1.0.0/16/v0", {"gateway": "fd00::1"}, "gateway", "IPv4"),
    ("linux/route/main/10.1.0.0/16/v0", {"gateway": "nope"}, "gateway", "address"),
    ("linux/route/main/10.1.0.0/16/v0", {"metric": -1}, "metric", "integer"),
    ("linux/route/main/10.1.0.0/16/v0", {"scope": "galaxy"}, "scope", "one of"),
    ("linux/route/main/10.1.0.0/16/v0", {"gateway": "10.0.0.1", "scope": "link"}, "scope",
     "gateway"),
    ("linux/route/main/fd01::/64/v0", {"scope": "link"}, "scope", "IPv6"),
    ("linux/route/main/10.1.0.0/16/v0", {"via": "x"}, "via", "unknown field"),
])
def test_route_field_errors(key, value, field, fragment) -> None:
    fields = invalid_fields(parse_route, key, value)
    assert field in fields, fields
    assert fragment in fields[field]


def test_route_value_may_repeat_the_key() -> None:
    spec = parse_route("linux/route/main/10.1.0.0/16/v0",
                       {"dst": "10.1.0.0/16", "dev": "v0", "table": 254})
    assert spec.identity() == (254, "10.1.0.0/16", "v0", 0)


def test_gateway_subnet_match() -> None:
    assert gateway_in_address("10.0.0.254", "10.0.0.1/24")
    assert not gateway_in_address("10.0.1.254", "10.0.0.1/24")
    assert not gateway_in_address("fd00::1", "10.0.0.1/24")
    assert gateway_in_address("fd00::2", "fd00::1/64")


def test_route_tables_are_named_in_keys() -> None:
    assert parse_route("linux/route/main/10.1.0.0/16/v0", {}).table == 254
    assert parse_route("linux/route/local/10.1.0.0/16/v0", {"table": "local"}).table == 255
    assert parse_route("linux/route/100/10.1.0.0/16/v0", {"table": 100}).table == 100
    assert "as 'main'" in str(invalid_fields(parse_route, "linux/route/254/10.1.0.0/16/v0", {}))
    assert keys.route_key(254, "10.1.0.0/16", "v0") == "linux/route/main/10.1.0.0/16/v0"
    assert keys.route_key(7, "10.1.0.0/16", "v0") == "linux/route/7/10.1.0.0/16/v0"


@settings(max_examples=300, deadline=None)
@given(st.one_of(
    st.tuples(st.ip_addresses(v=4), st.integers(0, 32)),
    st.tuples(st.ip_addresses(v=6), st.integers(0, 128)),
))
def test_fast_cidr_parsing_agrees_with_ipaddress(sample) -> None:
    address, prefixlen = sample
    for spelling in {str(address), address.exploded}:
        text = f"{spelling}/{prefixlen}"
        parsed = addr.parse_cidr(text)
        assert ipaddress.ip_interface(parsed.text) == ipaddress.ip_interface(text)
        assert addr.parse_cidr(parsed.text).text == parsed.text  # canonical is a fixed point
        network = ipaddress.ip_interface(text).network
        assert parsed.host_bits_zero == (network.network_address == address)
        assert parsed.contains(address.packed)
        assert parsed.contains(network.network_address.packed)


@pytest.mark.parametrize("text", ["10.0.0.1", "10.0.0.1/33", "10.0.0/8", "010.0.0.1/8",
                                  "fd00::1/129", "fd00::g/64", "10.0.0.1/+8", "/8", "x/8",
                                  "fe80::1%eth0/64", "10.0.0.1/ 8"])
def test_fast_cidr_parsing_rejects_what_ipaddress_rejects(text) -> None:
    with pytest.raises(ValueError):
        addr.parse_cidr(text)

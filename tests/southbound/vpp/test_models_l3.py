"""The proxy ARP, L3XC and IPv6 ND models: keys, canonical forms and VPP's limits."""

from __future__ import annotations

import pytest

from scheduler import InvalidValueError
from southbound.vpp.models.ip6_nd import check_ip6_nd
from southbound.vpp.models.l3xc import check_l3xc
from southbound.vpp.models.proxy_arp import check_proxy_arp
from southbound.vpp.models.proxy_arp_interface import check_proxy_arp_interface
from southbound.vpp.registry import REGISTRY


def problems(check, key: str, value) -> dict[str, str]:
    with pytest.raises(InvalidValueError) as info:
        check(key, value)
    return info.value.problems  # type: ignore[attr-defined]


def test_proxy_arp_range_key_and_value():
    assert check_proxy_arp("vpp/proxy-arp/10/10.0.0.1-10.0.0.9", {}) == {
        "vrf": 10, "low": "10.0.0.1", "high": "10.0.0.9"}
    assert check_proxy_arp("vpp/proxy-arp/0/10.0.0.1-10.0.0.1", {"vrf": 0, "low": "10.0.0.1"})
    for key, why in (("vpp/proxy-arp/0/10.0.0.9-10.0.0.1", "reversed"),
                     ("vpp/proxy-arp/0/fd00::1-fd00::9", "IPv4 only"),
                     ("vpp/proxy-arp/0/10.0.0.1-fd00::9", "IPv4 only"),
                     ("vpp/proxy-arp/x/10.0.0.1-10.0.0.9", "not an integer"),
                     ("vpp/proxy-arp/0/10.0.0.01-10.0.0.9", "IPv4"),
                     ("vpp/proxy-arp/0/10.0.0.1", "IPv4")):
        assert why in problems(check_proxy_arp, key, {})["(key)"], key
    assert "does not match" in problems(
        check_proxy_arp, "vpp/proxy-arp/0/10.0.0.1-10.0.0.9", {"high": "10.0.0.8"})["high"]
    assert "low" in problems(check_proxy_arp, "vpp/proxy-arp/0/10.0.0.1-10.0.0.9",
                             {"low": "fd00::1"})


def test_proxy_arp_keys_do_not_collide():
    for key, model in (("vpp/proxy-arp/interface/lan", "vpp/proxy-arp/interface"),
                       ("vpp/proxy-arp/0/10.0.0.1-10.0.0.2", "vpp/proxy-arp")):
        spec = REGISTRY.model_for(key)
        assert spec is not None and spec.name == model, key
    assert check_proxy_arp_interface("vpp/proxy-arp/interface/lan", {}) == {"interface": "lan"}
    assert "interface" in problems(check_proxy_arp_interface, "vpp/proxy-arp/interface/lan",
                                   {"interface": "wan"})
    assert "(key)" in problems(check_proxy_arp_interface, "vpp/proxy-arp/interface/a b", {})


def test_l3xc_canonical_paths_and_limits():
    v = check_l3xc("vpp/l3xc/lan/ipv4", {"paths": [
        {"next_hop": "10.0.0.3", "interface": "up"}, {"next_hop": "10.0.0.2", "weight": 2}]})
    assert v == {"interface": "lan", "family": "ipv4", "paths": [
        {"next_hop": "10.0.0.2", "interface": None, "table": 0, "weight": 2, "preference": 0},
        {"next_hop": "10.0.0.3", "interface": "up", "table": 0, "weight": 1, "preference": 0}]}
    assert "paths" in problems(check_l3xc, "vpp/l3xc/lan/ipv4", {"paths": []})
    assert "paths[0].next_hop" in problems(check_l3xc, "vpp/l3xc/lan/ipv6",
                                           {"paths": [{"next_hop": "10.0.0.2"}]})
    assert "paths[0].interface" in problems(check_l3xc, "vpp/l3xc/lan/ipv4",
                                            {"paths": [{"interface": "lan"}]})
    assert "paths[0]" in problems(check_l3xc, "vpp/l3xc/lan/ipv4", {"paths": [{"weight": 2}]})
    assert "paths[0].table" in problems(check_l3xc, "vpp/l3xc/lan/ipv4",
                                        {"paths": [{"interface": "up", "table": 3}]})
    assert "paths[0].weight" in problems(check_l3xc, "vpp/l3xc/lan/ipv4",
                                         {"paths": [{"interface": "up", "weight": 0}]})
    assert "paths[1]" in problems(check_l3xc, "vpp/l3xc/lan/ipv4",
                                  {"paths": [{"interface": "up"}, {"interface": "up"}]})
    assert "(key)" in problems(check_l3xc, "vpp/l3xc/lan/ip4", {"paths": [{"interface": "up"}]})


def test_ip6_nd_defaults_and_vpps_limits():
    v = check_ip6_nd("vpp/ip6-nd/lan", {"max_interval": 30, "lifetime": 0})
    assert (v["min_interval"], v["lifetime"], v["initial_count"]) == (22, 0, 3)  # VPP's 0.75 x
    assert "min_interval" in problems(check_ip6_nd, "vpp/ip6-nd/lan",
                                      {"max_interval": 30, "min_interval": 23})
    assert "min_interval" in problems(check_ip6_nd, "vpp/ip6-nd/lan", {"min_interval": 2})
    assert "max_interval" in problems(check_ip6_nd, "vpp/ip6-nd/lan", {"max_interval": 3})
    assert "lifetime" in problems(check_ip6_nd, "vpp/ip6-nd/lan", {"lifetime": 200})
    assert "lifetime" in problems(check_ip6_nd, "vpp/ip6-nd/lan", {"lifetime": 9001})
    assert "initial_count" in problems(check_ip6_nd, "vpp/ip6-nd/lan", {"initial_count": 4})
    assert "initial_interval" in problems(check_ip6_nd, "vpp/ip6-nd/lan",
                                          {"initial_interval": 17})


def test_ip6_nd_prefixes():
    v = check_ip6_nd("vpp/ip6-nd/lan", {"prefixes": [{"prefix": "2001:db8:2::/64"},
                                                     {"prefix": "2001:db8:1::/64"}]})
    assert [p["prefix"] for p in v["prefixes"]] == ["2001:db8:1::/64", "2001:db8:2::/64"]
    for prefixes, field in (
            ([{"prefix": "2001:db8::1/64"}], "prefixes[0].prefix"),  # host bits
            ([{"prefix": "10.0.0.0/8"}], "prefixes[0].prefix"),
            ([{"prefix": "2001:db8::/64"}, {"prefix": "2001:db8::/48"}], "prefixes[1].prefix"),
            ([{"prefix": "2001:db8::/64", "valid_lifetime": 4294967295}],
             "prefixes[0].preferred_lifetime")):
        assert field in problems(check_ip6_nd, "vpp/ip6-nd/lan", {"prefixes": prefixes}), field
    assert check_ip6_nd("vpp/ip6-nd/lan", {"prefixes": [{
        "prefix": "2001:db8::/64", "valid_lifetime": 4294967295,
        "preferred_lifetime": 4294967295}]})

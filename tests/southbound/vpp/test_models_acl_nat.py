"""The ACL and NAT44 models: canonical forms and field-level refusals (no VPP needed)."""

from __future__ import annotations

import pytest

from kvmesh.agent.models import ModelError, validate_model
from southbound.vpp.models.acl import check_acl
from southbound.vpp.models.nat44_global import check_global
from southbound.vpp.models.nat44_interface import check_interface
from southbound.vpp.models.nat44_pool import check_pool
from southbound.vpp.models.nat44_static import check_static


def problems(key: str, value) -> dict:
    with pytest.raises(ModelError) as info:
        validate_model(key, value)
    return info.value.problems


def test_acl_canonical_form():
    value = check_acl("vpp/acl/web", {
        "rules": [{"action": "permit", "dst": "fd00::/64", "protocol": "icmpv6"},
                  {"action": "deny", "protocol": 6, "dst_ports": [80, 81]}],
        "interfaces": {"ingress": ["b", "a"]}})
    assert value == {"rules": [
        {"action": "permit", "src": "::/0", "dst": "fd00::/64", "protocol": 58,
         "src_ports": [0, 65535], "dst_ports": [0, 65535]},
        {"action": "deny", "src": "0.0.0.0/0", "dst": "0.0.0.0/0", "protocol": 6,
         "src_ports": [0, 65535], "dst_ports": [80, 81]}],
        "interfaces": {"ingress": ["a", "b"], "egress": []}}


def test_acl_refusals_name_the_fields():
    assert problems("vpp/acl/web", {"rules": [
        {"action": "allow"},
        {"action": "deny", "src": "10.0.0.1/8"},
        {"action": "deny", "src": "10.0.0.0/8", "dst": "::/0"},
        {"action": "deny", "dst_ports": [9, 1]},
        {"action": "deny", "protocol": "gre"}],
        "interfaces": {"egress": ["x", "x"]}}).keys() == {
        "rules[0].action", "rules[1].src", "rules[2].dst", "rules[3].dst_ports",
        "rules[4].protocol", "interfaces.egress[1]"}
    assert "(key)" in problems("vpp/acl/vpp-3", {})


def test_nat44_models():
    assert check_global("vpp/nat44/global", {}) == {"enabled": True, "sessions": None}
    assert check_interface("vpp/nat44/interface/up", {"outside": True}) == {
        "inside": False, "outside": True}
    assert problems("vpp/nat44/interface/up", {}) == {
        "": "at least one of inside, outside must be true"}
    assert check_pool("vpp/nat44/pool/198.51.100.1", {}) == {
        "first_ip": "198.51.100.1", "last_ip": "198.51.100.1", "vrf": None, "twice_nat": False}
    assert problems("vpp/nat44/pool/198.51.100.1-198.51.100.4",
                    {"last_ip": "198.51.100.5"}) == {
        "last_ip": "198.51.100.5 does not match the key's 198.51.100.4"}
    assert "(key)" in problems("vpp/nat44/pool/198.51.100.9-198.51.100.1", {})
    assert check_static("vpp/nat44/static/web", {
        "protocol": "udp", "local_ip": "10.0.0.5", "local_port": 53,
        "external_ip": "198.51.100.1", "external_port": 53})["protocol"] == 17
    assert problems("vpp/nat44/static/web", {"local_ip": "10.0.0.5", "local_port": 80}) \
        .keys() == {"external_ip", "protocol"}

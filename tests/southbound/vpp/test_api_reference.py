"""The emulator's API definitions against VPP 24.06's own generated JSON (reference data).

Every message, type, union, enum, alias and service the emulator serves must be exactly VPP
24.06's: same name, CRC, field layout, defaults, options (e.g. `deprecated`), enum values, and
declared in the same section (`enum` vs `enumflag`). Skipped, with a message, when the reference
directory is absent (see tests/southbound/vpp/reference.py).
"""

from __future__ import annotations

from typing import Any

from kvmesh.vppemu.apidef import load_api_documents
from tests.southbound.vpp.reference import (
    SECTIONS,
    Reference,
    require_reference_dir,
    without_comment,
)


def differences(reference: Reference, documents: list[dict[str, Any]]) -> list[str]:
    problems = []
    served = 0
    for doc in documents:
        for section in SECTIONS:
            for item in doc.get(section, []):
                item = without_comment(item)
                name = item[0]
                served += section == "messages"
                expected = reference.definitions.get((section, name))
                if expected is None:
                    other = reference.section_of(name)
                    problems.append(f"{section} {name}: " + (
                        f"VPP 24.06 declares it in {other!r}" if other else "not in VPP 24.06"))
                elif item != expected:
                    problems.append(f"{section} {name}: served {item}, VPP 24.06 has {expected}")
        for name, alias in doc.get("aliases", {}).items():
            if reference.aliases.get(name) != alias:
                problems.append(f"alias {name}: served {alias}, VPP 24.06 has "
                                f"{reference.aliases.get(name)}")
        for name, service in doc.get("services", {}).items():
            if reference.services.get(name) != service:
                problems.append(f"service {name}: served {service}, VPP 24.06 has "
                                f"{reference.services.get(name)}")
    assert served > 60, f"only {served} messages served"
    return problems


def test_every_served_definition_is_vpp_24_06s() -> None:
    reference = Reference(require_reference_dir())
    problems = differences(reference, load_api_documents())
    assert not problems, "\n".join(problems)


def test_a_changed_definition_is_reported() -> None:
    reference = Reference(require_reference_dir())
    documents = load_api_documents()
    for doc in documents:
        for message in doc.get("messages", []):
            if message[0] == "create_loopback":
                message[-1] = {**message[-1], "crc": "0x00000000"}
    problems = differences(reference, documents)
    assert [p for p in problems if p.startswith("messages create_loopback:")]


# Every model of the VPP southbound, applied by a client that knows only VPP 24.06's definitions.
SCENARIO: dict[str, Any] = {
    "vpp/interface/lo1": {"type": "loopback", "mtu": 1500, "mac": "02:00:00:00:00:01",
                          "addresses": ["10.0.0.1/24", "fd00::1/64"]},
    "vpp/interface/lo2": {"type": "loopback", "vrf": 10, "addresses": ["10.2.0.1/24"]},
    "vpp/interface/lo3": {"type": "loopback", "unnumbered": {"interface_with_ip": "lo1"}},
    "vpp/interface/tap1": {"type": "tap", "tap": {"host_if_name": "vpp-tap1"}},
    "vpp/bd/bd1": {"bd_id": 7, "arp_term": True,
                   "interfaces": [{"name": "tap1"}, {"name": "lo3", "bvi": True}]},
    "vpp/route/0/10.9.0.0/16/10.0.0.2": {"outgoing_interface": "lo1"},
    "vpp/route/10/10.8.0.0/16/10.2.0.2": {"outgoing_interface": "lo2", "weight": 3},
    "vpp/acl/web": {"rules": [{"action": "permit", "dst": "10.0.0.0/24", "protocol": "tcp",
                               "dst_ports": [80, 80]},
                              {"action": "reflect", "src": "fd00::/64", "protocol": "icmpv6"},
                              {"action": "deny"}],
                    "interfaces": {"ingress": ["lo1"], "egress": ["tap1"]}},
    "vpp/abf/7": {"acl": "web", "paths": [{"next_hop": "10.0.0.2", "interface": "lo1"},
                                          {"next_hop": "10.8.0.1", "table": 10}],
                  "interfaces": [{"interface": "lo2", "priority": 3}]},
    "vpp/nat44/global": {"sessions": 2048},
    "vpp/nat44/interface/lo1": {"outside": True},
    "vpp/nat44/interface/lo2": {"inside": True},
    "vpp/nat44/pool/198.51.100.1-198.51.100.2": {"twice_nat": True},
    "vpp/nat44/static/web": {"protocol": "tcp", "local_ip": "10.2.0.5", "local_port": 80,
                             "external_ip": "198.51.100.9", "external_port": 8080},
    "vpp/nat44/static/dns": {"local_ip": "10.2.0.6", "external_interface": "lo1"},
    "vpp/vrf/ipv4/10": {"name": "blue"},
    "vpp/interface/lo1.10": {"type": "sub_interface", "sub_interface": {
        "parent": "lo1", "sub_id": 10, "outer_vlan": 10}, "addresses": ["10.10.0.1/24"]},
    "vpp/interface/lo1.20": {"type": "sub_interface", "sub_interface": {
        "parent": "lo1", "sub_id": 20, "outer_vlan": 20, "inner_vlan": 30}},
    "vpp/interface/lo4": {"type": "loopback"},
    "vpp/interface/lo5": {"type": "loopback"},
    "vpp/xconnect/lo4": {"transmit_interface": "lo5"},
    "vpp/bd/bd1/fib/02:00:00:00:00:0a": {"interface": "tap1", "static": True},
    "vpp/neighbor/lo1/10.0.0.2": {"mac": "02:00:00:00:00:02"},
    "vpp/interface/vx1": {"type": "vxlan", "vxlan": {"src": "10.0.0.1", "dst": "10.0.0.9",
                                                     "vni": 100, "encap_vrf": 0}},
    "vpp/interface/mif1": {"type": "memif", "memif": {"socket": "/run/vpp/kvt-memif.sock",
                                                      "id": 0, "master": True}},
    "vpp/interface/bond0": {"type": "bond", "bond": {"mode": "lacp", "load_balance": "l34"}},
    "vpp/interface/lo6": {"type": "loopback"},
    "vpp/bond/bond0/member/lo6": {"passive": True},
    "vpp/interface/gre1": {"type": "gre", "gre": {"src": "10.0.0.1", "dst": "10.0.0.77"},
                           "addresses": ["10.77.0.1/30"]},
    "vpp/interface/ipip1": {"type": "ipip", "ipip": {"src": "fd00::1", "dst": "fd00::77",
                                                     "outer_vrf": 0}},
    "vpp/ipsec/sa/10": {"spi": 1001, "crypto_alg": "aes-gcm-128", "crypto_key": "ab" * 16,
                        "salt": 7, "anti_replay": True,
                        "tunnel": {"src": "10.0.0.1", "dst": "10.0.0.9"}},
    "vpp/ipsec/sa/20": {"spi": 1002, "protocol": "ah", "integ_alg": "sha-256-128",
                        "integ_key": "cd" * 20, "inbound": True, "udp_encap": True},
    "vpp/ipsec/spd/1": {"policies": [
        {"priority": 10, "direction": "outbound", "action": "protect", "sa": 10,
         "remote_addresses": ["10.9.0.0", "10.9.255.255"], "protocol": "tcp"},
        {"priority": 5, "direction": "inbound", "action": "protect", "sa": 20},
        {"direction": "inbound", "action": "bypass", "protocol": "esp"}],
        "interfaces": ["lo1"]},
    "vpp/ipsec/tunnel-protection/gre1": {"sa_out": 10, "sa_in": [20]},
    "vpp/srv6/localsid/fc00::1": {"behavior": "end.dt4", "table": 10},
    "vpp/srv6/localsid/fc00::2": {"behavior": "end.x", "interface": "lo1",
                                  "next_hop": "fd00::2"},
    "vpp/srv6/policy/fc00:b::1": {"segment_lists": [{"segments": ["fc00::a", "fc00::b"]},
                                                    {"segments": ["fc00::c"], "weight": 2}]},
    "vpp/srv6/steering/to-b": {"bsid": "fc00:b::1", "prefix": "10.8.0.0/16", "table": 10},
    "vpp/srv6/steering/l2": {"bsid": "fc00:b::1", "interface": "tap1"},
    "vpp/interface/wg0": {"type": "wireguard", "addresses": ["10.55.0.1/24"], "wireguard": {
        "private_key": "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=", "port": 51820,
        "src_addr": "10.0.0.1"}},
    "vpp/wireguard/peer/p1": {"interface": "wg0", "endpoint": "10.0.0.99", "port": 51820,
                              "public_key": "BwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc=",
                              "allowed_ips": ["10.56.0.0/16", "fd56::/64"]},
    "vpp/span/lo4/lo1": {"state": "rx"},
    "vpp/span/tap1/lo1": {"state": "both", "l2": True},
    "vpp/punt/l4/ipv4/udp/67": {"socket": "/run/kvt/dhcp.sock"},
    "vpp/punt/exception/ipsec4-no-such-tunnel": {"socket": "/run/kvt/ike.sock"},
}


def test_the_southbound_with_vpp_24_06s_definitions_as_apidir(emulator) -> None:
    """What a real VPP's /usr/share/vpp/api gives vpp_papi: the reference files, nothing else."""
    import southbound.vpp
    from scheduler import KVScheduler, ValueState

    apidir = require_reference_dir()
    scheduler = KVScheduler()
    plugin = southbound.vpp.register(scheduler, socket=emulator.socket_path, apidir=str(apidir))
    try:
        txn = scheduler.start_txn()
        for key, value in SCENARIO.items():
            txn.set_value(key, value)
        txn.commit()
        states = {key: scheduler.get_value_status(key) for key in SCENARIO}
        failed = {k: (s.state, s.error) for k, s in states.items()
                  if s.state != ValueState.CONFIGURED}
        assert not failed
        # Read back through the same client: drift-free, so a downstream resync changes nothing.
        before = emulator.control.counters()
        scheduler.resync({}, kind="downstream")
        after = emulator.control.counters()
        changed = {k: after[k] - before.get(k, 0) for k in after
                   if k.startswith("msg.") and not k.endswith(("_dump", "control_ping"))
                   and after[k] != before.get(k, 0)}
        assert set(changed) <= {"msg.sw_interface_get_table", "msg.nat44_show_running_config",
                                "msg.lcp_itf_pair_get_v2"}, \
            changed  # the reads that are not dumps
        # ... and removing everything leaves VPP as it was.
        txn = scheduler.start_txn()
        for key in SCENARIO:
            txn.set_value(key, None)
        txn.commit()
        state = emulator.control.state()
        assert [i["name"] for i in state["interfaces"]] == ["local0"]
        assert state["bridge_domains"] == []
        assert state["acl"] == {"acls": [], "interfaces": {}}
        assert state["abf"] == {"policies": [], "attachments": []}
        assert state["nat44"]["enabled"] is False
        assert state["ipsec"] == {"sas": [], "spds": [], "interfaces": {}, "protections": []}
        assert state["srv6"] == {"localsids": [], "policies": {}, "steerings": 0,
                                 "encap_source": "::"}
        assert state["wireguard"] == {"interfaces": [], "peers": []}
        assert (state["span"], state["punt"]) == ([], [])
    finally:
        plugin.close()
        scheduler.close()

"""`vpp/proxy-arp/...`, `vpp/l3xc/<interface>/<family>` and `vpp/ip6-nd/<interface>` through the
scheduler, the VPP southbound and vpp_papi, against the emulator."""

from __future__ import annotations

import pytest

from scheduler import ValueState
from tests.southbound.vpp.plugin_helpers import calls

pytestmark = pytest.mark.process

CONFIGURED, PENDING, OBTAINED = ValueState.CONFIGURED, ValueState.PENDING, ValueState.OBTAINED
LOOP = {"type": "loopback"}
WRITES = ("proxy_arp_add_del", "proxy_arp_intfc_enable_disable", "l3xc_update", "l3xc_del",
          "sw_interface_ip6_enable_disable", "sw_interface_ip6nd_ra_config",
          "sw_interface_ip6nd_ra_prefix")
STATE = {
    "vpp/vrf/ipv4/10": {},
    "vpp/vrf/ipv4/20": {},
    "vpp/interface/lan": {"type": "loopback", "addresses": ["10.0.0.1/24"]},
    "vpp/interface/up": {"type": "loopback", "addresses": ["10.9.0.1/24", "fd00:9::1/64"]},
    "vpp/proxy-arp/0/10.0.0.10-10.0.0.20": {},
    "vpp/proxy-arp/20/10.2.0.1-10.2.0.1": {},
    "vpp/proxy-arp/interface/lan": {},
    "vpp/l3xc/lan/ipv4": {"paths": [{"next_hop": "10.9.0.2", "interface": "up", "weight": 2},
                                    {"next_hop": "10.9.0.3", "interface": "up"}]},
    "vpp/l3xc/lan/ipv6": {"paths": [{"next_hop": "fd00:9::2", "table": 0}]},
    "vpp/ip6-nd/lan": {"managed": True, "max_interval": 60, "lifetime": 1800,
                       "prefixes": [{"prefix": "2001:db8:1::/64", "autoconfig": False},
                                    {"prefix": "2001:db8:2::/64", "valid_lifetime": 4294967295,
                                     "preferred_lifetime": 4294967295}]},
    "vpp/ip6-nd/up": {"suppress": True},
}


def test_applied_read_back_exactly_and_removed(vpp):
    start = vpp.control.state()
    vpp.commit(STATE)
    assert {k: vpp.state(k) for k in STATE if vpp.state(k) is not CONFIGURED} == {}
    api = vpp.papi.api
    lan, up = vpp.sw_if_index("lan"), vpp.sw_if_index("up")
    # Table 20 is the second IPv4 table created: VPP shows its FIB index, 2.
    ranges = {(d.proxy.table_id, str(d.proxy.low), str(d.proxy.hi))
              for d in api.proxy_arp_dump()}
    assert ranges == {(0, "10.0.0.10", "10.0.0.20"), (2, "10.2.0.1", "10.2.0.1")}
    assert [d.sw_if_index for d in api.proxy_arp_intfc_dump()] == [lan]
    xcs = {(d.l3xc.sw_if_index, str(p.nh.address.ip6 if int(p.proto) else p.nh.address.ip4),
            p.sw_if_index, p.weight) for d in api.l3xc_dump(sw_if_index=0xFFFFFFFF)
           for p in d.l3xc.paths}
    assert xcs == {(lan, "10.9.0.2", up, 2), (lan, "10.9.0.3", up, 1),
                   (lan, "fd00:9::2", 0xFFFFFFFF, 1)}
    (ra,) = api.sw_interface_ip6nd_ra_dump(sw_if_index=lan)
    assert (ra.adv_managed_flag, ra.max_radv_interval, ra.min_radv_interval,
            ra.adv_router_lifetime, ra.send_radv) == (True, 60.0, 45.0, 1800, True)
    prefixes = {str(p.prefix): (p.autonomous_flag, p.val_lifetime) for p in ra.prefixes}
    assert prefixes == {"2001:db8:1::/64": (False, 2592000),
                        "2001:db8:2::/64": (True, 4294967295)}
    (quiet,) = api.sw_interface_ip6nd_ra_dump(sw_if_index=up)
    assert quiet.send_radv is False
    # Read back exactly: a downstream resync writes nothing.
    before = vpp.control.counters()
    vpp.scheduler.resync({}, kind="downstream")
    assert calls(vpp, before, *WRITES) == dict.fromkeys(WRITES, 0)
    # Removed: VPP as it started (the interfaces' IPv6 links gone with their last hold).
    vpp.commit(dict.fromkeys(STATE))
    end = vpp.control.state()
    for part in ("proxy_arp", "l3xc", "ip6_nd"):
        assert end[part] == start[part], part

"""`vpp/proxy-arp/...`, `vpp/l3xc/<interface>/<family>` and `vpp/ip6-nd/<interface>` through the
scheduler, the VPP southbound and vpp_papi, against the emulator."""

from __future__ import annotations

import pytest

from scheduler import TransactionError, ValueState
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


def test_changes_are_applied_in_place(vpp):
    vpp.commit({k: STATE[k] for k in ("vpp/interface/lan", "vpp/interface/up",
                                      "vpp/l3xc/lan/ipv4", "vpp/ip6-nd/lan")})
    before = vpp.control.counters()
    vpp.commit({"vpp/l3xc/lan/ipv4": {"paths": [{"interface": "up"}]},
                "vpp/ip6-nd/lan": {"other": True, "prefixes": [
                    {"prefix": "2001:db8:1::/48"}, {"prefix": "2001:db8:3::/64"}]}})
    assert calls(vpp, before, "l3xc_update", "l3xc_del", "sw_interface_ip6_enable_disable",
                 "sw_interface_ip6nd_ra_config", "sw_interface_ip6nd_ra_prefix") == {
        "l3xc_update": 1, "l3xc_del": 0, "sw_interface_ip6_enable_disable": 0,
        "sw_interface_ip6nd_ra_config": 2,
        "sw_interface_ip6nd_ra_prefix": 4}  # two old ones out (one changed length), two in
    api = vpp.papi.api
    (xc,) = api.l3xc_dump(sw_if_index=vpp.sw_if_index("lan"))
    assert [(p.sw_if_index, str(p.nh.address.ip4)) for p in xc.l3xc.paths] == [
        (vpp.sw_if_index("up"), "0.0.0.0")]
    (ra,) = api.sw_interface_ip6nd_ra_dump(sw_if_index=vpp.sw_if_index("lan"))
    assert (ra.adv_managed_flag, ra.adv_other_flag, ra.max_radv_interval,
            ra.adv_router_lifetime) == (False, True, 200.0, 600)
    assert sorted(str(p.prefix) for p in ra.prefixes) == ["2001:db8:1::/48", "2001:db8:3::/64"]
    for key in ("vpp/l3xc/lan/ipv4", "vpp/ip6-nd/lan"):
        assert vpp.state(key) is CONFIGURED


def test_pending_until_interface_vrf_and_path_interface_exist(vpp):
    waiting = {"vpp/proxy-arp/30/10.3.0.1-10.3.0.9": {},
               "vpp/proxy-arp/interface/lan": {},
               # up exists: this one waits for the interface of its path
               "vpp/l3xc/up/ipv4": {"paths": [{"next_hop": "10.9.0.2", "interface": "lan"}]},
               "vpp/l3xc/up/ipv6": {"paths": [{"next_hop": "fd00::2", "table": 6}]},
               "vpp/ip6-nd/lan": {}}
    vpp.commit({**waiting, "vpp/interface/up": LOOP})
    assert {k: vpp.state(k) for k in waiting} == dict.fromkeys(waiting, PENDING)
    assert vpp.control.state()["proxy_arp"] == {"ranges": [], "interfaces": []}
    vpp.commit({"vpp/interface/lan": LOOP})
    assert vpp.state("vpp/l3xc/up/ipv4") is CONFIGURED
    assert vpp.state("vpp/proxy-arp/interface/lan") is CONFIGURED
    assert vpp.state("vpp/ip6-nd/lan") is CONFIGURED
    assert vpp.state("vpp/proxy-arp/30/10.3.0.1-10.3.0.9") is PENDING
    assert vpp.state("vpp/l3xc/up/ipv6") is PENDING
    vpp.commit({"vpp/vrf/ipv4/30": {}, "vpp/vrf/ipv6/6": {}})
    assert {k: vpp.state(k) for k in waiting} == dict.fromkeys(waiting, CONFIGURED)
    # The interface goes: what needs it waits again, and VPP has nothing of it left.
    vpp.commit({"vpp/interface/lan": None})
    assert vpp.state("vpp/ip6-nd/lan") is PENDING
    assert vpp.state("vpp/l3xc/up/ipv4") is PENDING
    state = vpp.control.state()
    assert state["proxy_arp"]["interfaces"] == [] and state["l3xc"] == [
        [vpp.sw_if_index("up"), True, 1]]


def test_what_kvmesh_did_not_create_is_obtained_and_kept(vpp):
    desired = {"vpp/interface/lan": LOOP, "vpp/interface/up": LOOP}
    vpp.commit(desired)
    lan, up = vpp.sw_if_index("lan"), vpp.sw_if_index("up")
    api = vpp.papi.api
    assert api.proxy_arp_add_del(is_add=True, proxy={
        "table_id": 0, "low": "10.7.0.1", "hi": "10.7.0.5"}).retval == 0
    assert api.proxy_arp_intfc_enable_disable(sw_if_index=up, enable=True).retval == 0
    path = {"sw_if_index": lan, "table_id": 0, "weight": 1, "preference": 0, "type": 0,
            "proto": 0, "nh": {"address": {"ip4": bytes([10, 7, 0, 2])}},
            "label_stack": [{}] * 16}
    assert api.l3xc_update(l3xc={"sw_if_index": up, "is_ip6": False, "n_paths": 1,
                                 "paths": [path]}).retval == 0
    assert api.sw_interface_ip6_enable_disable(sw_if_index=up, enable=True).retval == 0
    assert api.sw_interface_ip6nd_ra_config(sw_if_index=up, other=1).retval == 0
    # IPv6 enabled, RA untouched: VPP's own defaults, not a value.
    assert api.sw_interface_ip6_enable_disable(sw_if_index=lan, enable=True).retval == 0
    before = vpp.control.counters()
    vpp.scheduler.resync(desired, kind="full")
    assert calls(vpp, before, *WRITES) == dict.fromkeys(WRITES, 0)  # reads only
    for key in ("vpp/proxy-arp/0/10.7.0.1-10.7.0.5", "vpp/proxy-arp/interface/up",
                "vpp/l3xc/up/ipv4", "vpp/ip6-nd/up"):
        assert vpp.state(key) is OBTAINED, key
    assert vpp.state("vpp/ip6-nd/lan") is ValueState.NONEXISTENT
    state = vpp.control.state()
    assert state["proxy_arp"] == {"ranges": [["10.7.0.1", "10.7.0.5", 0]], "interfaces": [up]}
    assert state["l3xc"] == [[up, False, 1]]
    (ra,) = api.sw_interface_ip6nd_ra_dump(sw_if_index=up)
    assert ra.adv_other_flag is True and ra.send_radv is True


def test_the_southbound_with_vpp_24_06s_definitions(emulator):
    """A client that knows only VPP 24.06's API files applies and reads back the same values."""
    import southbound.vpp
    from scheduler import KVScheduler
    from tests.southbound.vpp.reference import require_reference_dir

    scheduler = KVScheduler()
    plugin = southbound.vpp.register(scheduler, socket=emulator.socket_path,
                                     apidir=str(require_reference_dir()))
    try:
        txn = scheduler.start_txn()
        for key, value in STATE.items():
            txn.set_value(key, value)
        txn.commit()
        failed = {k: s.error for k in STATE
                  if (s := scheduler.get_value_status(k)).state is not CONFIGURED}
        assert not failed
        before = emulator.control.counters()
        scheduler.resync({}, kind="downstream")
        after = emulator.control.counters()
        assert {n: after.get(f"msg.{n}", 0) - before.get(f"msg.{n}", 0) for n in WRITES} == \
            dict.fromkeys(WRITES, 0)
    finally:
        plugin.close()
        scheduler.close()


def test_ra_on_an_interface_without_ethernet_fails_and_holds_nothing(vpp):
    tunnel = {"type": "ipip", "ipip": {"src": "10.0.0.1", "dst": "10.0.0.2"}}
    with pytest.raises(TransactionError, match=r"IP6_NOT_ENABLED \(-62\)"):
        vpp.commit({"vpp/interface/tun": tunnel, "vpp/ip6-nd/tun": {}})
    status = vpp.scheduler.get_value_status("vpp/ip6-nd/tun")
    assert status.state is ValueState.FAILED and "IP6_NOT_ENABLED" in str(status.error)
    assert vpp.control.state()["ip6_nd"]["links"] == {}  # the hold taken was released

"""arp.api (proxy ARP), l3xc.api, ip6_nd.api and IPv6 enabling in the emulator, as VPP 24.06
answers (src/vnet/arp, src/plugins/l3xc, src/vnet/ip6-nd, src/vnet/ip/ip6_link.c), through
vpp_papi."""

from __future__ import annotations

import ipaddress

import pytest

pytestmark = pytest.mark.process

ANY = 0xFFFFFFFF
NO_SUCH_FIB, NO_SUCH_ENTRY, INVALID_VALUE, INVALID_VALUE_2 = -3, -6, -7, -8
INVALID_SW_IF_INDEX, NO_MATCHING_INTERFACE, IP6_NOT_ENABLED, VALUE_EXIST = -2, -54, -62, -81


def proxy(table: int, low: str, high: str) -> dict:
    return {"table_id": table, "low": low, "hi": high}


def path(sw_if_index: int = ANY, hop: str = "0.0.0.0", weight: int = 1, table: int = 0) -> dict:
    is_ip6 = ":" in hop
    packed = ipaddress.ip_address(hop).packed
    return {"sw_if_index": sw_if_index, "table_id": table, "weight": weight, "preference": 0,
            "type": 0, "proto": int(is_ip6), "nh": {"address": {"ip6" if is_ip6 else "ip4":
                                                                packed}},
            "label_stack": [{}] * 16}


def xc(sw_if_index: int, *paths: dict, is_ip6: bool = False) -> dict:
    return {"sw_if_index": sw_if_index, "is_ip6": is_ip6, "n_paths": len(paths),
            "paths": list(paths)}


def test_proxy_arp_ranges_tables_and_fib_indices(papi):
    add = papi.api.proxy_arp_add_del
    assert add(is_add=True, proxy=proxy(7, "10.0.0.1", "10.0.0.9")).retval == NO_SUCH_FIB
    for table in (10, 20, 30):
        papi.api.ip_table_add_del(is_add=True, table={"table_id": table})
    assert add(is_add=True, proxy=proxy(20, "10.2.0.1", "10.2.0.9")).retval == 0
    assert add(is_add=True, proxy=proxy(20, "10.2.0.1", "10.2.0.9")).retval == 0  # no change
    assert add(is_add=True, proxy=proxy(0, "10.0.0.9", "10.0.0.1")).retval == 0  # reversed: VPP
    assert add(is_add=False, proxy=proxy(0, "10.0.0.1", "10.0.0.9")).retval == NO_SUCH_ENTRY
    # The dump shows FIB indices: table 20 is the second table created.
    assert [(d.proxy.table_id, str(d.proxy.low), str(d.proxy.hi))
            for d in papi.api.proxy_arp_dump()] == [(2, "10.2.0.1", "10.2.0.9"),
                                                    (0, "10.0.0.9", "10.0.0.1")]
    # A freed index is reused first (VPP's pools), and tables are dumped in index order.
    papi.api.ip_table_add_del(is_add=False, table={"table_id": 10})
    papi.api.ip_table_add_del(is_add=True, table={"table_id": 40})
    assert [d.table.table_id for d in papi.api.ip_table_dump() if not d.table.is_ip6] == \
        [0, 40, 20, 30]
    assert add(is_add=True, proxy=proxy(40, "10.4.0.1", "10.4.0.2")).retval == 0
    assert papi.api.proxy_arp_dump()[-1].proxy.table_id == 1
    assert add(is_add=False, proxy=proxy(20, "10.2.0.1", "10.2.0.9")).retval == 0
    assert len(papi.api.proxy_arp_dump()) == 2


def test_proxy_arp_interfaces(papi):
    enable = papi.api.proxy_arp_intfc_enable_disable
    assert enable(sw_if_index=9, enable=True).retval == INVALID_SW_IF_INDEX
    loop = papi.api.create_loopback().sw_if_index
    other = papi.api.create_loopback().sw_if_index
    assert enable(sw_if_index=loop, enable=True).retval == 0
    assert enable(sw_if_index=loop, enable=True).retval == 0
    assert enable(sw_if_index=other, enable=False).retval == 0  # never enabled: accepted
    assert [d.sw_if_index for d in papi.api.proxy_arp_intfc_dump()] == [loop]
    # VPP keeps the flag of a deleted interface: its index is still listed.
    papi.api.delete_loopback(sw_if_index=loop)
    assert [d.sw_if_index for d in papi.api.proxy_arp_intfc_dump()] == [loop]


def test_l3xc_update_replace_dump_and_refusals(papi):
    update, delete = papi.api.l3xc_update, papi.api.l3xc_del
    loop = papi.api.create_loopback().sw_if_index
    out = papi.api.create_loopback().sw_if_index
    assert update(l3xc=xc(99, path(out, "10.0.0.2"))).retval == INVALID_SW_IF_INDEX
    assert update(l3xc=xc(loop)).retval == INVALID_VALUE  # no paths
    assert update(l3xc=xc(loop, path(99, "10.0.0.2"))).retval == NO_MATCHING_INTERFACE
    assert update(l3xc=xc(loop, path(ANY, "10.0.0.2", table=5))).retval == NO_SUCH_FIB
    reply = update(l3xc=xc(loop, path(out, "10.0.0.2", weight=0)))
    assert (reply.retval, reply.stats_index) == (0, 0)
    assert papi.api.l3xc_dump(sw_if_index=loop)[0].l3xc.paths[0].weight == 1  # 0 is 1
    assert update(l3xc=xc(loop, path(out, "fd00::2"), is_ip6=True)).retval == 0
    # A second update replaces the paths.
    assert update(l3xc=xc(loop, path(out, "10.0.0.3", weight=3), path(ANY, "10.0.0.4"))
                  ).retval == 0
    details = papi.api.l3xc_dump(sw_if_index=ANY)
    assert [(d.l3xc.sw_if_index, d.l3xc.is_ip6, d.l3xc.n_paths) for d in details] == [
        (loop, False, 2), (loop, False, 1)]  # VPP never fills is_ip6
    paths = [(p.sw_if_index, str(p.nh.address.ip4), p.weight) for p in details[0].l3xc.paths]
    assert paths == [(out, "10.0.0.3", 3), (ANY, "10.0.0.4", 1)]
    assert int(details[1].l3xc.paths[0].proto) == 1  # the family is the paths'
    assert papi.api.l3xc_dump(sw_if_index=out) == []
    assert delete(sw_if_index=loop, is_ip6=True).retval == 0
    assert delete(sw_if_index=loop, is_ip6=True).retval == INVALID_VALUE
    assert delete(sw_if_index=99, is_ip6=False).retval == INVALID_SW_IF_INDEX
    assert papi.api.l3xc_plugin_get_version().major == 1


def test_ipv6_links_are_counted_holds(papi):
    enable = papi.api.sw_interface_ip6_enable_disable
    loop = papi.api.create_loopback().sw_if_index
    assert enable(sw_if_index=99, enable=True).retval == INVALID_SW_IF_INDEX
    assert enable(sw_if_index=loop, enable=False).retval == IP6_NOT_ENABLED
    assert papi.api.sw_interface_ip6nd_ra_dump(sw_if_index=loop) == []
    papi.api.sw_interface_add_del_address(sw_if_index=loop, is_add=True, prefix="fd00::1/64")
    (ra,) = papi.api.sw_interface_ip6nd_ra_dump(sw_if_index=loop)  # an address enabled it
    assert (ra.send_radv, ra.max_radv_interval, ra.min_radv_interval, ra.adv_router_lifetime,
            ra.initial_adverts_count, ra.adv_link_layer_address) == (
        False, 200.0, 150.0, 600, 3, True)
    assert enable(sw_if_index=loop, enable=True).retval == VALUE_EXIST  # and a hold taken
    papi.api.sw_interface_add_del_address(sw_if_index=loop, is_add=False, prefix="fd00::1/64")
    assert len(papi.api.sw_interface_ip6nd_ra_dump(sw_if_index=loop)) == 1  # still held
    assert enable(sw_if_index=loop, enable=False).retval == 0
    assert papi.api.sw_interface_ip6nd_ra_dump(sw_if_index=loop) == []
    # VPP's RA records are never freed: its walk of all meets a re-enabled interface twice.
    assert enable(sw_if_index=loop, enable=True).retval == 0
    assert [d.sw_if_index for d in papi.api.sw_interface_ip6nd_ra_dump(sw_if_index=ANY)] == [
        loop, loop]


def test_ra_config_limits_and_flags(papi):
    config = papi.api.sw_interface_ip6nd_ra_config
    loop = papi.api.create_loopback().sw_if_index
    assert config(sw_if_index=loop, managed=1).retval == IP6_NOT_ENABLED
    papi.api.sw_interface_ip6_enable_disable(sw_if_index=loop, enable=True)
    assert config(sw_if_index=loop, default_router=1, lifetime=100, max_interval=100
                  ).retval == INVALID_VALUE  # lifetime not above the max interval
    assert config(sw_if_index=loop, max_interval=100, min_interval=80).retval == INVALID_VALUE
    assert config(sw_if_index=loop, max_interval=100, min_interval=2).retval == INVALID_VALUE
    assert config(sw_if_index=loop, initial_count=4).retval == INVALID_VALUE
    assert config(sw_if_index=loop, initial_interval=17).retval == INVALID_VALUE
    assert config(sw_if_index=loop, managed=1, other=1, ll_option=1, max_interval=100,
                  default_router=1, lifetime=20000).retval == 0  # lifetime clamped to 9000
    (ra,) = papi.api.sw_interface_ip6nd_ra_dump(sw_if_index=loop)
    assert (ra.send_radv, ra.adv_managed_flag, ra.adv_other_flag, ra.adv_link_layer_address,
            ra.max_radv_interval, ra.min_radv_interval, ra.adv_router_lifetime) == (
        True, True, True, False, 100.0, 75.0, 9000)
    # Flags not given stay; given with is_no they return to VPP's defaults.
    assert config(sw_if_index=loop, suppress=1).retval == 0
    assert config(sw_if_index=loop, is_no=True, managed=1, ll_option=1, max_interval=1).retval \
        == 0
    (ra,) = papi.api.sw_interface_ip6nd_ra_dump(sw_if_index=loop)
    assert (ra.send_radv, ra.adv_managed_flag, ra.adv_other_flag, ra.adv_link_layer_address,
            ra.max_radv_interval, ra.min_radv_interval) == (True, False, True, True, 200.0, 75.0)


def test_ra_prefixes(papi):
    prefix = papi.api.sw_interface_ip6nd_ra_prefix
    loop = papi.api.create_loopback().sw_if_index
    assert prefix(sw_if_index=loop, prefix="2001:db8::/64").retval == IP6_NOT_ENABLED
    papi.api.sw_interface_ip6_enable_disable(sw_if_index=loop, enable=True)
    assert prefix(sw_if_index=loop, prefix="2001:db8::/64", use_default=True).retval == 0
    assert prefix(sw_if_index=loop, prefix="2001:db8::/48").retval == INVALID_VALUE_2
    assert prefix(sw_if_index=loop, prefix="2001:db8:1::/64", no_autoconfig=True,
                  no_advertise=True, val_lifetime=ANY, pref_lifetime=60).retval == 0
    (ra,) = papi.api.sw_interface_ip6nd_ra_dump(sw_if_index=loop)
    got = {str(p.prefix): (p.onlink_flag, p.autonomous_flag, p.val_lifetime, p.pref_lifetime,
                           p.no_advertise) for p in ra.prefixes}
    assert got == {"2001:db8::/64": (True, True, 2592000, 604800, False),
                   "2001:db8:1::/64": (True, False, ANY, ANY, True)}  # one infinite: both
    assert prefix(sw_if_index=loop, prefix="2001:db8::/48", is_no=True).retval == \
        INVALID_VALUE_2
    assert prefix(sw_if_index=loop, prefix="2001:db8::/64", is_no=True).retval == 0
    assert prefix(sw_if_index=loop, prefix="2001:db8::/64", is_no=True).retval == INVALID_VALUE


def test_ra_needs_an_ethernet_link(papi):
    tunnel = papi.api.ipip_add_tunnel(tunnel={
        "src": "10.0.0.1", "dst": "10.0.0.2", "instance": ANY}).sw_if_index
    assert papi.api.sw_interface_ip6_enable_disable(sw_if_index=tunnel, enable=True).retval == 0
    assert papi.api.sw_interface_ip6nd_ra_dump(sw_if_index=tunnel) == []
    assert papi.api.sw_interface_ip6nd_ra_config(sw_if_index=tunnel, managed=1).retval == \
        IP6_NOT_ENABLED

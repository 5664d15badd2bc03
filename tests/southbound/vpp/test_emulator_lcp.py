"""lcp.api in the emulator: a pair's host interface is a real Linux tap in its namespace."""

from __future__ import annotations

import pytest

from tests.netns import netns_available, temporary_netns

pytestmark = [pytest.mark.process, pytest.mark.netns,
              pytest.mark.skipif(not netns_available(), reason="needs root and iproute2")]

ANY = 0xFFFFFFFF
TAP, TUN = 0, 1
ADMIN_UP = 1  # interface_types.api IF_STATUS_API_FLAG_ADMIN_UP


def test_pair_makes_and_removes_a_real_host_tap(emulator, papi):
    with temporary_netns("lcp") as ns:
        loop = papi.api.create_loopback(mac_address="02:00:00:00:33:01").sw_if_index
        papi.api.hw_interface_set_mtu(sw_if_index=loop, mtu=1500)
        reply = papi.api.lcp_itf_pair_add_del_v2(is_add=True, sw_if_index=loop,
                                                 host_if_name="vpp-lo", host_if_type=TAP,
                                                 netns=ns.name)
        assert reply.retval == 0
        link = ns.link("vpp-lo")
        assert link is not None
        assert (link["address"], link["mtu"]) == ("02:00:00:00:33:01", 1500)
        # VPP keeps its end of the pair up (lcp_itf_pair_create: vnet_sw_interface_admin_up).
        (host,) = papi.api.sw_interface_dump(sw_if_index=reply.host_sw_if_index)
        assert host.flags & ADMIN_UP
        get, pairs = papi.api.lcp_itf_pair_get_v2(cursor=0, sw_if_index=ANY)
        assert get.retval == 0
        (pair,) = pairs
        assert (pair.phy_sw_if_index, pair.host_sw_if_index, pair.host_if_name, pair.netns,
                pair.vif_index) == (loop, reply.host_sw_if_index, "vpp-lo", ns.name,
                                    link["ifindex"])
        # VPP's refusals
        again = papi.api.lcp_itf_pair_add_del_v2(is_add=True, sw_if_index=loop,
                                                 host_if_name="vpp-lo2", netns=ns.name)
        assert again.retval == -81  # VALUE_EXIST
        other = papi.api.create_loopback().sw_if_index
        assert papi.api.lcp_itf_pair_add_del_v2(is_add=True, sw_if_index=other,
                                                host_if_name="a/b").retval == -73
        assert papi.api.lcp_itf_pair_add_del_v2(is_add=False, sw_if_index=other).retval == -2
        # Removing the pair removes the host tap and VPP's end of it.
        assert papi.api.lcp_itf_pair_add_del_v2(is_add=False, sw_if_index=loop).retval == 0
        assert ns.link("vpp-lo") is None
        assert papi.api.sw_interface_dump(sw_if_index=reply.host_sw_if_index) == []


def test_a_phy_deleted_or_a_vpp_restart_takes_the_host_tap_away(emulator, papi):
    with temporary_netns("lcp") as ns:
        loop = papi.api.create_loopback().sw_if_index
        assert papi.api.lcp_itf_pair_add_del_v2(is_add=True, sw_if_index=loop,
                                                host_if_name="vpp-a",
                                                netns=ns.name).retval == 0
        papi.api.delete_loopback(sw_if_index=loop)
        assert ns.link("vpp-a") is None
        loop = papi.api.create_loopback().sw_if_index
        assert papi.api.lcp_itf_pair_add_del_v2(is_add=True, sw_if_index=loop,
                                                host_if_name="vpp-b",
                                                netns=ns.name).retval == 0
        assert ns.link("vpp-b") is not None
        emulator.control.restart()
        assert ns.link("vpp-b") is None


def test_a_host_name_taken_in_the_namespace_is_refused_and_left_alone(papi):
    with temporary_netns("lcp") as ns:
        ns.ip("link", "add", "theirs", "type", "veth", "peer", "name", "theirs-p")
        loop = papi.api.create_loopback().sw_if_index
        reply = papi.api.lcp_itf_pair_add_del_v2(is_add=True, sw_if_index=loop,
                                                 host_if_name="theirs", netns=ns.name)
        assert reply.retval == -11  # SYSCALL_ERROR_1
        assert ns.link("theirs") is not None  # never deleted: not the emulator's
        _get, pairs = papi.api.lcp_itf_pair_get_v2(cursor=0, sw_if_index=ANY)
        assert pairs == []



ONE_TAG, TWO_TAGS, EXACT_MATCH = 2, 4, 16  # if_types.api sub_if_flags


def kernel_makes_vlans() -> bool:
    """Can this kernel make 802.1Q links (the 8021q module)? Not every test host's can."""
    with temporary_netns("vlan") as ns:
        ns.ip("tuntap", "add", "dev", "v0", "mode", "tap")
        return not ns.ip("link", "add", "link", "v0", "name", "v0.1", "type", "vlan", "id", "1",
                         check=False) and ns.link("v0.1") is not None


class SubInterfaces:
    """A loopback with a pair, and sub-interfaces of it: VLAN 10, VLAN 30 without exact match,
    and QinQ 10/20."""

    def __init__(self, papi, ns) -> None:
        self.papi, self.ns = papi, ns
        self.phy = papi.api.create_loopback(mac_address="02:00:00:00:34:01").sw_if_index
        self.vlan10 = papi.api.create_vlan_subif(sw_if_index=self.phy, vlan_id=10).sw_if_index
        self.inexact = papi.api.create_subif(sw_if_index=self.phy, sub_id=30, outer_vlan_id=30,
                                             sub_if_flags=ONE_TAG).sw_if_index
        self.qinq = papi.api.create_subif(sw_if_index=self.phy, sub_id=1020, outer_vlan_id=10,
                                          inner_vlan_id=20,
                                          sub_if_flags=TWO_TAGS | EXACT_MATCH).sw_if_index

    def pair(self, sw_if_index: int, name: str):
        return self.papi.api.lcp_itf_pair_add_del_v2(is_add=True, sw_if_index=sw_if_index,
                                                     host_if_name=name, netns=self.ns.name)


def test_a_sub_interface_pair_needs_its_parents_pair_and_exact_match(papi):
    """lcp_itf_pair_create for a sub-interface makes no tap of its own: refused without the
    parent's pair (INVALID_SW_IF_INDEX), without exact match or without the outer tag's pair
    (INVALID_ARGUMENT), and nothing is left in Linux."""
    with temporary_netns("lcp") as ns:
        subs = SubInterfaces(papi, ns)
        assert subs.pair(subs.vlan10, "lp.10").retval == -2  # the parent has no pair
        assert subs.pair(subs.phy, "lp").retval == 0
        assert subs.pair(subs.qinq, "lp.10.20").retval == -73  # no pair for the outer tag
        assert subs.pair(subs.inexact, "lp.30").retval == -73  # no exact match
        assert ns.link_names() & {"lp.10", "lp.10.20", "lp.30"} == set()
        _get, pairs = papi.api.lcp_itf_pair_get_v2(cursor=0, sw_if_index=ANY)
        assert [p.phy_sw_if_index for p in pairs] == [subs.phy]


def test_a_sub_interface_pair_is_a_vlan_on_its_parents_host_end(papi):
    """Its Linux end is a VLAN on the parent pair's Linux end (an inner tag's on the outer
    tag's pair's), its VPP end a sub-interface of the parent pair's tap; both go with the pair,
    and all of it with the phy."""
    if not kernel_makes_vlans():
        pytest.skip("this kernel makes no VLAN links (8021q)")
    with temporary_netns("lcp") as ns:
        subs = SubInterfaces(papi, ns)
        parent = subs.pair(subs.phy, "lp")
        made = subs.pair(subs.vlan10, "lp.10")
        assert made.retval == 0
        link = ns.link("lp.10")
        assert link is not None and link["link"] == "lp"
        assert (link["linkinfo"]["info_kind"], link["linkinfo"]["info_data"]["protocol"],
                link["linkinfo"]["info_data"]["id"]) == ("vlan", "802.1Q", 10)
        (host,) = papi.api.sw_interface_dump(sw_if_index=made.host_sw_if_index)
        assert (host.sup_sw_if_index, host.sub_id, host.sub_outer_vlan_id) == (
            parent.host_sw_if_index, 10, 10)
        assert host.flags & ADMIN_UP
        inner = subs.pair(subs.qinq, "lp.10.20")
        assert inner.retval == 0
        link = ns.link("lp.10.20")
        assert link is not None and link["link"] == "lp.10"
        assert link["linkinfo"]["info_data"]["id"] == 20
        vlan = ns.link("lp.10")
        assert vlan is not None
        _get, pairs = papi.api.lcp_itf_pair_get_v2(cursor=0, sw_if_index=subs.vlan10)
        assert [(p.host_if_name, p.vif_index) for p in pairs] == [("lp.10", vlan["ifindex"])]

        # Removing a sub-interface's pair removes its VLAN and VPP's end, nothing else.
        assert papi.api.lcp_itf_pair_add_del_v2(is_add=False, sw_if_index=subs.qinq).retval == 0
        assert ns.link("lp.10.20") is None and ns.link("lp.10") is not None
        assert papi.api.sw_interface_dump(sw_if_index=inner.host_sw_if_index) == []
        # The phy deleted takes its sub-interfaces' pairs and its own.
        papi.api.delete_loopback(sw_if_index=subs.phy)
        assert ns.link_names() & {"lp", "lp.10"} == set()
        _get, pairs = papi.api.lcp_itf_pair_get_v2(cursor=0, sw_if_index=ANY)
        assert pairs == []
        assert papi.api.sw_interface_dump(sw_if_index=made.host_sw_if_index) == []

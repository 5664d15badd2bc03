"""lcp.api in the emulator: a pair's host interface is a real Linux tap in its namespace."""

from __future__ import annotations

import pytest

from tests.netns import netns_available, temporary_netns

pytestmark = [pytest.mark.process, pytest.mark.netns,
              pytest.mark.skipif(not netns_available(), reason="needs root and iproute2")]

ANY = 0xFFFFFFFF
TAP, TUN = 0, 1


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

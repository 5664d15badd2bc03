"""What a client reads back equals what it wrote, with VPP 24.06's strings and defaults.

Found by a third-party VPP tool pointed at the emulator: an af_packet interface's device class
was `af_packet` (VPP's is `af-packet`, so the tool skipped it), a tap's host MAC read back as
zeros (so the tool re-created the tap forever), `sw_interface_set_mtu` and
`l2_interface_vlan_tag_rewrite` were not served, and new interfaces had MTU 9216 (VPP's ethernet
default is ethernet_main.default_mtu, 9000).
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.process

ANY = 0xFFFFFFFF


def details(papi, sw_if_index):
    (d,) = papi.api.sw_interface_dump(sw_if_index=sw_if_index)
    return d


def test_af_packet_device_class_is_vpps(papi):
    # The emulator's own namespace has `lo`: VPP opens host interfaces by name.
    idx = papi.api.af_packet_create_v3(host_if_name="lo", use_random_hw_addr=True).sw_if_index
    assert details(papi, idx).interface_dev_type == "af-packet"


def test_new_ethernet_interfaces_get_vpps_default_mtu(papi):
    loop = papi.api.create_loopback().sw_if_index
    tap = papi.api.tap_create_v3(id=ANY, use_random_mac=True).sw_if_index
    afp = papi.api.af_packet_create_v3(host_if_name="lo", use_random_hw_addr=True).sw_if_index
    for idx in (loop, tap, afp):
        d = details(papi, idx)
        assert (d.link_mtu, list(d.mtu)) == (9000, [9000, 0, 0, 0]), d.interface_name


def test_tap_reads_back_what_was_written(papi):
    idx = papi.api.tap_create_v3(
        id=7, use_random_mac=False, mac_address="02:00:00:00:07:01",
        host_mac_addr_set=True, host_mac_addr="02:00:00:00:07:02",
        host_mtu_set=True, host_mtu_size=1400, rx_ring_sz=512, tx_ring_sz=1024,
        host_if_name_set=True, host_if_name="kvt-tap7", tag="t7",
    ).sw_if_index
    (tap,) = papi.api.sw_interface_tap_v2_dump(sw_if_index=idx)
    assert (str(tap.host_mac_addr), tap.host_mtu_size, tap.rx_ring_sz, tap.tx_ring_sz,
            tap.host_if_name, tap.id) == ("02:00:00:00:07:02", 1400, 512, 1024, "kvt-tap7", 7)
    d = details(papi, idx)
    assert (str(d.l2_address), d.tag, d.interface_dev_type) == ("02:00:00:00:07:01", "t7",
                                                                "virtio")


def test_tap_without_host_mac_gets_a_generated_one_and_no_host_mtu(papi):
    idx = papi.api.tap_create_v3(id=ANY, use_random_mac=True).sw_if_index
    (tap,) = papi.api.sw_interface_tap_v2_dump(sw_if_index=idx)
    assert str(tap.host_mac_addr) != "00:00:00:00:00:00"
    assert tap.host_mtu_size == 0


def test_hw_mtu_sets_the_l3_mtu_of_the_interface_and_its_sub_interfaces(papi):
    loop = papi.api.create_loopback().sw_if_index
    sub = papi.api.create_vlan_subif(sw_if_index=loop, vlan_id=10).sw_if_index
    assert list(details(papi, sub).mtu) == [0, 0, 0, 0]  # VPP's zeroed sub-interface template
    assert papi.api.hw_interface_set_mtu(sw_if_index=loop, mtu=1500).retval == 0
    assert (details(papi, loop).link_mtu, details(papi, loop).mtu[0]) == (1500, 1500)
    assert (details(papi, sub).link_mtu, details(papi, sub).mtu[0]) == (1500, 1500)
    # A sub-interface has no hardware MTU.
    assert papi.api.hw_interface_set_mtu(sw_if_index=sub, mtu=1400).retval == -7


def test_per_protocol_mtu_reads_back(papi):
    loop = papi.api.create_loopback().sw_if_index
    sub = papi.api.create_vlan_subif(sw_if_index=loop, vlan_id=20).sw_if_index
    assert papi.api.sw_interface_set_mtu(sw_if_index=sub, mtu=[1400, 1300, 1280, 0]).retval == 0
    assert list(details(papi, sub).mtu) == [1400, 1300, 1280, 0]
    assert list(details(papi, loop).mtu) == [9000, 0, 0, 0]
    assert papi.api.sw_interface_set_mtu(sw_if_index=99, mtu=[1500, 0, 0, 0]).retval == -2


def test_vlan_tag_rewrite_reads_back_and_is_refused_as_vpp_refuses(papi):
    loop = papi.api.create_loopback().sw_if_index
    sub = papi.api.create_vlan_subif(sw_if_index=loop, vlan_id=30).sw_if_index
    reply = papi.api.l2_interface_vlan_tag_rewrite(sw_if_index=sub, vtr_op=3, push_dot1q=1)
    assert reply.retval == 0  # pop 1 on a one-tag sub-interface
    d = details(papi, sub)
    assert (d.vtr_op, d.vtr_push_dot1q) == (3, 1)
    # Pop 2: it matches one tag only; a hardware interface has no tag to pop.
    assert papi.api.l2_interface_vlan_tag_rewrite(sw_if_index=sub, vtr_op=4).retval == -72
    assert papi.api.l2_interface_vlan_tag_rewrite(sw_if_index=loop, vtr_op=3).retval == -72
    assert papi.api.l2_interface_vlan_tag_rewrite(sw_if_index=sub, vtr_op=9).retval == -7
    assert papi.api.l2_interface_vlan_tag_rewrite(sw_if_index=sub, vtr_op=0).retval == 0
    assert details(papi, sub).vtr_op == 0


def test_the_same_tags_under_another_sub_id_are_refused(papi):
    loop = papi.api.create_loopback().sw_if_index
    one_tag_exact = 2 | 16
    first = papi.api.create_subif(sw_if_index=loop, sub_id=1, sub_if_flags=one_tag_exact,
                                  outer_vlan_id=40)
    assert first.retval == 0
    # ethernet_sw_interface_add_del: "vlan is already in use" -> UNSPECIFIED (-1)
    assert papi.api.create_subif(sw_if_index=loop, sub_id=2, sub_if_flags=one_tag_exact,
                                 outer_vlan_id=40).retval == -1
    assert papi.api.create_subif(sw_if_index=loop, sub_id=1, sub_if_flags=one_tag_exact,
                                 outer_vlan_id=41).retval == -56  # the sub id: VLAN_ALREADY_EXISTS

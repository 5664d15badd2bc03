"""The emulator's issue-19 messages through the real vpp_papi client: neighbors, VRF tables,
sub-interfaces, L2 cross-connects, static L2 FIB entries, VXLAN and memif, with VPP's refusals
(retvals of src/vnet/error.h) and a restart that loses all of it."""

from __future__ import annotations

from tests.southbound.vpp.conftest import connect
from tests.util import wait_until

ANY = 0xFFFFFFFF
INVALID_SW_IF_INDEX = -2
NO_SUCH_FIB = -3
NO_SUCH_ENTRY = -6
INVALID_SW_IF_INDEX_2 = -10
INVALID_VLAN = -55
VLAN_ALREADY_EXISTS = -56
SUBIF_ALREADY_EXISTS = -68
INVALID_ARGUMENT = -73
UNEXPECTED_INTF_STATE = -74
TUNNEL_EXIST = -75
SAME_SRC_DST = -82
INVALID_SUB_SW_IF_INDEX = -98
ENTRY_ALREADY_EXISTS = -116
SUB_ONE_TAG, SUB_TWO_TAGS, SUB_EXACT_MATCH = 2, 4, 16


def loopback(papi) -> int:
    return int(papi.api.create_loopback().sw_if_index)


def neighbor(sw_if_index, ip, mac="02:00:00:00:00:aa", flags=1):
    return {"sw_if_index": sw_if_index, "flags": flags, "mac_address": mac, "ip_address": ip}


def test_ip_tables_add_dump_delete_with_names(papi):
    assert papi.api.ip_table_add_del(is_add=True, table={"table_id": 10, "name": "red"}).retval == 0
    assert papi.api.ip_table_add_del(
        is_add=True, table={"table_id": 10, "is_ip6": True, "name": "red6"}).retval == 0
    tables = {(d.table.table_id, d.table.is_ip6): d.table.name for d in papi.api.ip_table_dump()}
    assert tables == {(0, False): "ipv4-VRF:0", (0, True): "ipv6-VRF:0", (10, False): "red",
                      (10, True): "red6"}
    # Adding again is accepted, deleting twice too (VPP holds one API lock per table).
    assert papi.api.ip_table_add_del(is_add=True, table={"table_id": 10, "name": "red"}).retval == 0
    for _ in range(2):
        assert papi.api.ip_table_add_del(is_add=False, table={"table_id": 10}).retval == 0
    assert (10, False) not in {(d.table.table_id, d.table.is_ip6) for d in papi.api.ip_table_dump()}


def test_neighbors_add_update_dump_delete_and_refusals(papi):
    idx = loopback(papi)
    add = papi.api.ip_neighbor_add_del
    assert add(is_add=True, neighbor=neighbor(idx, "10.0.0.2")).retval == 0
    assert add(is_add=True, neighbor=neighbor(idx, "fd00::2", "02:00:00:00:00:bb", 3)).retval == 0
    # an update of the MAC in place
    assert add(is_add=True, neighbor=neighbor(idx, "10.0.0.2", "02:00:00:00:00:cc")).retval == 0
    v4 = papi.api.ip_neighbor_dump(sw_if_index=ANY, af=0)
    assert [(str(d.neighbor.ip_address), str(d.neighbor.mac_address), int(d.neighbor.flags))
            for d in v4] == [("10.0.0.2", "02:00:00:00:00:cc", 1)]
    v6 = papi.api.ip_neighbor_dump(sw_if_index=idx, af=1)
    assert [(str(d.neighbor.ip_address), int(d.neighbor.flags)) for d in v6] == [("fd00::2", 3)]
    # a dynamic entry never overwrites a static one with another MAC (VPP answers -2)
    assert add(is_add=True, neighbor=neighbor(idx, "10.0.0.2", flags=0)).retval == -2
    assert add(is_add=True, neighbor=neighbor(99, "10.0.0.3")).retval == INVALID_SW_IF_INDEX
    assert add(is_add=False, neighbor=neighbor(idx, "10.0.0.2")).retval == 0
    assert add(is_add=False, neighbor=neighbor(idx, "10.0.0.2")).retval == NO_SUCH_ENTRY
    # deleting the interface takes its neighbors with it
    papi.api.delete_loopback(sw_if_index=idx)
    assert papi.api.ip_neighbor_dump(sw_if_index=ANY, af=1) == []


def test_sub_interfaces_vlan_and_qinq_with_details(papi):
    parent = loopback(papi)
    vlan = papi.api.create_vlan_subif(sw_if_index=parent, vlan_id=10)
    assert vlan.retval == 0
    qinq = papi.api.create_subif(sw_if_index=parent, sub_id=20, outer_vlan_id=100,
                                 inner_vlan_id=200, sub_if_flags=SUB_TWO_TAGS | SUB_EXACT_MATCH)
    assert qinq.retval == 0
    details = {d.sw_if_index: d for d in papi.api.sw_interface_dump(sw_if_index=ANY)}
    v, q = details[vlan.sw_if_index], details[qinq.sw_if_index]
    assert (v.interface_name, v.sup_sw_if_index, int(v.type)) == ("loop0.10", parent, 1)
    assert (v.sub_id, v.sub_number_of_tags, v.sub_outer_vlan_id, v.sub_inner_vlan_id) == \
        (10, 1, 10, 0)
    assert int(v.sub_if_flags) == SUB_ONE_TAG | SUB_EXACT_MATCH
    assert (q.interface_name, q.sub_id, q.sub_number_of_tags, q.sub_outer_vlan_id,
            q.sub_inner_vlan_id) == ("loop0.20", 20, 2, 100, 200)
    assert details[parent].sup_sw_if_index == parent and int(details[parent].type) == 0
    # link follows the sub-interface's admin state and the parent's carrier
    papi.api.sw_interface_set_flags(sw_if_index=vlan.sw_if_index, flags=1)
    assert int(papi.api.sw_interface_dump(sw_if_index=vlan.sw_if_index)[0].flags) == 1
    papi.api.sw_interface_set_flags(sw_if_index=parent, flags=1)
    assert int(papi.api.sw_interface_dump(sw_if_index=vlan.sw_if_index)[0].flags) == 3


def test_sub_interface_refusals(papi):
    parent = loopback(papi)
    sub = papi.api.create_vlan_subif(sw_if_index=parent, vlan_id=10).sw_if_index
    assert papi.api.create_vlan_subif(sw_if_index=parent, vlan_id=10).retval == \
        VLAN_ALREADY_EXISTS
    assert papi.api.create_subif(sw_if_index=parent, sub_id=10, outer_vlan_id=11,
                                 sub_if_flags=SUB_ONE_TAG).retval == VLAN_ALREADY_EXISTS
    assert papi.api.create_vlan_subif(sw_if_index=parent, vlan_id=0).retval == INVALID_VLAN
    assert papi.api.create_vlan_subif(sw_if_index=parent, vlan_id=4096).retval == INVALID_VLAN
    assert papi.api.create_vlan_subif(sw_if_index=77, vlan_id=5).retval == INVALID_SW_IF_INDEX
    assert papi.api.delete_subif(sw_if_index=parent).retval == INVALID_SUB_SW_IF_INDEX
    assert papi.api.delete_subif(sw_if_index=77).retval == INVALID_SW_IF_INDEX
    assert papi.api.delete_subif(sw_if_index=sub).retval == 0
    assert papi.api.delete_subif(sw_if_index=sub).retval == INVALID_SW_IF_INDEX


def test_deleting_a_parent_deletes_its_sub_interfaces_as_vpp_does(papi):
    parent = loopback(papi)
    sub = papi.api.create_vlan_subif(sw_if_index=parent, vlan_id=10).sw_if_index
    assert papi.api.delete_loopback(sw_if_index=parent).retval == 0
    assert {d.sw_if_index for d in papi.api.sw_interface_dump(sw_if_index=ANY)} == {0}
    assert papi.api.delete_subif(sw_if_index=sub).retval == INVALID_SW_IF_INDEX


def test_l2_xconnect_set_dump_and_one_l2_mode_at_a_time(papi):
    a, b = loopback(papi), loopback(papi)
    x = papi.api.sw_interface_set_l2_xconnect
    assert x(rx_sw_if_index=a, tx_sw_if_index=b, enable=True).retval == 0
    assert x(rx_sw_if_index=b, tx_sw_if_index=a, enable=True).retval == 0
    assert [(d.rx_sw_if_index, d.tx_sw_if_index) for d in papi.api.l2_xconnect_dump()] == \
        [(a, b), (b, a)]
    assert x(rx_sw_if_index=99, tx_sw_if_index=a, enable=True).retval == INVALID_SW_IF_INDEX
    assert x(rx_sw_if_index=a, tx_sw_if_index=99, enable=True).retval == INVALID_SW_IF_INDEX_2
    # bridging b ends its cross-connect (VPP changes the interface's L2 mode)
    papi.api.sw_interface_set_l2_bridge(rx_sw_if_index=b, bd_id=5, enable=True)
    assert [(d.rx_sw_if_index, d.tx_sw_if_index) for d in papi.api.l2_xconnect_dump()] == [(a, b)]
    assert x(rx_sw_if_index=a, tx_sw_if_index=0, enable=False).retval == 0
    assert papi.api.l2_xconnect_dump() == []


def test_l2fib_static_entries_and_refusals(papi):
    member, outsider = loopback(papi), loopback(papi)
    papi.api.bridge_domain_add_del_v2(bd_id=5, is_add=True, learn=True, forward=True)
    papi.api.sw_interface_set_l2_bridge(rx_sw_if_index=member, bd_id=5, enable=True)
    fib = papi.api.l2fib_add_del
    mac = "02:00:00:00:01:01"
    assert fib(mac=mac, bd_id=5, sw_if_index=member, is_add=True, static_mac=True).retval == 0
    assert fib(mac=mac, bd_id=6, sw_if_index=member, is_add=True).retval == NO_SUCH_ENTRY
    assert fib(mac=mac, bd_id=5, sw_if_index=outsider, is_add=True).retval == INVALID_SW_IF_INDEX
    assert fib(mac=mac, bd_id=5, sw_if_index=88, is_add=True).retval == INVALID_SW_IF_INDEX
    entries = papi.api.l2_fib_table_dump(bd_id=ANY)
    assert [(d.bd_id, str(d.mac), d.sw_if_index, d.static_mac, d.bvi_mac) for d in entries] == \
        [(5, mac, member, True, False)]
    assert papi.api.l2_fib_table_dump(bd_id=7) == []
    assert fib(mac=mac, bd_id=5, sw_if_index=member, is_add=False).retval == 0
    assert fib(mac=mac, bd_id=5, sw_if_index=member, is_add=False).retval == NO_SUCH_ENTRY


def vxlan(src="192.168.1.1", dst="192.168.1.2", vni=100, vrf=0, is_add=True):
    return {"is_add": is_add, "instance": ANY, "src_address": src, "dst_address": dst,
            "vni": vni, "encap_vrf_id": vrf, "mcast_sw_if_index": ANY, "decap_next_index": ANY}


def test_vxlan_tunnels_create_dump_delete_and_refusals(papi):
    made = papi.api.vxlan_add_del_tunnel_v3(**vxlan())
    assert made.retval == 0
    tunnels = papi.api.vxlan_tunnel_v2_dump(sw_if_index=ANY)
    assert [(t.sw_if_index, str(t.src_address), str(t.dst_address), t.vni, t.encap_vrf_id,
             t.dst_port) for t in tunnels] == \
        [(made.sw_if_index, "192.168.1.1", "192.168.1.2", 100, 0, 4789)]
    name = papi.api.sw_interface_dump(sw_if_index=made.sw_if_index)[0].interface_name
    assert name == "vxlan_tunnel0"
    assert papi.api.vxlan_add_del_tunnel_v3(**vxlan()).retval == TUNNEL_EXIST
    assert papi.api.vxlan_add_del_tunnel_v3(**vxlan(vrf=9)).retval == NO_SUCH_FIB
    assert papi.api.vxlan_add_del_tunnel_v3(**vxlan(dst="192.168.1.1")).retval == SAME_SRC_DST
    assert papi.api.vxlan_add_del_tunnel_v3(**vxlan(vni=5, is_add=False)).retval == NO_SUCH_ENTRY
    assert papi.api.vxlan_add_del_tunnel_v3(**vxlan(is_add=False)).retval == 0
    assert papi.api.vxlan_tunnel_v2_dump(sw_if_index=ANY) == []


def test_memif_sockets_interfaces_and_refusals(papi):
    sock = papi.api.memif_socket_filename_add_del_v2
    added = sock(is_add=True, socket_id=ANY, socket_filename="/run/kvm/a.sock")
    assert (added.retval, added.socket_id) == (0, 1)
    assert sock(is_add=True, socket_id=1, socket_filename="/run/kvm/a.sock").retval == 0
    assert sock(is_add=True, socket_id=1, socket_filename="/run/kvm/b.sock").retval == \
        ENTRY_ALREADY_EXISTS
    assert sock(is_add=False, socket_id=0).retval == INVALID_ARGUMENT
    assert sorted((d.socket_id, d.socket_filename) for d in papi.api.memif_socket_filename_dump()) \
        == [(0, "/run/vpp/memif.sock"), (1, "/run/kvm/a.sock")]
    create = papi.api.memif_create_v2
    m = create(role=0, mode=0, id=7, socket_id=1, ring_size=0, buffer_size=0)
    assert m.retval == 0
    assert create(role=0, mode=0, id=7, socket_id=1).retval == SUBIF_ALREADY_EXISTS
    assert create(role=1, mode=0, id=8, socket_id=1).retval == SUBIF_ALREADY_EXISTS
    assert create(role=0, mode=0, id=8, socket_id=5).retval == INVALID_ARGUMENT
    details = papi.api.memif_dump()
    assert [(d.sw_if_index, d.id, int(d.role), d.socket_id, d.ring_size, d.if_name)
            for d in details] == [(m.sw_if_index, 7, 0, 1, 1024, "memif1/7")]
    assert sock(is_add=False, socket_id=1).retval == UNEXPECTED_INTF_STATE
    assert papi.api.memif_delete(sw_if_index=0).retval == INVALID_SW_IF_INDEX
    assert papi.api.memif_delete(sw_if_index=m.sw_if_index).retval == 0
    assert sock(is_add=False, socket_id=1).retval == 0
    assert sock(is_add=False, socket_id=1).retval == INVALID_ARGUMENT


def test_restart_loses_the_new_state_and_counts_messages(emulator, papi):
    before = emulator.control.counters()
    idx = loopback(papi)
    papi.api.create_vlan_subif(sw_if_index=idx, vlan_id=3)
    papi.api.ip_neighbor_add_del(is_add=True, neighbor=neighbor(idx, "10.0.0.2"))
    papi.api.memif_socket_filename_add_del_v2(is_add=True, socket_id=ANY,
                                              socket_filename="/run/kvm/a.sock")
    papi.api.vxlan_add_del_tunnel_v3(**vxlan())
    after = emulator.control.counters()
    for message in ("create_vlan_subif", "ip_neighbor_add_del", "vxlan_add_del_tunnel_v3"):
        assert after[f"msg.{message}"] - before.get(f"msg.{message}", 0) == 1
    papi.disconnect()
    emulator.control.restart()
    fresh = connect(emulator.socket_path)
    try:
        wait_until(lambda: fresh.transport.connected, timeout=5)
        assert fresh.api.ip_neighbor_dump(sw_if_index=ANY, af=0) == []
        assert fresh.api.vxlan_tunnel_v2_dump(sw_if_index=ANY) == []
        assert [d.socket_id for d in fresh.api.memif_socket_filename_dump()] == [0]
        assert len(fresh.api.sw_interface_dump(sw_if_index=ANY)) == 1
    finally:
        fresh.disconnect()

"""The emulated dataplane on its own (no sockets): VPP's rules and return values."""

from __future__ import annotations

import ipaddress

import pytest

from kvmesh.vppemu import errors as E
from kvmesh.vppemu.errors import ApiError
from kvmesh.vppemu.state import ADMIN_UP, Dataplane, InterfaceEvent, Path


def retval_of(fn, *args):
    with pytest.raises(ApiError) as info:
        fn(*args)
    return info.value.retval


def test_local0_exists_and_loopbacks_get_lowest_free_instance():
    dp = Dataplane()
    assert dp.interfaces[0].name == "local0"
    a = dp.create_loopback(bytes(6))
    b = dp.create_loopback(bytes(6))
    assert [dp.interfaces[i].name for i in (a, b)] == ["loop0", "loop1"]
    dp.delete_loopback(a)
    c = dp.create_loopback(bytes(6))
    assert dp.interfaces[c].name == "loop0"
    assert c not in (a, b)  # sw_if_index values are never reused
    assert dp.interfaces[c].mac == bytes([0xDE, 0xAD, 0, 0, 0, 0])
    assert retval_of(dp.create_loopback, bytes(6), 1) == E.INSTANCE_IN_USE
    assert retval_of(dp.delete_loopback, 0) == E.INVALID_SW_IF_INDEX


def test_address_conflicts_follow_vpp():
    dp = Dataplane()
    a = dp.create_loopback(bytes(6))
    b = dp.create_loopback(bytes(6))
    addr = ipaddress.ip_interface("10.0.0.1/24")
    dp.add_del_address(a, addr, True, False)
    # a second address of the same subnet on the same interface is fine
    dp.add_del_address(a, ipaddress.ip_interface("10.0.0.2/24"), True, False)
    assert retval_of(dp.add_del_address, a, addr, True, False) == E.ADDRESS_IN_USE
    assert retval_of(dp.add_del_address, b, addr, True, False) == E.ADDRESS_IN_USE
    dp.add_del_table(False, 7, "", True)
    dp.set_table(b, False, 7)
    assert retval_of(dp.add_del_address, b, addr, True, False) == E.DUPLICATE_IF_ADDRESS
    missing = ipaddress.ip_interface("10.9.9.9/24")
    assert retval_of(dp.add_del_address, a, missing, False, False) == (
        E.ADDRESS_NOT_FOUND_FOR_INTERFACE
    )
    assert retval_of(dp.set_table, a, False, 7) == E.ADDRESS_FOUND_FOR_INTERFACE
    assert retval_of(dp.set_table, a, False, 8) == E.NO_SUCH_FIB


def test_interface_delete_cleans_references_and_emits_event():
    dp = Dataplane()
    a = dp.create_loopback(bytes(6))
    b = dp.create_loopback(bytes(6))
    dp.set_flags(a, ADMIN_UP)
    dp.set_unnumbered(a, b, True)
    dp.set_l2_bridge(a, 5, 1, 0, True)
    dp.add_del_route(True, True, 0, ipaddress.ip_network("10.1.0.0/16"), [Path(a, None)])
    dp.pop_events()
    dp.delete_loopback(a)
    assert dp.interfaces[b].unnumbered_from is None
    assert dp.bridge_domains[5].members == {} and dp.bridge_domains[5].bvi is None
    assert dp.routes == {}
    assert dp.pop_events() == [InterfaceEvent(a, 0, True)]


def test_multipath_routes_add_and_remove_paths_one_by_one():
    dp = Dataplane()
    a = dp.create_loopback(bytes(6))
    net = ipaddress.ip_network("10.1.0.0/16")
    p1 = Path(a, ipaddress.ip_address("10.0.0.2"))
    p2 = Path(a, ipaddress.ip_address("10.0.0.3"), weight=5)
    dp.add_del_route(True, True, 0, net, [p1])
    dp.add_del_route(True, True, 0, net, [p2])
    assert dp.routes[(False, 0, net)] == [p1, p2]
    dp.add_del_route(False, True, 0, net, [p1])
    assert dp.routes[(False, 0, net)] == [p2]
    dp.add_del_route(False, True, 0, net, [p2])
    assert (False, 0, net) not in dp.routes
    # deleting what is not there is accepted, like VPP
    dp.add_del_route(False, True, 0, net, [p2])
    assert retval_of(dp.add_del_route, True, True, 3, net, [p1]) == E.NO_SUCH_FIB
    assert retval_of(dp.add_del_route, True, True, 0, net, []) == E.NO_PATHS_IN_ROUTE


def test_bridge_domain_rules():
    dp = Dataplane()
    a = dp.create_loopback(bytes(6))
    b = dp.create_loopback(bytes(6))
    assert dp.bd_add_del(0xFFFFFFFF, 0, 0, "", True) == 1  # allocated id
    assert retval_of(dp.bd_add_del, 1, 0, 0, "", True) == E.BD_ALREADY_EXISTS
    assert retval_of(dp.bd_add_del, 0, 0, 0, "", True) == E.BD_NOT_MODIFIABLE
    assert retval_of(dp.bd_add_del, 1 << 24, 0, 0, "", True) == E.BD_ID_EXCEED_MAX
    dp.set_l2_bridge(a, 1, 1, 0, True)
    assert retval_of(dp.set_l2_bridge, b, 1, 1, 0, True) == E.BD_ALREADY_HAS_BVI
    assert retval_of(dp.bd_add_del, 1, 0, 0, "", False) == E.BD_IN_USE
    dp.set_l2_bridge(a, 1, 0, 0, False)
    dp.bd_add_del(1, 0, 0, "", False)
    assert retval_of(dp.bd_add_del, 1, 0, 0, "", False) == E.NO_SUCH_ENTRY


def test_af_packet_needs_the_host_interface():
    hosts = {"veth0"}
    dp = Dataplane(host_if_exists=lambda name: name in hosts)
    assert retval_of(dp.create_af_packet, "veth1", None) == E.INVALID_INTERFACE
    idx = dp.create_af_packet("veth0", None)
    assert dp.interfaces[idx].name == "host-veth0"
    assert retval_of(dp.create_af_packet, "veth0", None) == E.IF_ALREADY_EXISTS
    dp.delete_af_packet("veth0")
    assert retval_of(dp.delete_af_packet, "veth0") == E.SYSCALL_ERROR_1


def test_address_overlap_in_both_directions_and_after_removal():
    dp = Dataplane()
    a = dp.create_loopback(bytes(6))
    b = dp.create_loopback(bytes(6))
    wide = ipaddress.ip_interface("10.0.0.1/16")
    dp.add_del_address(a, wide, True, False)
    inside = ipaddress.ip_interface("10.0.5.1/24")
    around = ipaddress.ip_interface("10.9.9.9/8")
    assert retval_of(dp.add_del_address, b, inside, True, False) == E.ADDRESS_IN_USE
    assert retval_of(dp.add_del_address, b, around, True, False) == E.ADDRESS_IN_USE
    dp.add_del_address(b, ipaddress.ip_interface("10.1.0.1/24"), True, False)  # disjoint
    dp.add_del_address(b, ipaddress.ip_interface("fd00::1/64"), True, False)
    assert retval_of(dp.add_del_address, a, ipaddress.ip_interface("fd00::2/48"), True, False) == (
        E.ADDRESS_IN_USE
    )
    dp.add_del_address(a, wide, False, False)
    dp.add_del_address(b, inside, True, False)  # the conflict went with the address
    dp.delete_loopback(b)
    dp.add_del_address(a, inside, True, False)  # and with the deleted interface

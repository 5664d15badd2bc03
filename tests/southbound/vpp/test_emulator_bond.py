"""bond.api in the emulator, as VPP 24.06's bonding code answers (src/vnet/bonding)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.process

ANY = 0xFFFFFFFF
LACP, XOR, ROUND_ROBIN = 5, 3, 1
L34, RR = 1, 3


def test_bond_lifecycle_and_dumps(papi):
    bond = papi.api.bond_create2(mode=XOR, lb=L34, id=ANY).sw_if_index
    a = papi.api.create_loopback().sw_if_index
    b = papi.api.create_loopback().sw_if_index
    assert papi.api.bond_add_member(sw_if_index=a, bond_sw_if_index=bond).retval == 0
    assert papi.api.bond_add_member(sw_if_index=b, bond_sw_if_index=bond,
                                    is_passive=True, is_long_timeout=True).retval == 0
    papi.api.sw_interface_set_flags(sw_if_index=a, flags=1)
    (details,) = papi.api.sw_bond_interface_dump(sw_if_index=ANY)
    assert (details.sw_if_index, details.id, int(details.mode), int(details.lb),
            details.members, details.active_members, details.interface_name) == \
        (bond, 0, XOR, L34, 2, 1, "BondEthernet0")
    members = papi.api.sw_member_interface_dump(sw_if_index=bond)
    assert [(m.sw_if_index, m.is_passive, m.is_long_timeout) for m in members] == \
        [(a, False, False), (b, True, True)]
    (iface,) = papi.api.sw_interface_dump(sw_if_index=bond)
    assert (iface.interface_dev_type, iface.link_mtu) == ("bond", 9000)
    assert papi.api.bond_detach_member(sw_if_index=a).retval == 0
    assert [m.sw_if_index for m in papi.api.sw_member_interface_dump(sw_if_index=bond)] == [b]
    assert papi.api.bond_delete(sw_if_index=bond).retval == 0
    assert papi.api.sw_bond_interface_dump(sw_if_index=ANY) == []
    # Its members were detached with it: b can join a new bond.
    again = papi.api.bond_create2(mode=LACP, lb=L34, id=7).sw_if_index
    assert papi.api.bond_add_member(sw_if_index=b, bond_sw_if_index=again).retval == 0
    (details,) = papi.api.sw_bond_interface_dump(sw_if_index=again)
    assert (details.interface_name, details.active_members) == ("BondEthernet7", 0)


def test_bond_refusals_are_vpps(papi):
    assert papi.api.bond_create2(mode=9, lb=0).retval == -73  # INVALID_ARGUMENT
    assert papi.api.bond_create2(mode=XOR, lb=RR).retval == -73  # lb above L23
    bond = papi.api.bond_create2(mode=ROUND_ROBIN, lb=0, id=3).sw_if_index
    (details,) = papi.api.sw_bond_interface_dump(sw_if_index=bond)
    assert int(details.lb) == RR  # round-robin forces its own algorithm
    assert papi.api.bond_create2(mode=XOR, lb=0, id=3).retval == -147  # INSTANCE_IN_USE
    a = papi.api.create_loopback().sw_if_index
    assert papi.api.bond_add_member(sw_if_index=a, bond_sw_if_index=a).retval == -71
    assert papi.api.bond_add_member(sw_if_index=bond, bond_sw_if_index=bond).retval == -71
    assert papi.api.bond_add_member(sw_if_index=99, bond_sw_if_index=bond).retval == -2
    assert papi.api.bond_add_member(sw_if_index=a, bond_sw_if_index=bond).retval == 0
    assert papi.api.bond_add_member(sw_if_index=a, bond_sw_if_index=bond).retval == -81
    assert papi.api.bond_detach_member(sw_if_index=bond).retval == -71  # not a member
    assert papi.api.bond_delete(sw_if_index=a).retval == -2  # not a bond
    # A member deleted leaves its bond.
    assert papi.api.delete_loopback(sw_if_index=a).retval == 0
    assert papi.api.sw_member_interface_dump(sw_if_index=bond) == []
    assert papi.api.sw_member_interface_dump(sw_if_index=a) == []

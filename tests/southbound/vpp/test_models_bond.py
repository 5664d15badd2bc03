"""Bonds: `vpp/interface/<name>` of type bond and `vpp/bond/<bond>/member/<interface>`, against
the emulator through the real vpp_papi client."""

from __future__ import annotations

import pytest

from scheduler import RetryPolicy, TransactionError, ValueState
from tests.southbound.vpp.test_models_l2l3 import counted, restart_and_resync, sent, writes

pytestmark = pytest.mark.process

ANY = 0xFFFFFFFF
BOND = "vpp/interface/bond0"
UP1, UP2 = "vpp/interface/up1", "vpp/interface/up2"
M1, M2 = "vpp/bond/bond0/member/up1", "vpp/bond/bond0/member/up2"
LACP_L34 = {"type": "bond", "bond": {"mode": "lacp", "load_balance": "l34"},
            "addresses": ["10.3.0.1/24"]}


def bond_state(vpp):
    (bond,) = vpp.papi.api.sw_bond_interface_dump(sw_if_index=ANY)
    members = vpp.papi.api.sw_member_interface_dump(sw_if_index=bond.sw_if_index)
    return (int(bond.mode), int(bond.lb), bond.interface_name,
            sorted((m.interface_name, m.is_passive) for m in members))


def test_bond_with_members_applied_read_back_and_removed(vpp):
    vpp.commit({BOND: LACP_L34, UP1: {"type": "loopback"}, UP2: {"type": "loopback"},
                M1: {}, M2: {"passive": True}})
    for key in (BOND, UP1, UP2, M1, M2):
        assert vpp.state(key) == ValueState.CONFIGURED, key
    assert bond_state(vpp) == (5, 1, "BondEthernet0", [("loop0", False), ("loop1", True)])
    # Read back: a downstream resync finds nothing to change.
    before = counted(vpp)
    vpp.scheduler.resync({}, kind="downstream")
    assert writes(sent(vpp, before)) == {}
    # A changed member flag: detached and added again.
    vpp.commit({M2: {"passive": False}})
    assert bond_state(vpp)[3] == [("loop0", False), ("loop1", False)]
    # Removing everything leaves VPP as it was.
    vpp.commit({key: None for key in (M1, M2, BOND, UP1, UP2)})
    assert vpp.papi.api.sw_bond_interface_dump(sw_if_index=ANY) == []
    assert [i["name"] for i in vpp.control.state()["interfaces"]] == ["local0"]


def test_member_waits_for_its_bond_and_interface(vpp):
    vpp.commit({M1: {}})
    assert vpp.state(M1) == ValueState.PENDING
    vpp.commit({UP1: {"type": "loopback"}})
    assert vpp.state(M1) == ValueState.PENDING
    vpp.commit({BOND: {"type": "bond", "bond": {"mode": "active-backup"}}})
    assert vpp.state(M1) == ValueState.CONFIGURED
    # The bond goes: its member is removed first (it depends on it), then pending again.
    vpp.commit({BOND: None})
    assert vpp.state(M1) == ValueState.PENDING
    assert vpp.papi.api.sw_bond_interface_dump(sw_if_index=ANY) == []


def test_bond_model_rules_and_vpps_refusals(vpp):
    with pytest.raises(TransactionError):
        vpp.commit({BOND: {"type": "bond"}})
    assert vpp.scheduler.get_value_status(BOND).details == ("bond",)
    with pytest.raises(TransactionError):
        vpp.commit({BOND: {"type": "bond", "bond": {"mode": "xor", "load_balance": "rr"}}})
    assert vpp.scheduler.get_value_status(BOND).details == ("bond.load_balance",)
    with pytest.raises(TransactionError):
        vpp.commit({"vpp/bond/bond0/member/bond0": {}})
    assert vpp.state("vpp/bond/bond0/member/bond0") == ValueState.INVALID
    # Two bonds with the same id: VPP's INSTANCE_IN_USE, the second one FAILED.
    with pytest.raises(TransactionError):
        vpp.commit({BOND: {"type": "bond", "bond": {"mode": "xor", "id": 4}},
                    "vpp/interface/bond1": {"type": "bond", "bond": {"mode": "xor", "id": 4}}},
                   retry=RetryPolicy(period=0.01, max_count=1))
    states = {vpp.state(BOND), vpp.state("vpp/interface/bond1")}
    assert states == {ValueState.CONFIGURED, ValueState.FAILED}
    failed = [k for k in (BOND, "vpp/interface/bond1") if vpp.state(k) == ValueState.FAILED]
    assert "VNET_API_ERROR_INSTANCE_IN_USE (-147)" in \
        vpp.scheduler.get_value_status(failed[0]).error_message


def test_bond_survives_a_vpp_restart(vpp):
    vpp.commit({BOND: LACP_L34, UP1: {"type": "loopback"}, M1: {}})
    requests = restart_and_resync(vpp)
    assert requests["bond_create2"] == 1 and requests["bond_add_member"] == 1
    assert bond_state(vpp)[3] == [("loop0", False)]

"""`vpp/abf/<policy id>` through the scheduler, the VPP southbound and vpp_papi, against the
emulator."""

from __future__ import annotations

import pytest

from scheduler import InvalidValueError, ValueState
from southbound.vpp.models.abf import check_abf
from tests.southbound.vpp.plugin_helpers import calls
from tests.southbound.vpp.test_models_l2l3 import restart_and_resync

pytestmark = pytest.mark.process

CONFIGURED, PENDING, OBTAINED = ValueState.CONFIGURED, ValueState.PENDING, ValueState.OBTAINED
ANY = 0xFFFFFFFF
LOOP = {"type": "loopback"}
UP = {"type": "loopback", "addresses": ["10.9.0.2/24"]}
ACL = {"rules": [{"action": "permit", "dst": "10.1.0.0/16", "protocol": "tcp"}]}
POLICY = {"acl": "web", "paths": [{"next_hop": "10.9.0.1", "interface": "up"}],
          "interfaces": [{"interface": "lan", "priority": 10}]}
KEY = "vpp/abf/7"
BASE = {"vpp/interface/up": UP, "vpp/interface/lan": LOOP, "vpp/acl/web": ACL}
WRITES = ("abf_policy_add_del", "abf_itf_attach_add_del")


def policies(vpp) -> dict[int, tuple]:
    return {d.policy.policy_id: (d.policy.acl_index, [
        (str(p.nh.address.ip4), p.sw_if_index, p.weight) for p in d.policy.paths])
        for d in vpp.papi.api.abf_policy_dump()}


def attachments(vpp) -> list[tuple]:
    return [(d.attach.policy_id, d.attach.sw_if_index, d.attach.priority, d.attach.is_ipv6)
            for d in vpp.papi.api.abf_itf_attach_dump()]


def acl_index(vpp, name: str) -> int:
    (index,) = [d.acl_index for d in vpp.papi.api.acl_dump(acl_index=ANY)
                if d.tag == f"kvmesh:{name}"]
    return index


def test_a_policy_applied_read_back_and_removed(vpp):
    vpp.commit({**BASE, KEY: POLICY})
    up, lan = vpp.sw_if_index("up"), vpp.sw_if_index("lan")
    assert policies(vpp) == {7: (acl_index(vpp, "web"), [("10.9.0.1", up, 1)])}
    assert attachments(vpp) == [(7, lan, 10, False)]
    assert vpp.state(KEY) is CONFIGURED
    assert vpp.state("vpp/abf/7/interface/lan") is CONFIGURED
    before = vpp.control.counters()
    vpp.scheduler.resync({}, kind="downstream")
    assert calls(vpp, before, *WRITES) == dict.fromkeys(WRITES, 0)
    assert vpp.state(KEY) is CONFIGURED
    # The policy and its ACL go together: attachment, policy, then the ACL (VPP refuses to
    # delete an ACL an attached policy holds).
    vpp.commit({KEY: None, "vpp/acl/web": None})
    assert policies(vpp) == {} and attachments(vpp) == []
    assert vpp.papi.api.acl_dump(acl_index=ANY) == []
    assert vpp.control.state()["abf"] == {"policies": [], "attachments": []}


def test_attachments_change_without_touching_the_policy(vpp):
    vpp.commit({**BASE, "vpp/interface/lan2": LOOP, KEY: POLICY})
    before = vpp.control.counters()
    vpp.commit({KEY: {**POLICY, "interfaces": [{"interface": "lan", "priority": 5},
                                               {"interface": "lan2", "family": "ipv6"}]}})
    assert calls(vpp, before, *WRITES) == {"abf_policy_add_del": 0,
                                           "abf_itf_attach_add_del": 3}
    lan, lan2 = vpp.sw_if_index("lan"), vpp.sw_if_index("lan2")
    assert sorted(attachments(vpp)) == [(7, lan, 5, False), (7, lan2, 0, True)]


def test_paths_are_updated_in_place_and_a_new_acl_recreates(vpp):
    vpp.commit({**BASE, "vpp/acl/ssh": ACL, KEY: POLICY})
    up = vpp.sw_if_index("up")
    web = acl_index(vpp, "web")
    # Another path and a new weight for the old one: one add, one remove, one add.
    before = vpp.control.counters()
    vpp.commit({KEY: {**POLICY, "paths": [
        {"next_hop": "10.9.0.1", "interface": "up", "weight": 3},
        {"next_hop": "10.9.0.3", "interface": "up"}]}})
    assert calls(vpp, before, *WRITES) == {"abf_policy_add_del": 3,
                                           "abf_itf_attach_add_del": 0}
    assert policies(vpp) == {7: (web, [("10.9.0.1", up, 3), ("10.9.0.3", up, 1)])}
    # A path dropped: one remove.
    before = vpp.control.counters()
    vpp.commit({KEY: {**POLICY, "paths": [
        {"next_hop": "10.9.0.1", "interface": "up", "weight": 3}]}})
    assert calls(vpp, before, *WRITES) == {"abf_policy_add_del": 1,
                                           "abf_itf_attach_add_del": 0}
    assert policies(vpp) == {7: (web, [("10.9.0.1", up, 3)])}
    # Only a weight changes on the only path: in place would remove the policy - re-created,
    # its attachment with it.
    vpp.commit({KEY: {**POLICY, "paths": [{"next_hop": "10.9.0.1", "interface": "up",
                                           "weight": 2}]}})
    assert policies(vpp) == {7: (web, [("10.9.0.1", up, 2)])}
    assert attachments(vpp) == [(7, vpp.sw_if_index("lan"), 10, False)]
    # ... held by VPP's API as a new one: it outlives its attachment (a policy made pathless
    # in place would go with it).
    vpp.commit({KEY: {**POLICY, "interfaces": [], "paths": [
        {"next_hop": "10.9.0.1", "interface": "up", "weight": 2}]}})
    assert attachments(vpp) == []
    assert policies(vpp) == {7: (web, [("10.9.0.1", up, 2)])}
    # Another ACL: VPP refuses it for an existing policy, so it is re-created.
    vpp.commit({KEY: {**POLICY, "acl": "ssh"}})
    assert policies(vpp) == {7: (acl_index(vpp, "ssh"), [("10.9.0.1", up, 1)])}
    assert vpp.state(KEY) is CONFIGURED and len(attachments(vpp)) == 1


def test_pending_until_the_acl_and_interfaces_exist(vpp):
    vpp.commit({KEY: POLICY, "vpp/interface/up": UP})
    assert vpp.state(KEY) is PENDING  # no ACL
    assert policies(vpp) == {}
    vpp.commit({"vpp/acl/web": ACL})
    assert vpp.state(KEY) is CONFIGURED
    assert vpp.state("vpp/abf/7/interface/lan") is PENDING  # no interface lan
    vpp.commit({"vpp/interface/lan": LOOP})
    assert vpp.state("vpp/abf/7/interface/lan") is CONFIGURED
    # Removing the ACL takes the policy down first; it waits for the ACL again.
    vpp.commit({"vpp/acl/web": None})
    assert vpp.state(KEY) is PENDING
    assert policies(vpp) == {} and vpp.papi.api.acl_dump(acl_index=ANY) == []
    vpp.commit({"vpp/acl/web": ACL})
    assert vpp.state(KEY) is CONFIGURED and len(attachments(vpp)) == 1


def test_a_policy_kvmesh_did_not_create_is_obtained_and_kept(vpp):
    vpp.commit(BASE)
    foreign_acl = vpp.papi.api.acl_add_replace(acl_index=ANY, tag="", count=0, r=[]).acl_index
    assert vpp.papi.api.abf_policy_add_del(is_add=True, policy={
        "policy_id": 99, "acl_index": foreign_acl, "n_paths": 1, "paths": [{
            "sw_if_index": ANY, "table_id": 0, "proto": 0,
            "nh": {"address": {"ip4": "10.9.0.1"}}, "label_stack": [{}] * 16}]}).retval == 0
    vpp.scheduler.resync(BASE, kind="full")
    assert vpp.state("vpp/abf/99") is OBTAINED
    (dumped,) = vpp.scheduler.dump(key_prefix="vpp/abf/99")
    assert dumped.value == {"acl": f"vpp-{foreign_acl}", "interfaces": [], "paths": [
        {"next_hop": "10.9.0.1", "interface": None, "table": 0, "weight": 1,
         "preference": 0}]}
    vpp.scheduler.resync({}, kind="full")
    assert list(policies(vpp)) == [99]


def test_validation_uses_vpps_limits():
    assert check_abf(KEY, {"acl": "a", "paths": [
        {"next_hop": "10.0.0.9"}, {"next_hop": "10.0.0.2", "interface": "x"}]})["paths"] == [
        {"next_hop": "10.0.0.2", "interface": "x", "table": 0, "weight": 1, "preference": 0},
        {"next_hop": "10.0.0.9", "interface": None, "table": 0, "weight": 1, "preference": 0}]
    one = [{"next_hop": "10.0.0.2"}]
    for key, bad, match in (
            ("vpp/abf/4294967296", {"acl": "a", "paths": one}, "malformed"),
            ("vpp/abf/07", {"acl": "a", "paths": one}, "malformed"),
            (KEY, {"acl": "a", "paths": []}, "paths"),
            (KEY, {"acl": "a", "paths": one * 2}, "twice"),
            (KEY, {"acl": "a", "paths": [{"next_hop": "0.0.0.0"}]}, "needs an interface"),
            (KEY, {"acl": "a", "paths": [{"next_hop": "10.0.0.2", "interface": "x",
                                          "table": 3}]}, "table"),
            (KEY, {"acl": "a", "paths": [{"next_hop": "10.0.0.2", "weight": 256}]}, "weight"),
            (KEY, {"acl": "a", "paths": one, "interfaces": [
                {"interface": "x"}, {"interface": "x", "family": "ipv6"}]}, "once"),
            (KEY, {"acl": "a/b", "paths": one}, "acl")):
        with pytest.raises(InvalidValueError, match=match):
            check_abf(key, bad)
    check_abf("vpp/abf/4294967295", {"acl": "a", "paths": one})


def test_a_vpp_restart_is_rebuilt_by_a_resync(vpp):
    vpp.commit({**BASE, KEY: POLICY})
    sent = restart_and_resync(vpp)
    assert sent["abf_policy_add_del"] == 1 and sent["abf_itf_attach_add_del"] == 1
    web, up, lan = acl_index(vpp, "web"), vpp.sw_if_index("up"), vpp.sw_if_index("lan")
    assert policies(vpp) == {7: (web, [("10.9.0.1", up, 1)])}
    assert attachments(vpp) == [(7, lan, 10, False)]

"""abf.api in the emulator, as VPP 24.06 answers (src/plugins/abf), through vpp_papi."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.process

ANY = 0xFFFFFFFF
NO_SUCH_FIB, NO_SUCH_ENTRY, INVALID_VALUE = -3, -6, -7
NO_MATCHING_INTERFACE, ENTRY_ALREADY_EXISTS, ACL_IN_USE_BY_LOOKUP_CONTEXT = -54, -116, -149
PERMIT_ALL = {"is_permit": 1, "src_prefix": "0.0.0.0/0", "dst_prefix": "0.0.0.0/0",
              "proto": 0, "srcport_or_icmptype_first": 0, "srcport_or_icmptype_last": 65535,
              "dstport_or_icmpcode_first": 0, "dstport_or_icmpcode_last": 65535}


def path(nh: str, sw_if_index: int = ANY, table_id: int = 0, weight: int = 1,
         preference: int = 0) -> dict:
    ip6 = ":" in nh
    return {"sw_if_index": sw_if_index, "table_id": table_id, "weight": weight,
            "preference": preference, "proto": 1 if ip6 else 0,
            "nh": {"address": {"ip6" if ip6 else "ip4": nh}}, "label_stack": [{}] * 16}


def policy_add_del(papi, policy_id: int, acl: int, paths: list[dict], is_add: bool = True) -> int:
    return papi.api.abf_policy_add_del(is_add=is_add, policy={
        "policy_id": policy_id, "acl_index": acl, "n_paths": len(paths), "paths": paths}).retval


def attach(papi, policy_id: int, sw_if_index: int, priority: int = 0, is_ipv6: bool = False,
           is_add: bool = True) -> int:
    return papi.api.abf_itf_attach_add_del(is_add=is_add, attach={
        "policy_id": policy_id, "sw_if_index": sw_if_index, "priority": priority,
        "is_ipv6": is_ipv6}).retval


def policies(papi) -> dict[int, tuple]:
    return {d.policy.policy_id: (d.policy.acl_index, [
        (str(p.nh.address.ip6 if int(p.proto) else p.nh.address.ip4), p.sw_if_index,
         p.table_id, p.weight, p.preference) for p in d.policy.paths])
        for d in papi.api.abf_policy_dump()}


def attachments(papi) -> list[tuple]:
    return [(d.attach.policy_id, d.attach.sw_if_index, d.attach.priority, d.attach.is_ipv6)
            for d in papi.api.abf_itf_attach_dump()]


def new_acl(papi) -> int:
    return papi.api.acl_add_replace(acl_index=ANY, tag="", count=1, r=[PERMIT_ALL]).acl_index


def test_policy_lifecycle_paths_in_vpps_order(papi):
    loop = papi.api.create_loopback().sw_if_index
    assert papi.api.abf_plugin_get_version().major == 1
    # The ACL is not checked when the policy is made.
    assert policy_add_del(papi, 7, 42, [path("10.0.0.9"), path("10.0.0.2", loop, weight=0),
                                        path("0.0.0.0", loop, preference=1)]) == 0
    assert policies(papi) == {7: (42, [("10.0.0.2", loop, 0, 1, 0), ("10.0.0.9", ANY, 0, 1, 0),
                                       ("0.0.0.0", loop, 0, 1, 1)])}
    # Adding: a path already there (its weight is not part of it) is not added again.
    assert policy_add_del(papi, 7, 42, [path("10.0.0.2", loop, weight=5),
                                        path("10.0.0.3", loop)]) == 0
    assert [p[0] for p in policies(papi)[7][1]] == ["10.0.0.2", "10.0.0.3", "10.0.0.9", "0.0.0.0"]
    assert policy_add_del(papi, 7, 43, [path("10.0.0.4")]) == INVALID_VALUE  # another ACL
    # Removing: by what a path is; absent ones are ignored; the last one removes the policy.
    assert policy_add_del(papi, 7, 42, [path("10.0.0.9", weight=9), path("10.0.0.8")],
                          is_add=False) == 0
    assert len(policies(papi)[7][1]) == 3
    assert policy_add_del(papi, 7, 0, [path("10.0.0.2", loop), path("10.0.0.3", loop),
                                       path("0.0.0.0", loop)], is_add=False) == 0
    assert policies(papi) == {}
    assert policy_add_del(papi, 7, 42, [path("10.0.0.2")], is_add=False) == INVALID_VALUE


def test_policy_refusals_are_vpps(papi):
    assert policy_add_del(papi, 1, 0, []) == INVALID_VALUE
    assert policy_add_del(papi, 1, 0, [path("10.0.0.2", 77)]) == NO_MATCHING_INTERFACE
    assert policy_add_del(papi, 1, 0, [path("10.0.0.2", table_id=5)]) == NO_SUCH_FIB
    assert papi.api.ip_table_add_del(is_add=True, table={"table_id": 5, "is_ip6": True}) \
        .retval == 0
    assert policy_add_del(papi, 1, 0, [path("10.0.0.2", table_id=5)]) == NO_SUCH_FIB  # IPv4
    assert policy_add_del(papi, 1, 0, [path("fd00::2", table_id=5)]) == 0
    assert policies(papi) == {1: (0, [("fd00::2", ANY, 5, 1, 0)])}


def test_attachments_keyed_by_policy_and_interface(papi):
    loop, other = (papi.api.create_loopback().sw_if_index for _ in range(2))
    assert policy_add_del(papi, 1, 0, [path("10.0.0.2")]) == 0
    assert policy_add_del(papi, 2, 0, [path("10.0.0.3")]) == 0
    assert attach(papi, 1, loop, priority=20) == 0
    assert attach(papi, 1, loop, is_ipv6=True) == ENTRY_ALREADY_EXISTS  # whatever the family
    assert attach(papi, 2, loop, priority=10) == 0
    assert attach(papi, 2, 999) == 0  # VPP does not check the interface
    assert attach(papi, 3, loop) == NO_SUCH_ENTRY
    assert attachments(papi) == [(1, loop, 20, False), (2, loop, 10, False), (2, 999, 0, False)]
    assert attach(papi, 1, other, is_add=False) == NO_SUCH_ENTRY
    assert attach(papi, 1, loop, is_ipv6=True, is_add=False) == NO_SUCH_ENTRY
    assert attach(papi, 1, loop, is_add=False) == 0
    assert attach(papi, 2, 999, is_add=False) == 0
    assert attachments(papi) == [(2, loop, 10, False)]


def test_an_attached_policy_outlives_its_paths(papi):
    loop = papi.api.create_loopback().sw_if_index
    assert policy_add_del(papi, 1, 0, [path("10.0.0.2")]) == 0
    assert attach(papi, 1, loop) == 0
    assert policy_add_del(papi, 1, 0, [path("10.0.0.2")], is_add=False) == 0
    assert policies(papi) == {1: (0, [])}  # held by its attachment
    assert policy_add_del(papi, 1, 0, [path("10.0.0.2")], is_add=False) == 0  # nothing left
    # Paths added again do not take the API's hold again (VPP's abf_policy_update): the policy
    # goes with its last attachment, paths and all.
    assert policy_add_del(papi, 1, 0, [path("10.0.0.5")]) == 0
    assert attach(papi, 1, loop, is_add=False) == 0
    assert policies(papi) == {}


def test_an_acl_in_an_attached_policy_cannot_be_deleted(papi):
    loop = papi.api.create_loopback().sw_if_index
    acl, unused = new_acl(papi), new_acl(papi)
    assert policy_add_del(papi, 1, acl, [path("10.0.0.2")]) == 0
    assert policy_add_del(papi, 2, unused, [path("10.0.0.2")]) == 0
    assert papi.api.acl_del(acl_index=unused).retval == 0  # a policy alone holds no ACL
    assert attach(papi, 1, loop) == 0
    assert papi.api.acl_del(acl_index=acl).retval == ACL_IN_USE_BY_LOOKUP_CONTEXT
    assert attach(papi, 1, loop, is_add=False) == 0
    assert papi.api.acl_del(acl_index=acl).retval == 0


def test_a_lookup_context_with_an_undefined_acl_is_left_as_it_was(papi):
    """abf_setup_acl_lc ignores the acl plugin's refusal: the context keeps its ACLs."""
    loop = papi.api.create_loopback().sw_if_index
    acl = new_acl(papi)
    assert policy_add_del(papi, 1, acl, [path("10.0.0.2")]) == 0
    assert policy_add_del(papi, 2, 99, [path("10.0.0.3")]) == 0
    assert attach(papi, 1, loop, priority=5) == 0
    assert attach(papi, 2, loop, priority=1) == 0  # [99, acl] refused: the context keeps [acl]
    assert papi.api.acl_del(acl_index=acl).retval == ACL_IN_USE_BY_LOOKUP_CONTEXT
    assert attach(papi, 1, loop, is_add=False) == 0  # [99] refused: [acl] still
    assert papi.api.acl_del(acl_index=acl).retval == ACL_IN_USE_BY_LOOKUP_CONTEXT
    assert attach(papi, 2, loop, is_add=False) == 0  # the last: the context goes
    assert papi.api.acl_del(acl_index=acl).retval == 0

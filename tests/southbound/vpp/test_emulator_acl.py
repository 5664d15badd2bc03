"""The emulator's acl plugin through the unmodified vpp_papi client, refusals included."""

from __future__ import annotations

ANY = 0xFFFFFFFF


def rule(action=1, src="10.0.0.0/8", dst="0.0.0.0/0", proto=6, sport=(0, 65535),
         dport=(80, 80)) -> dict:
    return {"is_permit": action, "src_prefix": src, "dst_prefix": dst, "proto": proto,
            "srcport_or_icmptype_first": sport[0], "srcport_or_icmptype_last": sport[1],
            "dstport_or_icmpcode_first": dport[0], "dstport_or_icmpcode_last": dport[1]}


def add(papi, rules, index=ANY, tag="t"):
    return papi.api.acl_add_replace(acl_index=index, tag=tag, count=len(rules), r=rules)


def test_add_replace_creates_replaces_in_place_and_refuses_a_missing_index(papi):
    created = add(papi, [rule()], tag="web")
    assert (created.retval, created.acl_index) == (0, 0)
    assert add(papi, [rule(), rule(action=0)], tag="other").acl_index == 1
    replaced = add(papi, [rule(action=0, proto=17, dport=(53, 53))], index=0, tag="web2")
    assert (replaced.retval, replaced.acl_index) == (0, 0)
    (details,) = papi.api.acl_dump(acl_index=0)
    assert details.tag == "web2" and details.count == 1
    (r,) = details.r
    assert (int(r.is_permit), str(r.src_prefix), int(r.proto), r.dstport_or_icmpcode_first) == (
        0, "10.0.0.0/8", 17, 53)
    assert [d.acl_index for d in papi.api.acl_dump(acl_index=ANY)] == [0, 1]
    assert add(papi, [rule()], index=7).retval == -6  # NO_SUCH_ENTRY
    assert papi.api.acl_dump(acl_index=7) == []


def test_add_replace_checks_every_rule_first(papi):
    assert add(papi, [rule(), rule(src="10.0.0.1/8")]).retval == -57  # INVALID_SRC_ADDRESS
    assert add(papi, [rule(dst="10.0.0.1/8")]).retval == -58  # INVALID_DST_ADDRESS
    assert add(papi, [rule(dport=(90, 80))]).retval == -8  # INVALID_VALUE_2
    assert papi.api.acl_dump(acl_index=ANY) == []


def test_interface_lists_and_acl_delete_refusals(papi):
    lo = papi.api.create_loopback().sw_if_index
    a, b = add(papi, [rule()]).acl_index, add(papi, [rule(action=0)]).acl_index
    set_list = papi.api.acl_interface_set_acl_list
    assert set_list(sw_if_index=lo, count=3, n_input=2, acls=[b, a, a]).retval == 0
    details = {d.sw_if_index: d for d in papi.api.acl_interface_list_dump(sw_if_index=ANY)}
    assert set(details) == {0, lo}  # every interface, as VPP
    assert (details[lo].n_input, list(details[lo].acls)) == (2, [b, a, a])
    assert details[0].count == 0
    assert set_list(sw_if_index=lo, count=2, n_input=2, acls=[a, a]).retval == -116
    assert set_list(sw_if_index=lo, count=1, n_input=1, acls=[9]).retval == -6
    assert set_list(sw_if_index=99, count=0, n_input=0, acls=[]).retval == -2
    assert papi.api.acl_del(acl_index=b).retval == -142  # ACL_IN_USE_INBOUND
    assert set_list(sw_if_index=lo, count=1, n_input=0, acls=[a]).retval == 0
    assert papi.api.acl_del(acl_index=a).retval == -143  # ACL_IN_USE_OUTBOUND
    assert papi.api.acl_del(acl_index=b).retval == 0
    assert papi.api.acl_del(acl_index=b).retval == -6
    # an interface that goes loses its lists, and the ACL is free again
    assert papi.api.delete_loopback(sw_if_index=lo).retval == 0
    assert papi.api.acl_del(acl_index=a).retval == 0


def test_restart_loses_every_acl(papi, emulator):
    add(papi, [rule()])
    emulator.control.restart()
    assert emulator.control.state()["acl"] == {"acls": [], "interfaces": {}}

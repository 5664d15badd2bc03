"""sr.api in the emulator, as VPP 24.06 answers (src/vnet/srv6), through vpp_papi."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.process

END, X, T, DX2, DX6, DX4, DT6, DT4 = 1, 2, 3, 5, 6, 7, 8, 9
L2, IPV4, IPV6 = 2, 4, 6
ADD, DEL, MOD = 1, 2, 3
ZERO6 = "::"


def sids(*segments: str, weight: int = 1) -> dict:
    return {"num_sids": len(segments), "weight": weight,
            "sids": list(segments) + [ZERO6] * (16 - len(segments))}


def test_localsids_and_vpps_answers(papi):
    add = papi.api.sr_localsid_add_del
    assert add(localsid="fc00::1", behavior=END).retval == 0
    assert add(localsid="fc00::1", behavior=END).retval == -1  # exists
    assert add(localsid="fc00::2", behavior=END, fib_table=7).retval == -3  # no table
    loop = papi.api.create_loopback().sw_if_index
    papi.api.sw_interface_add_del_address(sw_if_index=loop, is_add=True, prefix="fc00::9/64")
    assert add(localsid="fc00::9", behavior=END).retval == -4  # a FIB entry there
    assert add(localsid="fc00::3", behavior=X, sw_if_index=loop + 9,
               nh_addr="fe80::1").retval == -2  # VALIDATE_SW_IF_INDEX
    assert add(localsid="fc00::3", behavior=X, sw_if_index=loop, nh_addr="fe80::1").retval == 0
    assert add(localsid="fc00::4", behavior=DX4, sw_if_index=loop,
               nh_addr="10.0.0.2").retval == 0
    assert add(localsid="fc00::5", behavior=DT4, sw_if_index=42).retval == 0  # table 42 absent
    got = {str(d.addr): (int(d.behavior), d.xconnect_iface_or_vrf_table, str(d.xconnect_nh_addr))
           for d in papi.api.sr_localsids_dump()}
    assert got == {"fc00::1": (END, 0xFFFFFFFF, "0.0.0.0"),
                   "fc00::3": (X, loop, "fe80::1"), "fc00::4": (DX4, loop, "10.0.0.2"),
                   "fc00::5": (DT4, 0, "0.0.0.0")}  # VPP shows table 0 for End.DT4
    assert add(is_del=True, localsid="fc00::1").retval == 0
    assert add(is_del=True, localsid="fc00::1").retval == -2


def test_policies_lists_and_steering(papi):
    add = papi.api.sr_policy_add_v2
    assert papi.api.sr_set_encap_source(encaps_source="2001:db8::1").retval == 0
    assert add(bsid_addr="fc00:b::1", is_encap=True, sids=sids("fc00::a", "fc00::b"),
               encap_src=ZERO6).retval == 0
    assert add(bsid_addr="fc00:b::1", is_encap=True, sids=sids("fc00::a"),
               encap_src=ZERO6).retval == -12
    assert add(bsid_addr="fc00:b::2", is_encap=True, sids=sids("fc00::a"), fib_table=5,
               encap_src=ZERO6).retval == -13
    assert add(bsid_addr="fc00:b::3", is_encap=False, sids=sids("fc00::c", weight=0xFFFFFFFF),
               encap_src=ZERO6).retval == 0
    mod = papi.api.sr_policy_mod_v2
    assert mod(bsid_addr="fc00:b::1", operation=ADD, sids=sids("fc00::d", weight=3),
               encap_src=ZERO6).retval == 0
    assert mod(bsid_addr="fc00:b::9", operation=ADD, sids=sids("fc00::d"),
               encap_src=ZERO6).retval == -1
    assert mod(bsid_addr="fc00:b::3", operation=DEL, sl_index=1,
               encap_src=ZERO6, sids=sids()).retval == -21  # its only list
    first, second = papi.api.sr_policies_v2_dump()
    assert (str(first.bsid), str(first.encap_src), first.is_encap) == \
        ("fc00:b::1", "2001:db8::1", True)
    assert [([str(s) for s in sl.sids[:sl.num_sids]], sl.weight)
            for sl in first.sid_lists] == [(["fc00::a", "fc00::b"], 1), (["fc00::d"], 3)]
    assert second.sid_lists[0].weight == 1  # ~0 is the default weight
    assert mod(bsid_addr="fc00:b::1", operation=DEL, sl_index=2, sids=sids(),
               encap_src=ZERO6).retval == 0
    assert mod(bsid_addr="fc00:b::1", operation=MOD, sl_index=7, weight=2, sids=sids(),
               encap_src=ZERO6).retval == -32

    steer = papi.api.sr_steering_add_del
    loop = papi.api.create_loopback().sw_if_index
    assert steer(bsid_addr="fc00:b::9", traffic_type=IPV6, prefix="2001:db8:1::/48").retval == -2
    assert steer(bsid_addr="fc00:b::3", traffic_type=IPV4, prefix="10.0.0.0/8").retval == -5
    assert steer(bsid_addr="fc00:b::1", traffic_type=IPV4, prefix="10.0.0.0/8",
                 table_id=0).retval == 0
    assert steer(bsid_addr="fc00:b::3", traffic_type=IPV6, prefix="2001:db8:1::/48").retval == 0
    assert steer(bsid_addr="fc00:b::1", traffic_type=L2, sw_if_index=loop).retval == 0
    assert steer(bsid_addr="fc00:b::1", traffic_type=7).retval == -1
    got = {(int(d.traffic_type), str(d.prefix), d.sw_if_index, str(d.bsid))
           for d in papi.api.sr_steering_pol_dump()}
    assert got == {(IPV4, "10.0.0.0/8", 0, "fc00:b::1"),
                   (IPV6, "2001:db8:1::/48", 0xB80D0120, "fc00:b::3"),
                   (L2, "::/0", 1, "fc00:b::1")}  # the index in the union (masked by /0)
    assert loop == 1
    assert steer(is_del=True, bsid_addr="fc00:b::1", traffic_type=IPV4,
                 prefix="10.0.0.0/8").retval == 0
    assert steer(is_del=True, bsid_addr="fc00:b::1", traffic_type=IPV4,
                 prefix="10.0.0.0/8").retval == -4
    assert papi.api.sr_policy_del(bsid_addr="fc00:b::3").retval == 0
    assert papi.api.sr_policy_del(bsid_addr="fc00:b::3").retval == -1

"""ipsec.api tunnel protection in the emulator, as VPP 24.06 answers (src/vnet/ipsec/ipsec_tun.c,
ipsec_api.c), through vpp_papi."""

from __future__ import annotations

import pytest

from tests.southbound.vpp.test_emulator_ipsec import IS_INBOUND, IS_TUNNEL, sa_entry
from tests.southbound.vpp.test_emulator_tunnels import gre, ipip

pytestmark = pytest.mark.process

ANY = 0xFFFFFFFF
NO_NH = "0.0.0.0"
INVALID_SW_IF_INDEX, NO_SUCH_ENTRY, INVALID_VALUE, LIMIT_EXCEEDED = -2, -6, -7, -162


def protect(papi, sw_if_index: int, sa_out: int, sa_in: list[int], nh: str = NO_NH) -> int:
    return papi.api.ipsec_tunnel_protect_update(tunnel={
        "sw_if_index": sw_if_index, "nh": nh, "sa_out": sa_out, "n_sa_in": len(sa_in),
        "sa_in": sa_in}).retval


def protections(papi, sw_if_index: int = ANY) -> list[tuple]:
    return [(d.tun.sw_if_index, str(d.tun.nh), d.tun.sa_out, list(d.tun.sa_in))
            for d in papi.api.ipsec_tunnel_protect_dump(sw_if_index=sw_if_index)]


def sa_ids(papi) -> list[int]:
    return sorted(d.entry.sad_id for d in papi.api.ipsec_sa_v5_dump(sa_id=ANY))


def add_sas(papi, *ids: int, **fields) -> None:
    for sa_id in ids:
        assert papi.api.ipsec_sad_entry_add_v2(entry=sa_entry(sa_id, **fields)).retval == 0


def test_protect_update_dump_and_delete(papi):
    add_sas(papi, 1, 2, 3)
    tun = papi.api.gre_tunnel_add_del(is_add=True, tunnel=gre()).sw_if_index
    other = papi.api.ipip_add_tunnel(tunnel=ipip()).sw_if_index
    assert protect(papi, tun, 1, [2]) == 0
    assert protect(papi, other, 1, [2, 3]) == 0
    assert protections(papi) == [(tun, NO_NH, 1, [2]), (other, NO_NH, 1, [2, 3])]
    assert protections(papi, other) == [(other, NO_NH, 1, [2, 3])]
    assert protections(papi, 77) == []
    # A point-to-point tunnel has one protection: another next hop updates it (SAs swapped, the
    # first next hop kept as its key).
    assert protect(papi, tun, 3, [1], nh="10.9.9.9") == 0
    assert protections(papi, tun) == [(tun, NO_NH, 3, [1])]
    assert papi.api.ipsec_tunnel_protect_del(sw_if_index=tun, nh="10.9.9.9").retval == 0
    assert papi.api.ipsec_tunnel_protect_del(sw_if_index=tun, nh=NO_NH).retval == NO_SUCH_ENTRY
    assert protections(papi) == [(other, NO_NH, 1, [2, 3])]
    # The freed pool slot is taken first, so the new protection is walked first.
    assert protect(papi, tun, 1, []) == 0
    assert [p[0] for p in protections(papi)] == [tun, other]


def test_refusals_are_vpps(papi):
    add_sas(papi, 1, 2)
    tun = papi.api.gre_tunnel_add_del(is_add=True, tunnel=gre()).sw_if_index
    loop = papi.api.create_loopback().sw_if_index
    assert protect(papi, 99, 1, [2]) == INVALID_SW_IF_INDEX
    assert protect(papi, tun, 1, [2, 2, 2, 2, 2]) == LIMIT_EXCEEDED
    assert protect(papi, tun, 7, [2]) == INVALID_VALUE  # unknown outbound SA
    assert protect(papi, tun, 1, [8]) == INVALID_VALUE  # unknown inbound SA
    assert protect(papi, loop, 1, [2]) == INVALID_SW_IF_INDEX  # no tunnel description
    assert papi.api.ipsec_tunnel_protect_del(sw_if_index=99, nh=NO_NH).retval == \
        INVALID_SW_IF_INDEX
    assert protections(papi) == []


def test_sas_in_use_stay_until_the_protection_goes(papi):
    add_sas(papi, 1, 2)
    tun = papi.api.ipip_add_tunnel(tunnel=ipip()).sw_if_index
    assert protect(papi, tun, 1, [2]) == 0
    assert papi.api.ipsec_sad_entry_del(id=1).retval == 0  # answered, and kept: in use
    assert papi.api.ipsec_sad_entry_del(id=2).retval == 0
    assert sa_ids(papi) == [1, 2]
    assert papi.api.ipsec_sad_entry_add_v2(entry=sa_entry(1)).retval == -116  # still there
    assert papi.api.ipsec_tunnel_protect_del(sw_if_index=tun, nh=NO_NH).retval == 0
    assert sa_ids(papi) == []


def test_a_refused_update_leaves_its_locks_as_vpp_does(papi):
    """ipsec_tun_protect_update locks each SA it finds and returns on the first unknown one
    without unlocking those: they outlive their sad_entry_del."""
    add_sas(papi, 1, 2)
    tun = papi.api.ipip_add_tunnel(tunnel=ipip()).sw_if_index
    assert protect(papi, tun, 9, [1]) == INVALID_VALUE
    assert papi.api.ipsec_sad_entry_del(id=1).retval == 0
    assert papi.api.ipsec_sad_entry_del(id=2).retval == 0
    assert sa_ids(papi) == [1]


def test_a_multipoint_tunnel_has_one_protection_per_next_hop(papi):
    add_sas(papi, 1, 2)
    mp = papi.api.gre_tunnel_add_del(is_add=True, tunnel=gre(dst="0.0.0.0", mode=1)).sw_if_index
    assert protect(papi, mp, 1, [], nh="10.0.0.5") == 0
    assert protect(papi, mp, 2, [], nh="10.0.0.6") == 0
    assert sorted(protections(papi, mp)) == [(mp, "10.0.0.5", 1, []), (mp, "10.0.0.6", 2, [])]
    assert papi.api.ipsec_tunnel_protect_del(sw_if_index=mp, nh="10.0.0.7").retval == \
        NO_SUCH_ENTRY
    assert papi.api.ipsec_tunnel_protect_del(sw_if_index=mp, nh="10.0.0.5").retval == 0
    assert protections(papi) == [(mp, "10.0.0.6", 2, [])]


def test_sa_details_name_the_interface_of_a_protected_inbound_tunnel_sa(papi):
    tunnel = {"src": "192.0.2.1", "dst": "192.0.2.2"}
    add_sas(papi, 1, flags=IS_TUNNEL, tunnel=tunnel)
    add_sas(papi, 2, flags=IS_TUNNEL | IS_INBOUND, tunnel=tunnel)
    add_sas(papi, 3)  # transport mode: never marked
    tun = papi.api.ipip_add_tunnel(tunnel=ipip()).sw_if_index
    assert protect(papi, tun, 1, [2, 3]) == 0
    shown = {d.entry.sad_id: d.sw_if_index for d in papi.api.ipsec_sa_v5_dump(sa_id=ANY)}
    assert shown == {1: ANY, 2: tun, 3: ANY}
    assert protect(papi, tun, 1, [3]) == 0  # SA 2 no longer protects
    shown = {d.entry.sad_id: d.sw_if_index for d in papi.api.ipsec_sa_v5_dump(sa_id=ANY)}
    assert shown == {1: ANY, 2: ANY, 3: ANY}

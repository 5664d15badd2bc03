"""ipsec.api in the emulator, as VPP 24.06 answers (src/vnet/ipsec), through vpp_papi."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.process

ANY = 0xFFFFFFFF
ESP, AH = 50, 51
AES_CBC_128, AES_GCM_256, SHA_256_128 = 1, 9, 4
USE_ANTI_REPLAY, IS_TUNNEL, IS_TUNNEL_V6, UDP_ENCAP, IS_INBOUND = 2, 4, 8, 16, 64
BYPASS, DISCARD, RESOLVE, PROTECT = range(4)


def key(data: bytes) -> dict:
    return {"length": len(data), "data": data}


def sa_entry(sad_id: int, **fields) -> dict:
    entry = {"sad_id": sad_id, "spi": 1000 + sad_id, "protocol": ESP,
             "crypto_algorithm": AES_CBC_128, "crypto_key": key(bytes(range(16))),
             "integrity_algorithm": SHA_256_128, "integrity_key": key(b"k" * 20),
             "flags": 0, "tunnel": {"src": "0.0.0.0", "dst": "0.0.0.0"}}
    entry.update(fields)
    return entry


def policy(spd_id: int, **fields) -> dict:
    entry = {"spd_id": spd_id, "priority": 10, "is_outbound": True, "sa_id": 0,
             "policy": BYPASS, "protocol": 0,
             "remote_address_start": "0.0.0.0", "remote_address_stop": "255.255.255.255",
             "local_address_start": "0.0.0.0", "local_address_stop": "255.255.255.255",
             "remote_port_start": 0, "remote_port_stop": 65535,
             "local_port_start": 0, "local_port_stop": 65535}
    entry.update(fields)
    return entry


def test_sa_lifecycle_and_dump(papi):
    tunnel = {"src": "192.0.2.1", "dst": "192.0.2.2", "table_id": 0}
    reply = papi.api.ipsec_sad_entry_add_v2(entry=sa_entry(
        7, flags=IS_TUNNEL | UDP_ENCAP | USE_ANTI_REPLAY, tunnel=tunnel, salt=99,
        anti_replay_window_size=128))
    assert (reply.retval, reply.stat_index) == (0, 0)
    v6 = {"src": "2001:db8::1", "dst": "2001:db8::2"}
    assert papi.api.ipsec_sad_entry_add_v2(entry=sa_entry(
        8, flags=IS_TUNNEL | IS_INBOUND, tunnel=v6)).stat_index == 1
    first, second = papi.api.ipsec_sa_v5_dump(sa_id=ANY)
    e = first.entry
    assert (e.sad_id, e.spi, int(e.protocol), int(e.crypto_algorithm), e.salt) == \
        (7, 1007, ESP, AES_CBC_128, 99)
    assert bytes(e.crypto_key.data[:e.crypto_key.length]) == bytes(range(16))
    assert bytes(e.integrity_key.data[:e.integrity_key.length]) == b"k" * 20
    assert (str(e.tunnel.src), str(e.tunnel.dst)) == ("192.0.2.1", "192.0.2.2")
    assert (e.udp_src_port, e.udp_dst_port, e.anti_replay_window_size) == (4500, 4500, 128)
    assert int(second.entry.flags) == IS_TUNNEL | IS_TUNNEL_V6 | IS_INBOUND  # v6 set by VPP
    assert second.entry.udp_src_port == 0 and second.entry.anti_replay_window_size == 0
    assert papi.api.ipsec_sad_entry_del(id=7).retval == 0
    assert [d.entry.sad_id for d in papi.api.ipsec_sa_v5_dump(sa_id=ANY)] == [8]
    # The freed slot is handed out again first.
    assert papi.api.ipsec_sad_entry_add_v2(entry=sa_entry(9)).stat_index == 0


def test_sa_refusals_are_vpps(papi):
    assert papi.api.ipsec_sad_entry_add_v2(entry=sa_entry(1)).retval == 0
    assert papi.api.ipsec_sad_entry_add_v2(entry=sa_entry(1)).retval == -116  # exists
    assert papi.api.ipsec_sad_entry_add_v2(entry=sa_entry(
        2, crypto_key=key(b"short"))).retval == -156  # KEY_LENGTH
    assert papi.api.ipsec_sad_entry_add_v2(entry=sa_entry(
        2, crypto_algorithm=AES_GCM_256, crypto_key=key(bytes(16)))).retval == -156
    assert papi.api.ipsec_sad_entry_add_v2(entry=sa_entry(
        2, protocol=AH, crypto_algorithm=0, crypto_key=key(b""),
        integrity_algorithm=0)).retval == -9  # AH without integrity
    assert papi.api.ipsec_sad_entry_add_v2(entry=sa_entry(
        2, flags=IS_TUNNEL, tunnel={"src": "192.0.2.1", "dst": "2001:db8::1"})).retval == -153
    assert papi.api.ipsec_sad_entry_add_v2(entry=sa_entry(
        2, flags=IS_TUNNEL, tunnel={"src": "192.0.2.1", "dst": "192.0.2.1"})).retval == -82
    assert papi.api.ipsec_sad_entry_add_v2(entry=sa_entry(
        2, flags=IS_TUNNEL, tunnel={"src": "192.0.2.1", "dst": "192.0.2.2",
                                    "table_id": 5})).retval == -3  # NO_SUCH_FIB
    assert papi.api.ipsec_sad_entry_del(id=2).retval == -6
    assert [d.entry.sad_id for d in papi.api.ipsec_sa_v5_dump(sa_id=ANY)] == [1]


def test_spd_policies_interfaces_and_sa_locks(papi):
    assert papi.api.ipsec_sad_entry_add_v2(entry=sa_entry(5)).retval == 0
    assert papi.api.ipsec_spd_add_del(is_add=True, spd_id=10).retval == 0
    assert papi.api.ipsec_spd_add_del(is_add=True, spd_id=10).retval == -116
    assert papi.api.ipsec_spd_add_del(is_add=True, spd_id=20).retval == 0
    loop = papi.api.create_loopback().sw_if_index
    add = papi.api.ipsec_interface_add_del_spd
    assert add(is_add=True, sw_if_index=loop, spd_id=99).retval == -11  # no such SPD
    assert add(is_add=True, sw_if_index=loop + 5, spd_id=20).retval == -2
    assert add(is_add=True, sw_if_index=loop, spd_id=20).retval == 0
    assert add(is_add=True, sw_if_index=loop, spd_id=10).retval == -12  # has one
    (bound,) = papi.api.ipsec_spd_interface_dump(spd_index_valid=0)
    assert (bound.spd_index, bound.sw_if_index) == (1, loop)  # SPD 20 is pool index 1

    entry = papi.api.ipsec_spd_entry_add_del_v2
    assert entry(is_add=True, entry=policy(10, policy=PROTECT, sa_id=6)).retval == -11
    assert entry(is_add=True, entry=policy(11)).retval == -11
    assert entry(is_add=True, entry=policy(10, policy=RESOLVE)).retval == -9
    assert entry(is_add=True, entry=policy(10, priority=5, policy=PROTECT, sa_id=5)).retval == 0
    assert entry(is_add=True, entry=policy(10, priority=50)).retval == 0
    assert entry(is_add=True, entry=policy(10, is_outbound=False, policy=DISCARD)).retval == 0
    got = [(d.entry.priority, d.entry.is_outbound, int(d.entry.policy))
           for d in papi.api.ipsec_spd_dump(spd_id=10, sa_id=ANY)]
    assert got == [(50, True, BYPASS), (5, True, PROTECT), (10, False, DISCARD)]
    assert [d.entry.sa_id for d in papi.api.ipsec_spd_dump(spd_id=10, sa_id=5)] == [5]
    assert [(d.spd_id, d.npolicies) for d in papi.api.ipsec_spds_dump()] == [(10, 3), (20, 0)]

    # An SA used by a policy: its delete answers 0, and it stays until its policy goes.
    assert papi.api.ipsec_sad_entry_del(id=5).retval == 0
    assert [d.entry.sad_id for d in papi.api.ipsec_sa_v5_dump(sa_id=ANY)] == [5]
    assert papi.api.ipsec_sad_entry_add_v2(entry=sa_entry(5)).retval == -116
    assert entry(is_add=False, entry=policy(10, priority=5, policy=PROTECT, sa_id=5)).retval == 0
    assert papi.api.ipsec_sa_v5_dump(sa_id=ANY) == []
    assert entry(is_add=False, entry=policy(10, priority=77)).retval == 0  # absent: fine

    assert papi.api.ipsec_spd_add_del(is_add=False, spd_id=20).retval == 0  # leaves loop
    assert papi.api.ipsec_spd_interface_dump(spd_index_valid=0) == []
    assert papi.api.ipsec_spd_add_del(is_add=False, spd_id=20).retval == -6

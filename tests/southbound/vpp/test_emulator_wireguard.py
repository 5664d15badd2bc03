"""wireguard.api in the emulator, as VPP 24.06's wireguard plugin answers, spoken by a vpp_papi
client that knows only VPP 24.06's definitions."""

from __future__ import annotations

import base64

import pytest

from kvmesh.vppemu.curve25519 import public_key

pytestmark = pytest.mark.process

ANY = 0xFFFFFFFF
PRIVATE = bytes(range(1, 33))
PEER_KEY = bytes([7] * 32)


def create(papi, instance=ANY, key=PRIVATE, port=51820, src="192.0.2.1", generate=False):
    return papi.api.wireguard_interface_create(interface={
        "user_instance": instance, "private_key": key, "port": port, "src_ip": src},
        generate_key=generate)


def peer(sw_if_index, key=PEER_KEY, allowed=("10.1.0.0/16", "fd00:1::/64"), **extra):
    return {"public_key": key, "port": 51821, "persistent_keepalive": 25, "table_id": 0,
            "endpoint": "198.51.100.2", "sw_if_index": sw_if_index,
            "n_allowed_ips": len(allowed), "allowed_ips": list(allowed), **extra}


def test_x25519_matches_rfc_7748():
    # RFC 7748 section 6.1: Alice's and Bob's key pairs.
    alice = bytes.fromhex("77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a")
    bob = bytes.fromhex("5dab087e624a8a4b79e17f8b83800ee66f3bb1292618b6fd1c2f8b27ff88e0eb")
    assert public_key(alice).hex() == \
        "8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a"
    assert public_key(bob).hex() == \
        "de9edb7d7b7dc1b4d35b61c2ece435373f8343c85b78674dadfc7e146f882b4f"


def test_interface_lifecycle_and_dump(ref_papi):
    reply = create(ref_papi)
    assert reply.retval == 0
    (details,) = ref_papi.api.wireguard_interface_dump(show_private_key=True, sw_if_index=ANY)
    i = details.interface
    assert (i.sw_if_index, i.user_instance, i.port, str(i.src_ip), bytes(i.private_key)) == \
        (reply.sw_if_index, 0, 51820, "192.0.2.1", PRIVATE)
    assert bytes(i.public_key) == public_key(PRIVATE)
    # The private key only when asked for.
    (hidden,) = ref_papi.api.wireguard_interface_dump(show_private_key=False,
                                                      sw_if_index=reply.sw_if_index)
    assert bytes(hidden.interface.private_key) == bytes(32)
    assert ref_papi.api.wireguard_interface_dump(show_private_key=False, sw_if_index=99) == []
    (iface,) = ref_papi.api.sw_interface_dump(sw_if_index=reply.sw_if_index)
    assert (iface.interface_name, iface.interface_dev_type, iface.link_mtu) == \
        ("wg0", "Wireguard Tunnel", 9000)
    assert str(iface.l2_address) == "00:00:00:00:00:00"  # an L3 tunnel
    # A generated key: some private key, its public key matching.
    generated = create(ref_papi, generate=True, key=bytes(32), port=0)
    (g,) = ref_papi.api.wireguard_interface_dump(show_private_key=True,
                                                 sw_if_index=generated.sw_if_index)
    assert bytes(g.interface.private_key) != bytes(32)
    assert bytes(g.interface.public_key) == public_key(bytes(g.interface.private_key))
    assert g.interface.user_instance == 1
    assert ref_papi.api.wireguard_interface_delete(sw_if_index=reply.sw_if_index).retval == 0
    assert [d.interface.sw_if_index for d in ref_papi.api.wireguard_interface_dump(
        show_private_key=False, sw_if_index=ANY)] == [generated.sw_if_index]
    # Its instance is free again.
    assert create(ref_papi, instance=ANY).retval == 0
    names = [d.interface_name for d in ref_papi.api.sw_interface_dump(sw_if_index=ANY)]
    assert "wg0" in names and "wg1" in names


def test_interface_refusals_are_vpps(ref_papi):
    assert create(ref_papi, instance=5).retval == 0
    assert create(ref_papi, instance=5).retval == -31  # INVALID_REGISTRATION: in use
    assert create(ref_papi, instance=16384).retval == -31  # WG_ITF_MAX_INSTANCE
    assert ref_papi.api.wireguard_interface_delete(sw_if_index=99).retval == -2
    loop = ref_papi.api.create_loopback().sw_if_index
    assert ref_papi.api.wireguard_interface_delete(sw_if_index=loop).retval == -7
    # hw MTU: not an ethernet interface
    wg = ref_papi.api.wireguard_interface_dump(show_private_key=False, sw_if_index=ANY)[0]
    assert ref_papi.api.hw_interface_set_mtu(sw_if_index=wg.interface.sw_if_index,
                                             mtu=1400).retval == -30


def test_peers_added_dumped_and_removed_with_their_interface(ref_papi):
    wg = create(ref_papi).sw_if_index
    reply = ref_papi.api.wireguard_peer_add(peer=peer(wg))
    assert (reply.retval, reply.peer_index) == (0, 0)
    second = ref_papi.api.wireguard_peer_add(peer=peer(wg, key=bytes([8] * 32),
                                                       endpoint="2001:db8::2"))
    assert second.peer_index == 1
    details = ref_papi.api.wireguard_peers_dump(peer_index=ANY)
    p = details[0].peer
    assert (p.peer_index, bytes(p.public_key), p.port, p.persistent_keepalive, str(p.endpoint),
            p.sw_if_index, int(p.flags), [str(a) for a in p.allowed_ips]) == \
        (0, PEER_KEY, 51821, 25, "198.51.100.2", wg, 0, ["10.1.0.0/16", "fd00:1::/64"])
    assert str(details[1].peer.endpoint) == "2001:db8::2"
    (one,) = ref_papi.api.wireguard_peers_dump(peer_index=1)
    assert one.peer.peer_index == 1
    assert ref_papi.api.wireguard_peers_dump(peer_index=7) == []
    assert ref_papi.api.wireguard_peer_remove(peer_index=0).retval == 0
    assert [d.peer.peer_index for d in ref_papi.api.wireguard_peers_dump(peer_index=ANY)] == [1]
    # The lowest free index is taken again.
    assert ref_papi.api.wireguard_peer_add(peer=peer(wg)).peer_index == 0
    assert ref_papi.api.wireguard_interface_delete(sw_if_index=wg).retval == 0
    assert ref_papi.api.wireguard_peers_dump(peer_index=ANY) == []


def test_peer_refusals_are_vpps(ref_papi):
    wg = create(ref_papi).sw_if_index
    loop = ref_papi.api.create_loopback().sw_if_index
    add = ref_papi.api.wireguard_peer_add
    assert add(peer=peer(99)).retval == -2  # VALIDATE_SW_IF_INDEX
    assert add(peer=peer(wg, allowed=())).retval == -7  # no allowed IPs: INVALID_VALUE
    assert add(peer=peer(loop)).retval == -2  # not a WireGuard interface
    assert add(peer=peer(wg)).retval == 0
    other = create(ref_papi, key=bytes([9] * 32), port=51830).sw_if_index
    assert add(peer=peer(other)).retval == -116  # a public key is unique across interfaces
    assert ref_papi.api.wireguard_peer_remove(peer_index=5).retval == -6  # NO_SUCH_ENTRY
    assert len(ref_papi.api.wireguard_peers_dump(peer_index=ANY)) == 1


def test_key_encoding_is_wireguards():
    """What `wg genkey | wg pubkey` shows is base64 of these 32 bytes (the model's form)."""
    assert len(base64.b64encode(public_key(PRIVATE))) == 44

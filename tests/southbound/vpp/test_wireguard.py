"""WireGuard interfaces (`vpp/interface`, type wireguard) and `vpp/wireguard/peer/<name>` through
the scheduler, the VPP southbound and vpp_papi, against the emulator; private keys never shown."""

from __future__ import annotations

import base64
import json
import logging
from typing import Any

import pytest

from kvmesh.agent.jsonable import to_jsonable
from kvmesh.vppemu.curve25519 import public_key
from scheduler import TransactionError, ValueState
from tests.southbound.vpp.plugin_helpers import calls
from tests.southbound.vpp.test_ipsec import rest_views

pytestmark = pytest.mark.process

CONFIGURED, PENDING, OBTAINED, INVALID = (ValueState.CONFIGURED, ValueState.PENDING,
                                          ValueState.OBTAINED, ValueState.INVALID)
ANY = 0xFFFFFFFF
PRIVATE_BYTES = bytes(range(100, 132))
PRIVATE = base64.b64encode(PRIVATE_BYTES).decode()
ROTATED = base64.b64encode(bytes(range(200, 232))).decode()
PEER_KEY = base64.b64encode(bytes([7] * 32)).decode()
WG: dict[str, Any] = {"type": "wireguard", "addresses": ["10.9.0.1/24"], "wireguard": {
    "private_key": PRIVATE, "port": 51820, "src_addr": "192.0.2.1"}}
PEER: dict[str, Any] = {"interface": "wg0", "public_key": PEER_KEY, "endpoint": "198.51.100.2",
                        "port": 51821, "allowed_ips": ["10.2.0.0/16"], "persistent_keepalive": 25}
ADD, REMOVE = "wireguard_peer_add", "wireguard_peer_remove"


def vpp_interfaces(vpp) -> list:
    return [d.interface for d in vpp.papi.api.wireguard_interface_dump(show_private_key=True,
                                                                       sw_if_index=ANY)]


def vpp_peers(vpp) -> list:
    return [d.peer for d in vpp.papi.api.wireguard_peers_dump(peer_index=ANY)]


def test_an_interface_and_its_peer_applied_read_back_and_removed(vpp):
    vpp.commit({"vpp/interface/wg0": WG, "vpp/wireguard/peer/site-b": PEER})
    assert vpp.state("vpp/interface/wg0") is CONFIGURED
    assert vpp.state("vpp/wireguard/peer/site-b") is CONFIGURED
    (i,) = vpp_interfaces(vpp)
    assert (bytes(i.private_key), i.port, str(i.src_ip), i.sw_if_index) == \
        (PRIVATE_BYTES, 51820, "192.0.2.1", vpp.sw_if_index("wg0"))
    assert bytes(i.public_key) == public_key(PRIVATE_BYTES)
    assert vpp.vpp_addresses(i.sw_if_index) == ["10.9.0.1/24"]
    (p,) = vpp_peers(vpp)
    assert (base64.b64encode(bytes(p.public_key)).decode(), str(p.endpoint), p.port,
            p.persistent_keepalive, [str(a) for a in p.allowed_ips], p.sw_if_index) == \
        (PEER_KEY, "198.51.100.2", 51821, 25, ["10.2.0.0/16"], i.sw_if_index)
    # Read back exactly (the private key included): a downstream resync changes nothing.
    before = vpp.control.counters()
    vpp.scheduler.resync({}, kind="downstream")
    assert calls(vpp, before, "wireguard_interface_create", "wireguard_interface_delete", ADD,
                 REMOVE) == dict.fromkeys(("wireguard_interface_create",
                                           "wireguard_interface_delete", ADD, REMOVE), 0)
    # Removed: the peer first, then its interface.
    vpp.commit({"vpp/interface/wg0": None, "vpp/wireguard/peer/site-b": None})
    assert vpp_interfaces(vpp) == [] and vpp_peers(vpp) == []
    assert [d.interface_name for d in vpp.papi.api.sw_interface_dump()] == ["local0"]


def test_a_peer_waits_for_its_interface_and_a_change_recreates_it(vpp):
    vpp.commit({"vpp/wireguard/peer/site-b": PEER})
    assert vpp.state("vpp/wireguard/peer/site-b") is PENDING
    vpp.commit({"vpp/interface/wg0": WG})
    assert vpp.state("vpp/wireguard/peer/site-b") is CONFIGURED
    # VPP cannot change a peer: a new endpoint is a remove and an add.
    before = vpp.control.counters()
    vpp.commit({"vpp/wireguard/peer/site-b": {**PEER, "endpoint": "198.51.100.9"}})
    assert calls(vpp, before, ADD, REMOVE) == {ADD: 1, REMOVE: 1}
    (p,) = vpp_peers(vpp)
    assert str(p.endpoint) == "198.51.100.9"
    # A rotated private key re-creates the interface, its peer removed and put back around it.
    before = vpp.control.counters()
    vpp.commit({"vpp/interface/wg0": {**WG, "wireguard": {**WG["wireguard"],
                                                           "private_key": ROTATED}}})
    assert calls(vpp, before, "wireguard_interface_delete", "wireguard_interface_create", ADD,
                 REMOVE) == {"wireguard_interface_delete": 1, "wireguard_interface_create": 1,
                             ADD: 1, REMOVE: 1}
    (i,) = vpp_interfaces(vpp)
    assert base64.b64encode(bytes(i.private_key)).decode() == ROTATED
    (p,) = vpp_peers(vpp)
    assert p.sw_if_index == i.sw_if_index
    assert vpp.state("vpp/wireguard/peer/site-b") is CONFIGURED


def test_two_peers_with_one_key_are_invalid_together(vpp):
    with pytest.raises(TransactionError):
        vpp.commit({"vpp/interface/wg0": WG, "vpp/wireguard/peer/a": PEER,
                    "vpp/wireguard/peer/b": {**PEER, "endpoint": "198.51.100.3"}})
    # The scheduler alone checks each value; the conflict is found by the agent's validation
    # (registry.conflicts), and VPP refuses the second as ENTRY_ALREADY_EXISTS.
    states = {vpp.state(k) for k in ("vpp/wireguard/peer/a", "vpp/wireguard/peer/b")}
    assert states == {CONFIGURED, ValueState.FAILED}
    assert len(vpp_peers(vpp)) == 1


def test_peers_and_interfaces_kvmesh_did_not_create_are_obtained_and_kept(vpp):
    vpp.commit({"vpp/interface/wg0": WG, "vpp/wireguard/peer/site-b": PEER})
    api = vpp.papi.api
    foreign = api.wireguard_interface_create(generate_key=True, interface={
        "user_instance": ANY, "port": 51900, "src_ip": "192.0.2.9"}).sw_if_index
    other_key = bytes([9] * 32)
    added = api.wireguard_peer_add(peer={
        "public_key": other_key, "port": 1, "endpoint": "203.0.113.1", "sw_if_index": foreign,
        "n_allowed_ips": 1, "allowed_ips": ["10.3.0.0/16"]})
    on_ours = api.wireguard_peer_add(peer={
        "public_key": bytes([10] * 32), "port": 2, "endpoint": "203.0.113.2",
        "sw_if_index": vpp.sw_if_index("wg0"), "n_allowed_ips": 1,
        "allowed_ips": ["10.4.0.0/16"]})
    desired = {"vpp/interface/wg0": WG, "vpp/wireguard/peer/site-b": PEER}
    vpp.scheduler.resync(desired, kind="full")
    assert vpp.state(f"vpp/wireguard/peer/vpp-{added.peer_index}") is OBTAINED
    assert vpp.state(f"vpp/wireguard/peer/vpp-{on_ours.peer_index}") is OBTAINED
    assert vpp.state("vpp/wireguard/peer/site-b") is CONFIGURED
    vpp.scheduler.resync(desired, kind="full")
    assert len(vpp_peers(vpp)) == 3 and len(vpp_interfaces(vpp)) == 2
    # Removing kvmesh's peer removes that one only.
    vpp.commit({"vpp/wireguard/peer/site-b": None})
    assert sorted(p.peer_index for p in vpp_peers(vpp)) == \
        sorted([added.peer_index, on_ours.peer_index])


def test_private_keys_are_never_shown(vpp, caplog):
    caplog.set_level(logging.DEBUG)
    vpp.commit({"vpp/interface/wg0": WG, "vpp/wireguard/peer/site-b": PEER})
    rotated = {**WG, "wireguard": {**WG["wireguard"], "private_key": ROTATED}}
    vpp.commit({"vpp/interface/wg0": rotated})
    bad = PRIVATE[:-2] + "B="  # not canonical base64: INVALID, and not quoted
    with pytest.raises(TransactionError) as failed:
        vpp.commit({"vpp/interface/wg1": {**WG, "wireguard": {**WG["wireguard"],
                                                               "private_key": bad}}})
    assert bad not in str(failed.value)
    status = vpp.scheduler.get_value_status("vpp/interface/wg1")
    assert status.state is INVALID and "44 characters of base64" in status.error_message
    with pytest.raises(TransactionError):  # still INVALID; the read-back is shown the same way
        vpp.scheduler.resync({}, kind="downstream")
    sched = vpp.scheduler
    shown = [
        json.dumps(to_jsonable(sched.transaction_history())),
        "".join(record.text() for record in sched.transaction_history()),
        json.dumps(to_jsonable(sched.key_timeline("vpp/interface/wg0"))),
        json.dumps(to_jsonable(sched.graph_snapshot())),
        json.dumps(to_jsonable([sched.dump(view=view) for view in ("cached", "NB", "SB")])),
        json.dumps(to_jsonable(sched.get_value_statuses())),
        caplog.text,
        *rest_views(sched),
    ]
    secrets = [PRIVATE, ROTATED, bad, PRIVATE_BYTES.hex(), repr(PRIVATE_BYTES)]
    for text in shown:
        assert not [s for s in secrets if s in text]
    assert "<redacted>" in shown[0] and "<redacted>" in shown[4]
    assert PEER_KEY in shown[0]  # a public key is no secret
    # ... while VPP has the real key.
    (i,) = vpp_interfaces(vpp)
    assert base64.b64encode(bytes(i.private_key)).decode() == ROTATED


def test_a_peer_of_an_interface_of_another_type_fails_saying_so(vpp):
    with pytest.raises(TransactionError):
        vpp.commit({"vpp/interface/wg0": {"type": "loopback"}, "vpp/wireguard/peer/b": PEER})
    status = vpp.scheduler.get_value_status("vpp/wireguard/peer/b")
    assert status.state is ValueState.FAILED
    assert "of type loopback, not wireguard" in status.error_message
    assert vpp_peers(vpp) == []

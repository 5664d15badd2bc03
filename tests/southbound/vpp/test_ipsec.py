"""`vpp/ipsec/sa/<id>` and `vpp/ipsec/spd/<id>` through the scheduler, the VPP southbound and
vpp_papi, against the emulator; key material never shown."""

from __future__ import annotations

import json
import logging
from types import SimpleNamespace

import pytest

from kvmesh.agent.counters import AgentCounters
from kvmesh.agent.http_api import dispatch
from kvmesh.agent.jsonable import to_jsonable
from kvmesh.agent.rest_backend import RestBackend
from scheduler import InvalidValueError, TransactionError, ValueState
from southbound.vpp.models.ipsec_sa import check_sa
from tests.southbound.vpp.plugin_helpers import calls

pytestmark = pytest.mark.process

CONFIGURED, PENDING, OBTAINED = ValueState.CONFIGURED, ValueState.PENDING, ValueState.OBTAINED
ANY = 0xFFFFFFFF
LOOP = {"type": "loopback"}
CIPHER = "c1c2c3c4c5c6c7c8c9cacbcccdcecfd0"  # 16 bytes: aes-gcm-128
HMAC = "a1a2a3a4a5a6a7a8a9aaabacadaeafb0b1b2b3b4"
OUT = {"spi": 1001, "crypto_alg": "aes-gcm-128", "crypto_key": CIPHER, "salt": 7,
       "tunnel": {"src": "192.0.2.1", "dst": "192.0.2.2"}}
IN = {"spi": 1002, "crypto_alg": "aes-cbc-128", "crypto_key": CIPHER.upper(),
      "integ_alg": "sha-256-128", "integ_key": "0x" + HMAC, "inbound": True,
      "anti_replay": True, "anti_replay_window": 128, "udp_encap": True}
POLICIES: list[dict] = [
    {"priority": 10, "direction": "outbound", "action": "protect", "sa": 10,
     "remote_addresses": ["10.1.0.0", "10.1.0.255"], "protocol": "tcp",
     "remote_ports": [443, 443]},
    {"priority": 10, "direction": "inbound", "action": "protect", "sa": 20},
    {"priority": 0, "direction": "inbound", "action": "bypass", "protocol": "esp"}]
SPD = {"policies": POLICIES, "interfaces": ["up"]}


def sas(vpp) -> dict:
    return {d.entry.sad_id: d.entry for d in vpp.papi.api.ipsec_sa_v5_dump(sa_id=ANY)}


def policies(vpp, spd_id: int) -> list:
    return [(d.entry.priority, d.entry.is_outbound, int(d.entry.policy), d.entry.sa_id,
             d.entry.protocol) for d in vpp.papi.api.ipsec_spd_dump(spd_id=spd_id, sa_id=ANY)]


def test_sas_and_an_spd_applied_read_back_and_removed(vpp):
    vpp.commit({"vpp/interface/up": LOOP, "vpp/ipsec/sa/10": OUT, "vpp/ipsec/sa/20": IN,
                "vpp/ipsec/spd/1": SPD})
    found = sas(vpp)
    assert bytes(found[10].crypto_key.data[:16]).hex() == CIPHER
    assert (str(found[10].tunnel.dst), int(found[10].flags), found[10].salt) == \
        ("192.0.2.2", 4, 7)
    assert bytes(found[20].integrity_key.data[:found[20].integrity_key.length]).hex() == HMAC
    assert (int(found[20].flags), found[20].anti_replay_window_size,
            found[20].udp_dst_port) == (2 | 16 | 64, 128, 4500)
    assert policies(vpp, 1) == [(10, True, 3, 10, 6), (10, False, 3, 20, 0),
                                (0, False, 0, 0, 50)]
    (bound,) = vpp.papi.api.ipsec_spd_interface_dump(spd_index_valid=0)
    assert bound.sw_if_index == vpp.sw_if_index("up")
    for key in ("vpp/ipsec/sa/10", "vpp/ipsec/sa/20", "vpp/ipsec/spd/1",
                "vpp/ipsec/spd/1/interface/up"):
        assert vpp.state(key) is CONFIGURED, key
    # Read back exactly: a downstream resync changes nothing.
    before = vpp.control.counters()
    vpp.scheduler.resync({}, kind="downstream")
    assert calls(vpp, before, "ipsec_sad_entry_add_v2", "ipsec_sad_entry_del",
                 "ipsec_spd_entry_add_del_v2", "ipsec_interface_add_del_spd",
                 "ipsec_spd_add_del") == dict.fromkeys(
        ("ipsec_sad_entry_add_v2", "ipsec_sad_entry_del", "ipsec_spd_entry_add_del_v2",
         "ipsec_interface_add_del_spd", "ipsec_spd_add_del"), 0)
    # Removed in the order VPP needs: policies before their SAs (an SA a policy holds stays).
    vpp.commit({"vpp/ipsec/sa/10": None, "vpp/ipsec/sa/20": None, "vpp/ipsec/spd/1": None})
    assert sas(vpp) == {}
    assert vpp.control.state()["ipsec"] == {"sas": [], "spds": [], "interfaces": {},
                                            "protections": []}


def test_policies_and_interfaces_wait_for_their_sa_and_interface(vpp):
    vpp.commit({"vpp/ipsec/spd/1": SPD})
    assert vpp.state("vpp/ipsec/spd/1") is CONFIGURED
    derived = [s.key for s in vpp.scheduler.get_value_statuses()
               if s.key.startswith("vpp/ipsec/spd/1/") and s.state is PENDING]
    assert len(derived) == 3  # two PROTECT policies and the interface
    assert policies(vpp, 1) == [(0, False, 0, 0, 50)]
    vpp.commit({"vpp/ipsec/sa/10": OUT, "vpp/ipsec/sa/20": IN, "vpp/interface/up": LOOP})
    assert len(policies(vpp, 1)) == 3
    assert [s.key for s in vpp.scheduler.get_value_statuses() if s.state is PENDING] == []


def test_a_new_key_recreates_the_sa_around_its_policies(vpp):
    vpp.commit({"vpp/ipsec/sa/10": OUT, "vpp/ipsec/sa/20": IN,
                "vpp/ipsec/spd/1": {**SPD, "interfaces": []}})
    rotated = "d" * 32
    before = vpp.control.counters()
    vpp.commit({"vpp/ipsec/sa/10": {**OUT, "crypto_key": rotated}})
    assert calls(vpp, before, "ipsec_sad_entry_del", "ipsec_sad_entry_add_v2",
                 "ipsec_spd_entry_add_del_v2") == {
        "ipsec_sad_entry_del": 1, "ipsec_sad_entry_add_v2": 1, "ipsec_spd_entry_add_del_v2": 2}
    assert bytes(sas(vpp)[10].crypto_key.data[:16]).hex() == rotated
    assert len(policies(vpp, 1)) == 3
    # Editing one policy touches that policy only.
    before = vpp.control.counters()
    edited = {**SPD, "interfaces": [], "policies": [*POLICIES[:2], {
        "priority": 1, "direction": "inbound", "action": "bypass", "protocol": "esp"}]}
    vpp.commit({"vpp/ipsec/spd/1": edited})
    assert calls(vpp, before, "ipsec_spd_entry_add_del_v2", "ipsec_spd_add_del") == {
        "ipsec_spd_entry_add_del_v2": 2, "ipsec_spd_add_del": 0}


def test_an_spds_interfaces_read_back_across_a_hole_in_vpps_pool(vpp):
    """VPP shows an interface's SPD by pool index; with SPD 1 (index 0) gone, SPD 3 keeps index
    2 while it is second in the dump."""
    vpp.commit({"vpp/interface/up": LOOP, "vpp/ipsec/spd/1": {}, "vpp/ipsec/spd/2": {},
                "vpp/ipsec/spd/3": {}})
    vpp.commit({"vpp/ipsec/spd/1": None, "vpp/ipsec/spd/3": {"interfaces": ["up"]}})
    (bound,) = vpp.papi.api.ipsec_spd_interface_dump(spd_index_valid=0)
    assert bound.spd_index == 2
    before = vpp.control.counters()
    vpp.scheduler.resync({}, kind="downstream")
    assert calls(vpp, before, "ipsec_interface_add_del_spd") == {
        "ipsec_interface_add_del_spd": 0}
    assert vpp.state("vpp/ipsec/spd/3/interface/up") is CONFIGURED


def test_sas_and_spds_kvmesh_did_not_create_are_obtained_and_kept(vpp):
    vpp.papi.api.ipsec_sad_entry_add_v2(entry={
        "sad_id": 99, "spi": 9, "protocol": 50, "tunnel": {"src": "0.0.0.0", "dst": "0.0.0.0"}})
    vpp.papi.api.ipsec_spd_add_del(is_add=True, spd_id=9)
    vpp.commit({"vpp/ipsec/sa/10": OUT})
    vpp.scheduler.resync({"vpp/ipsec/sa/10": OUT}, kind="full")
    assert vpp.state("vpp/ipsec/sa/99") is OBTAINED
    assert vpp.state("vpp/ipsec/spd/9") is OBTAINED
    vpp.scheduler.resync({}, kind="full")
    assert sorted(sas(vpp)) == [99]
    assert [d.spd_id for d in vpp.papi.api.ipsec_spds_dump()] == [9]


def rest_views(sched) -> list[str]:
    """What the agent's REST API (and so `kvmesh history`, `kvmesh values`) answers."""
    northbound = SimpleNamespace(config=SimpleNamespace(node="n1"))  # only its node's name
    backend = RestBackend(sched, AgentCounters(), northbound, None, None)  # type: ignore[arg-type]
    targets = ["/scheduler/txn-history", "/scheduler/txn-history?format=text",
               "/scheduler/status", "/scheduler/graph-snapshot",
               "/scheduler/key-timeline?key=vpp/ipsec/sa/10",
               *(f"/scheduler/dump?view={view}" for view in ("cached", "NB", "SB"))]
    answers = [dispatch(backend, "GET", target) for target in targets]
    assert [a.status for a in answers] == [200] * len(targets)
    return [a.body.decode() for a in answers]


def test_key_material_is_never_shown(vpp, caplog):
    caplog.set_level(logging.DEBUG)
    secrets = {CIPHER, CIPHER.upper(), HMAC}
    vpp.commit({"vpp/interface/up": LOOP, "vpp/ipsec/sa/10": OUT, "vpp/ipsec/sa/20": IN,
                "vpp/ipsec/spd/1": SPD})
    vpp.commit({"vpp/ipsec/sa/10": {**OUT, "crypto_key": "e" * 32}})
    secrets.add("e" * 32)
    # A bad key: INVALID, and the error names the problem, not the key.
    bad = "f0" * 15
    secrets.add(bad)
    with pytest.raises(TransactionError) as failed:
        vpp.commit({"vpp/ipsec/sa/30": {**OUT, "crypto_key": bad}})
    assert bad not in str(failed.value)
    with pytest.raises(TransactionError):  # still INVALID
        vpp.scheduler.resync({}, kind="downstream")
    status = vpp.scheduler.get_value_status("vpp/ipsec/sa/30")
    assert status.state is ValueState.INVALID and "32 hex digits" in status.error_message
    sched = vpp.scheduler
    shown = [
        json.dumps(to_jsonable(sched.transaction_history())),
        "".join(record.text() for record in sched.transaction_history()),
        json.dumps(to_jsonable(sched.key_timeline("vpp/ipsec/sa/10"))),
        json.dumps(to_jsonable(sched.graph_snapshot())),
        json.dumps(to_jsonable([sched.dump(view=view) for view in ("cached", "NB", "SB")])),
        json.dumps(to_jsonable(sched.get_value_statuses())),
        caplog.text,
        *rest_views(sched),
    ]
    for text in shown:
        assert not [s for s in secrets if s in text or s.lower() in text]
    assert "<redacted>" in shown[0] and "<redacted>" in shown[4]
    # ... while the values themselves are intact for the descriptors and the comparison.
    assert sas(vpp)[10].crypto_key.length == 16


def test_validation_uses_vpps_limits_and_never_quotes_a_key():
    def problems(value: dict) -> str:
        with pytest.raises(InvalidValueError) as info:
            check_sa("vpp/ipsec/sa/1", value)
        return str(info.value)

    assert "hex digits, an even" in problems({**OUT, "crypto_key": "ab" * 8 + "zz" * 8})
    assert "aes-gcm-128" in problems({**OUT, "crypto_key": "ab" * 17})
    assert "hex digits" in problems({**OUT, "crypto_key": 12345})
    assert "integrity" in problems({"spi": 1, "protocol": "ah"})
    assert "udp_encap" in problems({**OUT, "udp_src_port": 5000})
    assert "family" in problems({**OUT, "tunnel": {"src": "192.0.2.1", "dst": "2001:db8::1"}})
    for text in (problems({**OUT, "crypto_key": "ab" * 17}),
                 problems({**OUT, "crypto_key": "zz" * 16})):
        assert "abab" not in text and "zzzz" not in text
    with pytest.raises(InvalidValueError):
        check_sa("vpp/ipsec/sa/01", OUT)
    from southbound.vpp.models.ipsec_spd import check_spd

    with pytest.raises(InvalidValueError, match="twice"):
        check_spd("vpp/ipsec/spd/1", {"policies": [POLICIES[2]] * 2})
    with pytest.raises(InvalidValueError, match="protect"):
        check_spd("vpp/ipsec/spd/1", {"policies": [{"direction": "inbound",
                                                    "action": "bypass", "sa": 3}]})
    with pytest.raises(InvalidValueError, match="malformed"):
        check_spd("vpp/ipsec/spd/0", {})

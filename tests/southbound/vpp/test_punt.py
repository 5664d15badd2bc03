"""`vpp/punt/l4/...` and `vpp/punt/exception/<reason>` through the scheduler, the VPP
southbound and vpp_papi, against the emulator."""

from __future__ import annotations

import pytest

from scheduler import TransactionError, ValueState
from tests.southbound.vpp.plugin_helpers import calls

pytestmark = pytest.mark.process

CONFIGURED, OBTAINED, FAILED = ValueState.CONFIGURED, ValueState.OBTAINED, ValueState.FAILED
L4, EXCEPTION = 0, 2
REGISTER = "punt_socket_register"


def registered(vpp):
    l4 = [(int(d.punt.punt.l4.af), int(d.punt.punt.l4.protocol), d.punt.punt.l4.port,
           d.pathname) for d in vpp.papi.api.punt_socket_dump(type=L4)]
    exceptions = [(d.punt.punt.exception.id, d.pathname)
                  for d in vpp.papi.api.punt_socket_dump(type=EXCEPTION)]
    return l4, exceptions


STATE = {"vpp/punt/l4/ipv4/udp/67": {"socket": "/run/dhcp/v4.sock"},
         "vpp/punt/l4/ipv6/udp/547": {"socket": "/run/dhcp/v6.sock"},
         "vpp/punt/exception/ipsec4-no-such-tunnel": {"socket": "/run/ike/punt.sock"}}


def test_punts_applied_repointed_read_back_and_removed(vpp):
    vpp.commit(STATE)
    assert {k: vpp.state(k) for k in STATE} == dict.fromkeys(STATE, CONFIGURED)
    assert registered(vpp) == ([(0, 17, 67, "/run/dhcp/v4.sock"),
                                (1, 17, 547, "/run/dhcp/v6.sock")],
                               [(2, "/run/ike/punt.sock")])
    # A new socket: re-pointed in place.
    before = vpp.control.counters()
    vpp.commit({"vpp/punt/l4/ipv4/udp/67": {"socket": "/run/dhcp/other.sock"}})
    assert calls(vpp, before, REGISTER, "punt_socket_deregister") == {
        REGISTER: 1, "punt_socket_deregister": 0}
    assert registered(vpp)[0][0] == (0, 17, 67, "/run/dhcp/other.sock")
    # Read back exactly: a downstream resync changes nothing.
    before = vpp.control.counters()
    vpp.scheduler.resync({}, kind="downstream")
    assert calls(vpp, before, REGISTER, "punt_socket_deregister") == {
        REGISTER: 0, "punt_socket_deregister": 0}
    vpp.commit(dict.fromkeys(STATE))
    assert registered(vpp) == ([], [])


def test_an_unknown_reason_fails_with_the_names_vpp_has(vpp):
    with pytest.raises(TransactionError):
        vpp.commit({"vpp/punt/exception/no-such-reason": {"socket": "/run/x.sock"}})
    status = vpp.scheduler.get_value_status("vpp/punt/exception/no-such-reason")
    assert status.state is FAILED
    assert "ipsec6-spi-o-udp-0" in status.error_message
    assert registered(vpp) == ([], [])


def test_vpps_refusal_of_its_own_socket_is_a_failure(vpp):
    with pytest.raises(TransactionError):
        vpp.commit({"vpp/punt/l4/ipv4/udp/53": {"socket": "/run/vpp/punt.sock"}})
    status = vpp.scheduler.get_value_status("vpp/punt/l4/ipv4/udp/53")
    assert status.state is FAILED and "(-1)" in status.error_message


def test_punts_kvmesh_did_not_register_are_obtained_and_kept(vpp):
    api = vpp.papi.api
    api.punt_socket_register(header_version=1, pathname="/run/app/a.sock", punt={
        "type": L4, "punt": {"l4": {"af": 0, "protocol": 17, "port": 4000}}})
    api.punt_socket_register(header_version=1, pathname="/run/app/b.sock", punt={
        "type": EXCEPTION, "punt": {"exception": {"id": 4}}})
    api.punt_socket_register(header_version=1, pathname="/run/app/nd.sock", punt={
        "type": L4, "punt": {"l4": {"af": 1, "protocol": 58, "port": 135}}})
    vpp.scheduler.resync({}, kind="full")
    assert vpp.state("vpp/punt/l4/ipv4/udp/4000") is OBTAINED
    assert vpp.state("vpp/punt/exception/ipsec6-spi-o-udp-0") is OBTAINED
    vpp.scheduler.resync({}, kind="full")
    l4, exceptions = registered(vpp)
    assert len(l4) == 2 and exceptions == [(4, "/run/app/b.sock")]

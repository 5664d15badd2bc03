"""punt.api's socket registrations in the emulator, as VPP 24.06's punt code answers
(src/vnet/ip/punt_api.c, punt.c), spoken by a vpp_papi client that knows only VPP 24.06's
definitions."""

from __future__ import annotations

from typing import Any

import pytest
from vpp_papi.vpp_papi import VPPIOError

pytestmark = pytest.mark.process

L4, IP_PROTO, EXCEPTION = 0, 1, 2
UDP, TCP, ICMP6 = 17, 6, 58
SERVER = "/run/vpp/punt.sock"


def l4(af=0, protocol=UDP, port=5000):
    return {"type": L4, "punt": {"l4": {"af": af, "protocol": protocol, "port": port}}}


def exception(reason):
    return {"type": EXCEPTION, "punt": {"exception": {"id": reason}}}


def registered(papi, punt_type):
    result: list[tuple[Any, ...]] = []
    for d in papi.api.punt_socket_dump(type=punt_type):
        if punt_type == L4:
            u = d.punt.punt.l4
            result.append((int(u.af), int(u.protocol), u.port, d.pathname))
        else:
            result.append((d.punt.punt.exception.id, d.pathname))
    return result


def test_reasons_are_vpp_24_06s(ref_papi):
    reasons = [(d.reason.id, d.reason.name) for d in ref_papi.api.punt_reason_dump(
        reason={"name": ""})]
    assert reasons == [(1, "ipsec4-spi-o-udp-0"), (2, "ipsec4-no-such-tunnel"),
                       (3, "ipsec6-no-such-tunnel"), (4, "ipsec6-spi-o-udp-0")]
    (one,) = ref_papi.api.punt_reason_dump(reason={"name": "ipsec6-no-such-tunnel"})
    assert one.reason.id == 3
    assert ref_papi.api.punt_reason_dump(reason={"name": "no-such-reason"}) == []


def test_registrations_made_repointed_dumped_and_removed(ref_papi):
    register = ref_papi.api.punt_socket_register
    reply = register(header_version=1, punt=l4(port=5000), pathname="/run/app/a.sock")
    assert (reply.retval, reply.pathname) == (0, SERVER)
    assert register(header_version=1, punt=l4(af=1, port=5000),
                    pathname="/run/app/b.sock").retval == 0
    assert register(header_version=1, punt=l4(af=1, protocol=ICMP6, port=135),
                    pathname="/run/app/nd.sock").retval == 0
    assert register(header_version=1, punt=exception(3), pathname="/run/app/x.sock").retval == 0
    assert registered(ref_papi, L4) == [(0, UDP, 5000, "/run/app/a.sock"),
                                        (1, ICMP6, 135, "/run/app/nd.sock"),
                                        (1, UDP, 5000, "/run/app/b.sock")]
    assert registered(ref_papi, EXCEPTION) == [(3, "/run/app/x.sock")]
    # The same punt again re-points it.
    assert register(header_version=1, punt=l4(port=5000), pathname="/run/app/c.sock").retval == 0
    assert registered(ref_papi, L4)[0] == (0, UDP, 5000, "/run/app/c.sock")
    dereg = ref_papi.api.punt_socket_deregister
    assert dereg(punt=l4(port=5000)).retval == 0
    assert dereg(punt=exception(3)).retval == 0
    assert dereg(punt=exception(3)).retval == 0  # nothing registered: still 0
    assert registered(ref_papi, EXCEPTION) == []
    assert [r[2] for r in registered(ref_papi, L4)] == [135, 5000]
    assert ref_papi.api.punt_socket_dump(type=7) == []  # an unknown type: no details


def test_refusals_are_vpps(ref_papi):
    register = ref_papi.api.punt_socket_register
    path = "/run/app/a.sock"
    assert register(header_version=2, punt=l4(), pathname=path).retval == -1
    assert register(header_version=1, punt=l4(), pathname=SERVER).retval == -1
    assert register(header_version=1, punt=l4(port=0xFFFF), pathname=path).retval == -1
    assert register(header_version=1, punt=l4(protocol=TCP), pathname=path).retval == -1
    assert register(header_version=1, punt=l4(protocol=ICMP6), pathname=path).retval == -1
    assert registered(ref_papi, L4) == []
    dereg = ref_papi.api.punt_socket_deregister
    assert dereg(punt=l4(af=2)).retval == -97  # INVALID_ADDRESS_FAMILY
    assert dereg(punt=l4(protocol=99)).retval == -153  # INVALID_PROTOCOL (not in protocols.def)
    assert dereg(punt=exception(5)).retval == -1  # no such reason
    assert dereg(punt={"type": 3, "punt": {}}).retval == -1


def test_an_undecodable_registration_gets_no_reply(emulator, ref_papi):
    """VPP's handler returns without replying when the punt does not decode."""
    before = emulator.control.counters()
    with pytest.raises(VPPIOError, match="read failed"):  # nothing will come: wait briefly
        ref_papi.api.punt_socket_register(header_version=1, punt=exception(9),
                                          pathname="/run/app/a.sock", _timeout=0.5)
    after = emulator.control.counters()
    assert after.get("unanswered.punt_socket_register", 0) == \
        before.get("unanswered.punt_socket_register", 0) + 1

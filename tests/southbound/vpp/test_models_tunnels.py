"""GRE and IPIP tunnel interfaces (`vpp/interface/<name>` of type gre or ipip) against the
emulator through the real vpp_papi client."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler import TransactionError, ValueState
from tests.southbound.vpp.test_models_l2l3 import counted, restart_and_resync, sent, writes

pytestmark = pytest.mark.process

ANY = 0xFFFFFFFF
GRE = "vpp/interface/gre-a"
IPIP = "vpp/interface/ipip-a"
VRF = "vpp/vrf/ipv4/20"
GRE_VALUE: dict[str, Any] = {
    "type": "gre", "gre": {"src": "192.0.2.1", "dst": "192.0.2.2", "outer_vrf": 20},
    "addresses": ["10.20.0.1/30"]}
IPIP_VALUE = {"type": "ipip", "ipip": {"src": "2001:db8::1", "dst": "2001:db8::2",
                                       "instance": 3}}


def test_tunnels_wait_for_their_table_apply_read_back_and_go(vpp):
    vpp.commit({GRE: GRE_VALUE, IPIP: IPIP_VALUE})
    assert vpp.state(GRE) == ValueState.PENDING  # its outer table first
    assert vpp.state(IPIP) == ValueState.CONFIGURED
    vpp.commit({VRF: {}})
    assert vpp.state(GRE) == ValueState.CONFIGURED
    (gre,) = vpp.papi.api.gre_tunnel_dump(sw_if_index=ANY)
    assert (str(gre.tunnel.src), str(gre.tunnel.dst), gre.tunnel.outer_table_id) == \
        ("192.0.2.1", "192.0.2.2", 20)
    (ipip,) = vpp.papi.api.ipip_tunnel_dump(sw_if_index=ANY)
    assert (ipip.tunnel.instance, str(ipip.tunnel.dst)) == (3, "2001:db8::2")
    before = counted(vpp)
    vpp.scheduler.resync({}, kind="downstream")
    assert writes(sent(vpp, before)) == {}
    # A new destination is a new tunnel.
    vpp.commit({GRE: {**GRE_VALUE, "gre": {**GRE_VALUE["gre"], "dst": "192.0.2.3"}}})
    (gre,) = vpp.papi.api.gre_tunnel_dump(sw_if_index=ANY)
    assert str(gre.tunnel.dst) == "192.0.2.3"
    vpp.commit({GRE: None, IPIP: None, VRF: None})
    assert vpp.papi.api.gre_tunnel_dump(sw_if_index=ANY) == []
    assert vpp.papi.api.ipip_tunnel_dump(sw_if_index=ANY) == []


def test_tunnel_model_rules(vpp):
    with pytest.raises(TransactionError):
        vpp.commit({
            GRE: {"type": "gre", "gre": {"src": "192.0.2.1", "dst": "fd00::2"}},
            IPIP: {"type": "ipip",
                   "ipip": {"src": "192.0.2.1", "dst": "192.0.2.9", "mode": "mp"}},
            "vpp/interface/ipip-b": {**IPIP_VALUE, "mtu": 1400},
        })
    assert vpp.scheduler.get_value_status(GRE).details == ("gre.dst",)
    assert vpp.scheduler.get_value_status(IPIP).details == ("ipip.dst",)
    assert vpp.scheduler.get_value_status("vpp/interface/ipip-b").details == ("mtu",)


def test_tunnels_come_back_after_a_vpp_restart(vpp):
    vpp.commit({IPIP: IPIP_VALUE})
    requests = restart_and_resync(vpp)
    assert requests["ipip_add_tunnel"] == 1
    (ipip,) = vpp.papi.api.ipip_tunnel_dump(sw_if_index=ANY)
    assert ipip.tunnel.instance == 3

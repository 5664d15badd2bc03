"""gre.api and ipip.api in the emulator, as VPP 24.06 answers them."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.process

ANY = 0xFFFFFFFF


def gre(src="10.0.0.1", dst="10.0.0.2", **extra):
    return {"type": 0, "mode": 0, "flags": 0, "session_id": 0, "instance": ANY,
            "outer_table_id": 0, "sw_if_index": ANY, "src": src, "dst": dst, **extra}


def ipip(src="10.0.0.1", dst="10.0.0.3", **extra):
    return {"instance": ANY, "src": src, "dst": dst, "sw_if_index": ANY, "table_id": 0,
            "flags": 0, "mode": 0, "dscp": 0, **extra}


def test_gre_lifecycle_dump_and_refusals(papi):
    reply = papi.api.gre_tunnel_add_del(is_add=True, tunnel=gre())
    assert reply.retval == 0
    idx = reply.sw_if_index
    (details,) = papi.api.gre_tunnel_dump(sw_if_index=ANY)
    assert (str(details.tunnel.src), str(details.tunnel.dst), details.tunnel.instance,
            details.tunnel.sw_if_index) == ("10.0.0.1", "10.0.0.2", 0, idx)
    (iface,) = papi.api.sw_interface_dump(sw_if_index=idx)
    assert (iface.interface_name, iface.interface_dev_type, iface.mtu[0]) == \
        ("gre0", "GRE tunnel device", 9000)
    assert papi.api.gre_tunnel_add_del(is_add=True, tunnel=gre()).retval == -79  # exists
    assert papi.api.gre_tunnel_add_del(is_add=True, tunnel=gre(dst="10.0.0.1")).retval == -82
    assert papi.api.gre_tunnel_add_del(is_add=True, tunnel=gre(dst="fd00::2")).retval == -153
    assert papi.api.gre_tunnel_add_del(is_add=True,
                                       tunnel=gre(outer_table_id=77)).retval == -3
    assert papi.api.gre_tunnel_add_del(is_add=True,
                                       tunnel=gre(session_id=1024)).retval == -148
    assert papi.api.gre_tunnel_add_del(is_add=True,
                                       tunnel=gre(dst="10.0.0.9", instance=0)).retval == -147
    assert papi.api.hw_interface_set_mtu(sw_if_index=idx, mtu=1400).retval == -30
    assert papi.api.gre_tunnel_add_del(is_add=False, tunnel=gre()).retval == 0
    assert papi.api.gre_tunnel_dump(sw_if_index=ANY) == []
    assert papi.api.gre_tunnel_add_del(is_add=False, tunnel=gre()).retval == -6


def test_ipip_lifecycle_dump_and_refusals(papi):
    reply = papi.api.ipip_add_tunnel(tunnel=ipip(instance=5))
    assert reply.retval == 0
    (details,) = papi.api.ipip_tunnel_dump(sw_if_index=ANY)
    assert (details.tunnel.instance, str(details.tunnel.dst)) == (5, "10.0.0.3")
    (iface,) = papi.api.sw_interface_dump(sw_if_index=reply.sw_if_index)
    assert (iface.interface_name, iface.interface_dev_type) == ("ipip5", "IPIP tunnel device")
    assert papi.api.ipip_add_tunnel(tunnel=ipip(instance=5)).retval == -79
    assert papi.api.ipip_add_tunnel(tunnel=ipip(dst="10.0.0.4", mode=1)).retval == -58
    loop = papi.api.create_loopback().sw_if_index
    assert papi.api.ipip_del_tunnel(sw_if_index=loop).retval == -6
    assert papi.api.ipip_del_tunnel(sw_if_index=reply.sw_if_index).retval == 0
    assert papi.api.ipip_tunnel_dump(sw_if_index=ANY) == []

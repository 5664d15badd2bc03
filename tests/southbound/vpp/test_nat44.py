"""The NAT44 models (`vpp/nat44/...`) through the scheduler, the VPP southbound and vpp_papi,
against the emulator."""

from __future__ import annotations

import pytest

from scheduler import RetryPolicy, TransactionError, ValueState
from tests.southbound.vpp.plugin_helpers import calls, restart_vpp
from tests.util import wait_until

CONFIGURED, PENDING, OBTAINED = ValueState.CONFIGURED, ValueState.PENDING, ValueState.OBTAINED
GLOBAL = "vpp/nat44/global"
UPLINK = {"type": "loopback", "addresses": ["203.0.113.1/24"]}
WEB = {"protocol": "tcp", "local_ip": "10.0.0.5", "local_port": 80,
       "external_ip": "198.51.100.1", "external_port": 8080}
CONFIG = {
    "vpp/interface/uplink": UPLINK,
    "vpp/interface/inside": {"type": "loopback", "addresses": ["10.0.0.1/24"]},
    GLOBAL: {"enabled": True, "sessions": 1000},
    "vpp/nat44/interface/uplink": {"outside": True},
    "vpp/nat44/interface/inside": {"inside": True},
    "vpp/nat44/pool/198.51.100.1-198.51.100.4": {},
    "vpp/nat44/static/web": WEB,
    "vpp/nat44/static/dns": {"local_ip": "10.0.0.6", "external_interface": "uplink"},
}


def nat(vpp) -> dict:
    api = vpp.papi.api
    return {
        "sessions": api.nat44_show_running_config().sessions,
        "interfaces": {d.sw_if_index: int(d.flags) for d in api.nat44_interface_dump()},
        "pool": [str(d.ip_address) for d in api.nat44_address_dump()],
        "static": sorted((d.tag, str(d.external_ip_address), d.external_port)
                         for d in api.nat44_static_mapping_dump()),
    }


def test_create_update_delete(vpp):
    vpp.commit(CONFIG)
    assert all(vpp.state(key) is CONFIGURED for key in CONFIG)
    state = nat(vpp)
    uplink, inside = vpp.sw_if_index("uplink"), vpp.sw_if_index("inside")
    assert state["sessions"] == 1000
    assert state["interfaces"] == {uplink: 16, inside: 32}
    assert state["pool"] == [f"198.51.100.{n}" for n in range(1, 5)]
    assert state["static"] == [("kvmesh:dns", "0.0.0.0", 0), ("kvmesh:dns", "203.0.113.1", 0),
                               ("kvmesh:web", "198.51.100.1", 8080)]
    # nothing to do when unchanged
    assert [op for op in vpp.scheduler.plan(CONFIG) if not op.noop] == []
    # updates: a role added in place, a mapping re-created
    vpp.commit({"vpp/nat44/interface/uplink": {"outside": True, "inside": True},
                "vpp/nat44/static/web": {**WEB, "external_port": 8081}})
    assert nat(vpp)["interfaces"][uplink] == 48
    assert ("kvmesh:web", "198.51.100.1", 8081) in nat(vpp)["static"]
    vpp.commit({"vpp/nat44/interface/uplink": {"outside": True}})
    assert nat(vpp)["interfaces"][uplink] == 16
    # deleting the global value removes every NAT value first, then disables the plugin
    before = vpp.control.counters()
    vpp.commit({GLOBAL: None})
    assert calls(vpp, before, "nat44_add_del_static_mapping_v2", "nat44_add_del_address_range",
                 "nat44_interface_add_del_feature", "nat44_ed_plugin_enable_disable") == {
        "nat44_add_del_static_mapping_v2": 2, "nat44_add_del_address_range": 1,
        "nat44_interface_add_del_feature": 2, "nat44_ed_plugin_enable_disable": 1}
    assert vpp.state("vpp/nat44/static/web") is PENDING
    assert nat(vpp) == {"sessions": 0, "interfaces": {}, "pool": [], "static": []}
    # and enabling it again restores them
    vpp.commit({GLOBAL: {"enabled": True}})
    assert all(vpp.state(key) is CONFIGURED for key in CONFIG if key != GLOBAL)
    assert nat(vpp)["sessions"] == 63 * 1024


def test_nat_waits_for_the_plugin_and_the_interface(vpp):
    vpp.commit({"vpp/nat44/interface/uplink": {"outside": True},
                "vpp/nat44/static/dns": {"local_ip": "10.0.0.6", "external_interface": "uplink"},
                "vpp/nat44/pool/198.51.100.9": {}})
    status = vpp.scheduler.get_value_status("vpp/nat44/interface/uplink")
    assert status.state is PENDING and set(status.details) == {"NAT44 enabled",
                                                               "interface uplink"}
    assert vpp.state("vpp/nat44/pool/198.51.100.9") is PENDING
    vpp.commit({GLOBAL: {"enabled": False}})
    assert vpp.state("vpp/nat44/pool/198.51.100.9") is PENDING  # disabled is not enabled
    vpp.commit({GLOBAL: {}})
    assert vpp.state("vpp/nat44/pool/198.51.100.9") is CONFIGURED
    assert vpp.state("vpp/nat44/interface/uplink") is PENDING
    vpp.commit({"vpp/interface/uplink": UPLINK})
    assert vpp.state("vpp/nat44/interface/uplink") is CONFIGURED
    assert vpp.state("vpp/nat44/static/dns") is CONFIGURED
    vpp.commit({"vpp/interface/uplink": None})  # NAT on it goes first, VPP never refuses
    assert vpp.state("vpp/nat44/interface/uplink") is PENDING
    assert nat(vpp)["interfaces"] == {} and nat(vpp)["static"] == []


def test_resync_after_a_restart_rebuilds_with_the_minimum_of_calls(vpp):
    vpp.commit(CONFIG)
    restart_vpp(vpp)
    before = vpp.control.counters()
    vpp.scheduler.resync({}, kind="downstream")
    assert calls(vpp, before, "nat44_ed_plugin_enable_disable", "nat44_interface_add_del_feature",
                 "nat44_add_del_address_range", "nat44_add_del_static_mapping_v2",
                 "nat44_show_running_config", "nat44_interface_dump", "nat44_address_dump",
                 "nat44_static_mapping_dump") == {
        "nat44_ed_plugin_enable_disable": 1, "nat44_interface_add_del_feature": 2,
        "nat44_add_del_address_range": 1, "nat44_add_del_static_mapping_v2": 2,
        "nat44_show_running_config": 1, "nat44_interface_dump": 1, "nat44_address_dump": 1,
        "nat44_static_mapping_dump": 1}
    assert all(vpp.state(key) is CONFIGURED for key in CONFIG)
    before = vpp.control.counters()
    vpp.scheduler.resync({}, kind="downstream")
    assert calls(vpp, before, "nat44_ed_plugin_enable_disable", "nat44_interface_add_del_feature",
                 "nat44_add_del_address_range", "nat44_add_del_static_mapping_v2") == {
        "nat44_ed_plugin_enable_disable": 0, "nat44_interface_add_del_feature": 0,
        "nat44_add_del_address_range": 0, "nat44_add_del_static_mapping_v2": 0}


def test_a_refused_mapping_is_failed_with_vpps_error_and_a_transient_one_retried(vpp):
    vpp.commit({GLOBAL: {}, "vpp/nat44/static/web": WEB})
    # the same external address and port under another name: VPP refuses, final
    with pytest.raises(TransactionError, match=r"VNET_API_ERROR_VALUE_EXIST \(-81\)"):
        vpp.commit({"vpp/nat44/static/web2": {**WEB, "local_ip": "10.0.0.9"}})
    status = vpp.scheduler.get_value_status("vpp/nat44/static/web2")
    assert status.state is ValueState.FAILED
    assert "VNET_API_ERROR_VALUE_EXIST" in str(status.error)
    vpp.control.fail("nat44_add_del_address_range", retval=-167, count=1)  # BUSY: transient
    with pytest.raises(TransactionError, match=r"VNET_API_ERROR_BUSY \(-167\)"):
        vpp.commit({"vpp/nat44/pool/198.51.100.7": {}},
                   retry=RetryPolicy(period=0.05, max_count=3, exp_backoff=False))
    wait_until(lambda: vpp.state("vpp/nat44/pool/198.51.100.7") is CONFIGURED, timeout=30,
               message="added by a retry")
    assert nat(vpp)["pool"] == ["198.51.100.7"]


def test_nat_kvmesh_did_not_make_is_obtained_and_never_deleted(vpp):
    api = vpp.papi.api
    api.nat44_ed_plugin_enable_disable(enable=True, sessions=0, inside_vrf=0, outside_vrf=0,
                                       flags=0)
    api.nat44_add_del_address_range(first_ip_address="192.0.2.1", last_ip_address="192.0.2.2",
                                    vrf_id=0xFFFFFFFF, is_add=True, flags=0)
    vpp.scheduler.resync({"vpp/nat44/pool/198.51.100.1": {}}, kind="full")
    assert vpp.state(GLOBAL) is OBTAINED
    assert vpp.state("vpp/nat44/pool/192.0.2.1-192.0.2.2") is OBTAINED
    # NAT44 enabled by someone else is enabled: kvmesh's pool is added to it
    assert vpp.state("vpp/nat44/pool/198.51.100.1") is CONFIGURED
    vpp.scheduler.resync({}, kind="full")
    assert nat(vpp)["sessions"] == 63 * 1024  # not disabled
    assert nat(vpp)["pool"] == ["192.0.2.1", "192.0.2.2"]  # kvmesh's pool removed, theirs kept


def test_new_sessions_re_create_the_plugin_and_restore_everything(vpp):
    vpp.commit(CONFIG)
    before = vpp.control.counters()
    vpp.commit({GLOBAL: {"sessions": 2000}})
    # VPP can only disable (which drops every NAT value) and enable again: all come back
    assert calls(vpp, before, "nat44_ed_plugin_enable_disable",
                 "nat44_add_del_static_mapping_v2") == {
        "nat44_ed_plugin_enable_disable": 2, "nat44_add_del_static_mapping_v2": 4}
    assert all(vpp.state(key) is CONFIGURED for key in CONFIG)
    state = nat(vpp)
    assert state["sessions"] == 2000 and len(state["static"]) == 3 and len(state["pool"]) == 4

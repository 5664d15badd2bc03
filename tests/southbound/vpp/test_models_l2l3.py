"""The issue-19 models through the scheduler against the emulator: VRF tables, neighbors,
sub-interfaces, L2 cross-connects, static L2 FIB entries, VXLAN and memif. Per model: create,
update, delete; dependencies both ways; resync after a VPP restart with the minimum of calls;
retval failures named and retried per the policy; OBTAINED objects left alone."""

from __future__ import annotations

import threading
from collections import Counter

import pytest

from scheduler import RetryPolicy, TransactionError, ValueState
from tests.util import wait_until

CONFIGURED = ValueState.CONFIGURED
PENDING = ValueState.PENDING
OBTAINED = ValueState.OBTAINED
ANY = 0xFFFFFFFF
LOOP = {"type": "loopback"}
LO1 = "vpp/interface/lo1"
LO2 = "vpp/interface/lo2"
VRF10 = "vpp/vrf/ipv4/10"
VRF10_6 = "vpp/vrf/ipv6/10"
NEIGH = "vpp/neighbor/lo1/10.0.0.2"
NEIGH_VALUE = {"mac": "02:00:00:00:00:02"}


def sent(vpp, before: Counter) -> Counter:
    """The API requests the emulator counted since `before`, by message name."""
    now = Counter({k[4:]: v for k, v in vpp.control.counters().items() if k.startswith("msg.")})
    return Counter({k: v for k, v in (now - before).items() if v})


def counted(vpp) -> Counter:
    return sent(vpp, Counter())


def tables(vpp) -> dict:
    return {(d.table.table_id, bool(d.table.is_ip6)): d.table.name
            for d in vpp.papi.api.ip_table_dump()}


def neighbors(vpp) -> dict:
    return {
        (d.neighbor.sw_if_index, str(d.neighbor.ip_address)):
            (str(d.neighbor.mac_address), int(d.neighbor.flags))
        for af in (0, 1)
        for d in vpp.papi.api.ip_neighbor_dump(sw_if_index=ANY, af=af)
    }


def restart_and_resync(vpp) -> Counter:
    """A VPP restart (all state lost), the plugin reconnects, a downstream resync rebuilds:
    returns the requests the resync sent."""
    resynced = threading.Event()
    before: list[Counter] = []
    failed: list[BaseException] = []

    def resync() -> None:
        before.append(counted(vpp))
        try:
            vpp.scheduler.resync({}, kind="downstream")
        except BaseException as exc:  # reported by the test, not lost in the callback thread
            failed.append(exc)
        resynced.set()

    vpp.plugin.on_connect(resync)
    vpp.papi.disconnect()
    vpp.control.restart(downtime=0.2)
    wait_until(resynced.is_set, timeout=60, message="reconnected and resynced")
    if failed:
        raise failed[0]
    vpp.papi = vpp.papi.__class__(bootstrapapi=True, server_address=vpp.emulator.socket_path)
    vpp.papi.connect("kvmesh-test")
    return sent(vpp, before[0])


WRITES = ("add", "del", "create", "delete", "set")


def writes(requests: Counter) -> Counter:
    """Only the requests that change VPP (dumps, gets and pings are reads)."""
    return Counter({k: v for k, v in requests.items()
                    if any(w in k for w in WRITES) and not k.endswith("dump")
                    and not k.startswith(("sockclnt", "want_"))})


# ---------------------------------------------------------------------- VRF tables
def test_vrf_table_create_rename_delete(vpp):
    vpp.commit({VRF10: {"name": "red"}})
    assert vpp.state(VRF10) is CONFIGURED
    assert tables(vpp)[(10, False)] == "red"
    vpp.commit({VRF10: {"id": 10, "protocol": "ipv4", "name": "blue"}})
    assert tables(vpp)[(10, False)] == "blue"  # VPP never renames: re-created
    vpp.commit({VRF10: None})
    assert (10, False) not in tables(vpp)


def test_vrf_key_and_value_must_agree(vpp):
    with pytest.raises(TransactionError):
        vpp.commit({VRF10: {"id": 11, "protocol": "ipv6"}, "vpp/vrf/ipv5/1": {}})
    assert set(vpp.scheduler.get_value_status(VRF10).details) == {"id", "protocol"}
    assert vpp.scheduler.get_value_status("vpp/vrf/ipv5/1").details == ("(key)",)


def test_interface_and_route_in_a_vrf_wait_for_its_table(vpp):
    route = "vpp/route/10/10.9.0.0/16/10.5.0.2"
    vpp.commit({
        LO1: {**LOOP, "vrf": 10, "addresses": ["10.5.0.1/24"]},
        LO2: {**LOOP, "vrf": 10, "addresses": ["fd00:5::1/64"]},
        route: {"outgoing_interface": "lo1"},
    })
    assert all(vpp.state(k) is PENDING for k in (LO1, LO2, route))
    assert vpp.vpp_interfaces() == {}
    vpp.commit({VRF10: {}})
    assert vpp.state(LO1) is CONFIGURED and vpp.state(route) is CONFIGURED
    assert vpp.state(LO2) is PENDING  # IPv6 addresses: the IPv6 table too
    idx = vpp.sw_if_index("lo1")
    assert vpp.papi.api.sw_interface_get_table(sw_if_index=idx).vrf_id == 10
    assert vpp.papi.api.sw_interface_get_table(sw_if_index=idx, is_ipv6=True).vrf_id == 0
    assert "10.9.0.0/16" in vpp.vpp_routes(10)
    vpp.commit({VRF10_6: {}})
    lo2 = vpp.sw_if_index("lo2")
    assert vpp.papi.api.sw_interface_get_table(sw_if_index=lo2, is_ipv6=True).vrf_id == 10
    # removing the table removes what is in it first (and they wait again)
    vpp.commit({VRF10: None})
    assert all(vpp.state(k) is PENDING for k in (LO1, LO2, route))  # lo2: IPv4 and IPv6
    assert vpp.vpp_interfaces() == {}
    assert (10, False) not in tables(vpp)


def test_table_0_and_foreign_tables_are_obtained_and_never_deleted(vpp):
    vpp.papi.api.ip_table_add_del(is_add=True, table={"table_id": 77, "name": "theirs"})
    vpp.commit({VRF10: {}})
    vpp.scheduler.resync({VRF10: {}}, kind="full")
    assert vpp.state("vpp/vrf/ipv4/0") is OBTAINED
    assert vpp.state("vpp/vrf/ipv6/0") is OBTAINED
    assert vpp.state("vpp/vrf/ipv4/77") is OBTAINED
    vpp.scheduler.resync({}, kind="full")
    assert set(tables(vpp)) == {(0, False), (0, True), (77, False)}


# ---------------------------------------------------------------------- neighbors
def test_neighbor_create_update_in_place_recreate_delete(vpp):
    vpp.commit({LO1: LOOP, NEIGH: NEIGH_VALUE})
    idx = vpp.sw_if_index("lo1")
    assert neighbors(vpp) == {(idx, "10.0.0.2"): ("02:00:00:00:00:02", 1)}
    before = counted(vpp)
    vpp.commit({NEIGH: {"mac": "02:00:00:00:00:03"}})
    assert neighbors(vpp) == {(idx, "10.0.0.2"): ("02:00:00:00:00:03", 1)}
    assert writes(sent(vpp, before)) == Counter({"ip_neighbor_add_del": 1})  # in place
    vpp.commit({NEIGH: {"mac": "02:00:00:00:00:03", "static": False, "no_fib_entry": True}})
    assert neighbors(vpp) == {(idx, "10.0.0.2"): ("02:00:00:00:00:03", 2)}
    vpp.commit({NEIGH: None})
    assert neighbors(vpp) == {}
    assert vpp.state(LO1) is CONFIGURED


def test_neighbor_waits_for_its_interface_and_goes_before_it(vpp):
    v6 = "vpp/neighbor/lo1/fd00::2"
    vpp.commit({NEIGH: NEIGH_VALUE, v6: {"mac": "02:00:00:00:00:06", "ip": "fd00::2"}})
    assert vpp.state(NEIGH) is PENDING
    print(vpp.scheduler.get_value_status(NEIGH))
    vpp.commit({LO1: LOOP})
    assert vpp.state(NEIGH) is CONFIGURED and vpp.state(v6) is CONFIGURED
    idx = vpp.sw_if_index("lo1")
    assert set(neighbors(vpp)) == {(idx, "10.0.0.2"), (idx, "fd00::2")}
    before = counted(vpp)
    vpp.commit({LO1: None})
    assert vpp.state(NEIGH) is PENDING
    # removed before the interface (not left to the interface deletion)
    assert writes(sent(vpp, before)) == Counter({"ip_neighbor_add_del": 2, "delete_loopback": 1})


def test_neighbor_key_and_value_must_agree(vpp):
    with pytest.raises(TransactionError):
        vpp.commit({NEIGH: {"mac": "01:00:00:00:00:01"},
                    "vpp/neighbor/lo1/10.0.0.4": {**NEIGH_VALUE, "ip": "10.0.0.3"},
                    "vpp/neighbor/lo1/not-an-ip": NEIGH_VALUE})
    assert vpp.scheduler.get_value_status(NEIGH).details == ("mac",)
    assert vpp.scheduler.get_value_status("vpp/neighbor/lo1/10.0.0.4").details == ("ip",)
    assert vpp.scheduler.get_value_status("vpp/neighbor/lo1/not-an-ip").details == ("(key)",)


def test_neighbors_learnt_by_vpp_are_left_alone(vpp):
    vpp.commit({LO1: LOOP, NEIGH: NEIGH_VALUE})
    idx = vpp.sw_if_index("lo1")
    vpp.papi.api.ip_neighbor_add_del(is_add=True, neighbor={
        "sw_if_index": idx, "flags": 0, "mac_address": "02:00:00:00:00:09",
        "ip_address": "10.0.0.9"})
    vpp.scheduler.resync({LO1: LOOP, NEIGH: NEIGH_VALUE}, kind="full")
    assert (idx, "10.0.0.9") in neighbors(vpp)


# ---------------------------------------------------------------------- sub-interfaces
SUB = "vpp/interface/lo1.10"
QINQ = "vpp/interface/lo1.20"


def sub(vlan=10, **extra):
    section = {"parent": "lo1", "sub_id": vlan, "outer_vlan": vlan, **extra}
    return {"type": "sub_interface", "sub_interface": section}


def sub_details(vpp) -> dict:
    return {d.tag[len("kvmesh:"):]: d for d in vpp.papi.api.sw_interface_dump(sw_if_index=ANY)
            if d.sup_sw_if_index != d.sw_if_index}


def test_sub_interfaces_one_tag_qinq_and_non_exact(vpp):
    before = counted(vpp)
    vpp.commit({
        LO1: LOOP,
        SUB: {**sub(10), "addresses": ["10.10.0.1/24"]},
        QINQ: sub(20, outer_vlan=100, inner_vlan=200),
        "vpp/interface/lo1.30": sub(30, outer_vlan=31, exact_match=False),
    })
    calls = sent(vpp, before)
    assert (calls["create_vlan_subif"], calls["create_subif"]) == (1, 2)
    parent = vpp.sw_if_index("lo1")
    d = sub_details(vpp)
    assert (d["lo1.10"].sup_sw_if_index, d["lo1.10"].sub_id, d["lo1.10"].sub_outer_vlan_id) == \
        (parent, 10, 10)
    assert (d["lo1.20"].sub_number_of_tags, d["lo1.20"].sub_outer_vlan_id,
            d["lo1.20"].sub_inner_vlan_id) == (2, 100, 200)
    assert (d["lo1.30"].sub_id, d["lo1.30"].sub_outer_vlan_id,
            int(d["lo1.30"].sub_if_flags) & 16) == (30, 31, 0)
    assert vpp.vpp_addresses(vpp.sw_if_index("lo1.10")) == ["10.10.0.1/24"]
    # a changed tag is a new sub-interface; admin state is updated in place
    old = vpp.sw_if_index("lo1.10")
    vpp.commit({SUB: {**sub(10, outer_vlan=11), "addresses": ["10.10.0.1/24"]}})
    assert vpp.sw_if_index("lo1.10") != old
    assert sub_details(vpp)["lo1.10"].sub_outer_vlan_id == 11
    same = vpp.sw_if_index("lo1.10")
    vpp.commit({SUB: {**sub(10, outer_vlan=11), "addresses": ["10.10.0.1/24"],
                      "enabled": False}})
    assert vpp.sw_if_index("lo1.10") == same
    vpp.commit({SUB: None, QINQ: None})
    assert set(sub_details(vpp)) == {"lo1.30"}


def test_sub_interface_waits_for_its_parent_and_goes_first(vpp):
    vpp.commit({SUB: sub()})
    assert vpp.state(SUB) is PENDING
    vpp.commit({LO1: LOOP})
    assert vpp.state(SUB) is CONFIGURED
    # a re-created parent takes its sub-interfaces down and back up
    vpp.commit({LO1: {**LOOP, "vrf": 10}, VRF10: {}})
    assert vpp.state(SUB) is CONFIGURED
    assert sub_details(vpp)["lo1.10"].sup_sw_if_index == vpp.sw_if_index("lo1")
    before = counted(vpp)
    vpp.commit({LO1: None})
    assert vpp.state(SUB) is PENDING
    assert writes(sent(vpp, before)) == Counter({"delete_subif": 1, "delete_loopback": 1})
    # removed itself, before its parent (after it, VPP would have answered -2)
    assert "retval.delete_subif.-2" not in vpp.control.counters()
    assert sub_details(vpp) == {}


def test_sub_interface_model_rules(vpp):
    with pytest.raises(TransactionError):
        vpp.commit({
            SUB: {**sub(), "mtu": 1400},
            QINQ: {"type": "sub_interface"},
            "vpp/interface/lo1.40": sub(40, outer_vlan=4096),
            "vpp/interface/lo9": {**LOOP, "sub_interface": {"parent": "lo1", "sub_id": 1,
                                                            "outer_vlan": 1}},
        })
    assert vpp.scheduler.get_value_status(SUB).details == ("mtu",)
    assert vpp.scheduler.get_value_status(QINQ).details == ("sub_interface",)
    assert vpp.scheduler.get_value_status("vpp/interface/lo1.40").details == \
        ("sub_interface.outer_vlan",)
    assert vpp.scheduler.get_value_status("vpp/interface/lo9").details == ("sub_interface",)


def test_a_taken_vlan_is_failed_with_vpps_error(vpp):
    vpp.commit({LO1: LOOP})
    theirs = vpp.papi.api.create_vlan_subif(sw_if_index=vpp.sw_if_index("lo1"), vlan_id=10)
    with pytest.raises(TransactionError):
        vpp.commit({SUB: sub()}, retry=RetryPolicy(period=0.01, max_count=3))
    status = vpp.scheduler.get_value_status(SUB)
    assert status.state is ValueState.FAILED
    assert "VNET_API_ERROR_VLAN_ALREADY_EXISTS (-56)" in status.error_message
    # theirs (untagged) is never reported, changed or deleted by a full resync
    vpp.scheduler.resync({LO1: LOOP}, kind="full")
    assert theirs.sw_if_index in {d.sw_if_index for d in
                                  vpp.papi.api.sw_interface_dump(sw_if_index=ANY)}


# ---------------------------------------------------------------------- L2 cross-connect
XC1 = "vpp/xconnect/lo1"
XC2 = "vpp/xconnect/lo2"
BD = "vpp/bd/bd1"


def xconnects(vpp) -> set:
    return {(d.rx_sw_if_index, d.tx_sw_if_index) for d in vpp.papi.api.l2_xconnect_dump()}


def test_xconnect_create_update_delete_and_dependencies(vpp):
    vpp.commit({XC1: {"transmit_interface": "lo2"}, XC2: {"transmit_interface": "lo1"}})
    assert vpp.state(XC1) is PENDING and vpp.state(XC2) is PENDING
    vpp.commit({LO1: LOOP})
    assert vpp.state(XC1) is PENDING  # both interfaces are needed
    vpp.commit({LO2: LOOP})
    lo1, lo2 = vpp.sw_if_index("lo1"), vpp.sw_if_index("lo2")
    assert xconnects(vpp) == {(lo1, lo2), (lo2, lo1)}
    vpp.commit({"vpp/interface/lo3": LOOP, XC1: {"transmit_interface": "lo3"}})
    lo3 = vpp.sw_if_index("lo3")
    assert xconnects(vpp) == {(lo1, lo3), (lo2, lo1)}
    before = counted(vpp)
    vpp.commit({LO2: None})  # the cross-connects through lo2 go first, and wait
    assert vpp.state(XC2) is PENDING
    assert writes(sent(vpp, before)) == Counter({"sw_interface_set_l2_xconnect": 1,
                                                 "delete_loopback": 1})
    vpp.commit({XC1: None})
    assert xconnects(vpp) == set()


def test_an_interface_is_in_a_bridge_domain_or_a_cross_connect_never_both(vpp):
    vpp.commit({LO1: LOOP, LO2: LOOP, BD: {"bd_id": 10, "interfaces": [{"name": "lo1"}]}})
    with pytest.raises(TransactionError, match="already in bridge domain bd1"):
        vpp.commit({XC1: {"transmit_interface": "lo2"}},
                   retry=RetryPolicy(period=0.05, max_count=50, exp_backoff=False))
    status = vpp.scheduler.get_value_status(XC1)
    assert status.state in (ValueState.RETRYING, ValueState.FAILED)
    assert "never both" in status.error_message
    (domain,) = vpp.papi.api.bridge_domain_dump(bd_id=10)
    assert [m.sw_if_index for m in domain.sw_if_details] == [vpp.sw_if_index("lo1")]
    # once the bridge domain lets it go, the retry applies the cross-connect
    vpp.commit({BD: {"bd_id": 10}})
    wait_until(lambda: vpp.state(XC1) is CONFIGURED, timeout=10, message="retried")
    assert xconnects(vpp) == {(vpp.sw_if_index("lo1"), vpp.sw_if_index("lo2"))}
    # and the other way round
    with pytest.raises(TransactionError, match="already in a cross-connect"):
        vpp.commit({BD: {"bd_id": 10, "interfaces": [{"name": "lo1"}]}})


# ---------------------------------------------------------------------- L2 FIB
FIB = "vpp/bd/bd1/fib/02:00:00:00:00:0a"
BD_WITH_LO1 = {"bd_id": 10, "interfaces": [{"name": "lo1"}, {"name": "lo2"}]}


def l2fib(vpp) -> dict:
    return {(d.bd_id, str(d.mac)): (d.sw_if_index, bool(d.static_mac), bool(d.bvi_mac))
            for d in vpp.papi.api.l2_fib_table_dump(bd_id=ANY)}


def test_l2fib_entry_waits_for_domain_and_membership_and_updates_in_place(vpp):
    vpp.commit({FIB: {"interface": "lo1"}, LO1: LOOP, LO2: LOOP})
    assert vpp.state(FIB) is PENDING
    vpp.commit({BD: {"bd_id": 10}})
    assert vpp.state(FIB) is PENDING  # lo1 is not a member yet
    vpp.commit({BD: BD_WITH_LO1})
    assert vpp.state(FIB) is CONFIGURED
    assert vpp.state(BD) is CONFIGURED  # not mistaken for the domain's own key
    lo1, lo2 = vpp.sw_if_index("lo1"), vpp.sw_if_index("lo2")
    assert l2fib(vpp) == {(10, "02:00:00:00:00:0a"): (lo1, True, False)}
    before = counted(vpp)
    vpp.commit({FIB: {"interface": "lo2", "mac": "02:00:00:00:00:0A"}})
    assert l2fib(vpp) == {(10, "02:00:00:00:00:0a"): (lo2, True, False)}
    assert writes(sent(vpp, before)) == Counter({"l2fib_add_del": 1})
    # the member leaving the domain takes the entry out first
    vpp.commit({BD: {"bd_id": 10, "interfaces": [{"name": "lo1"}]}})
    assert vpp.state(FIB) is PENDING
    assert l2fib(vpp) == {}
    vpp.commit({BD: BD_WITH_LO1})
    assert vpp.state(FIB) is CONFIGURED
    vpp.commit({FIB: None})
    assert l2fib(vpp) == {}


def test_l2fib_key_rules(vpp):
    with pytest.raises(TransactionError):
        vpp.commit({FIB: {"interface": "lo1", "mac": "02:00:00:00:00:0b"},
                    "vpp/bd/bd1/fib/not-a-mac": {"interface": "lo1"}})
    assert vpp.scheduler.get_value_status(FIB).details == ("mac",)
    assert vpp.scheduler.get_value_status("vpp/bd/bd1/fib/not-a-mac").details == ("(key)",)


# ---------------------------------------------------------------------- VXLAN
VX = "vpp/interface/vx1"


def vxlan(vni=100, encap_vrf=0, src="192.168.1.1", dst="192.168.1.2"):
    return {"type": "vxlan", "vxlan": {"src": src, "dst": dst, "vni": vni,
                                       "encap_vrf": encap_vrf}}


def tunnels(vpp) -> dict:
    return {t.sw_if_index: (str(t.src_address), str(t.dst_address), t.vni, t.encap_vrf_id)
            for t in vpp.papi.api.vxlan_tunnel_v2_dump(sw_if_index=ANY)}


def test_vxlan_create_recreate_delete_and_encap_vrf(vpp):
    vpp.commit({VX: vxlan(encap_vrf=10)})
    assert vpp.state(VX) is PENDING  # its encap table
    vpp.commit({VRF10: {}})
    assert vpp.state(VX) is CONFIGURED
    idx = vpp.sw_if_index("vx1")
    assert tunnels(vpp) == {idx: ("192.168.1.1", "192.168.1.2", 100, 10)}
    vpp.commit({VX: vxlan(vni=200, encap_vrf=10)})
    new = vpp.sw_if_index("vx1")
    assert tunnels(vpp) == {new: ("192.168.1.1", "192.168.1.2", 200, 10)}
    # a tunnel in a bridge domain
    vpp.commit({BD: {"bd_id": 10, "interfaces": [{"name": "vx1"}]}})
    (domain,) = vpp.papi.api.bridge_domain_dump(bd_id=10)
    assert [m.sw_if_index for m in domain.sw_if_details] == [new]
    vpp.commit({VRF10: None})  # tunnel (and its membership) go before the table
    assert vpp.state(VX) is PENDING and tunnels(vpp) == {}
    vpp.commit({VX: None, BD: None})
    assert vpp.state(VX) is ValueState.NONEXISTENT


def test_vxlan_model_rules_and_vpps_refusal(vpp):
    with pytest.raises(TransactionError):
        vpp.commit({VX: vxlan(dst="192.168.1.1"), "vpp/interface/vx2": vxlan(dst="fd00::1"),
                    "vpp/interface/vx3": vxlan(vni=1 << 24)})
    assert vpp.scheduler.get_value_status(VX).details == ("vxlan.dst",)
    assert vpp.scheduler.get_value_status("vpp/interface/vx2").details == ("vxlan.dst",)
    assert vpp.scheduler.get_value_status("vpp/interface/vx3").details == ("vxlan.vni",)
    vpp.papi.api.vxlan_add_del_tunnel_v3(
        is_add=True, instance=ANY, src_address="192.168.1.1", dst_address="192.168.1.2",
        vni=100, mcast_sw_if_index=ANY, decap_next_index=ANY)  # someone else's
    with pytest.raises(TransactionError):
        vpp.commit({VX: vxlan()})
    assert "VNET_API_ERROR_TUNNEL_EXIST (-75)" in vpp.scheduler.get_value_status(VX).error_message
    vpp.scheduler.resync({}, kind="full")
    assert len(tunnels(vpp)) == 1  # theirs (untagged) stays


# ---------------------------------------------------------------------- memif
M1 = "vpp/interface/m1"
M2 = "vpp/interface/m2"
SOCK = "/run/kvm/app.sock"


def memif(id_=0, socket=SOCK, master=True):
    return {"type": "memif", "memif": {"socket": socket, "id": id_, "master": master}}


def memifs(vpp) -> dict:
    paths = {d.socket_id: d.socket_filename for d in vpp.papi.api.memif_socket_filename_dump()}
    return {d.if_name: (paths[d.socket_id], d.id, int(d.role)) for d in vpp.papi.api.memif_dump()}


def sockets(vpp) -> set:
    return {d.socket_filename for d in vpp.papi.api.memif_socket_filename_dump()}


def test_memifs_share_one_socket_registered_once_and_removed_with_the_last(vpp):
    before = counted(vpp)
    vpp.commit({M1: memif(1), M2: memif(2)})
    assert sent(vpp, before)["memif_socket_filename_add_del_v2"] == 1  # one socket id per path
    assert sorted(memifs(vpp).values()) == [(SOCK, 1, 0), (SOCK, 2, 0)]
    vpp.commit({M1: None})
    assert SOCK in sockets(vpp)  # m2 still uses it
    vpp.commit({M2: memif(2, master=False)})  # re-created: the socket follows
    assert sorted(memifs(vpp).values()) == [(SOCK, 2, 1)]
    vpp.commit({M2: None})
    assert sockets(vpp) == {"/run/vpp/memif.sock"}


def test_memif_id_taken_on_a_socket_and_foreign_sockets(vpp):
    papi = vpp.papi.api
    theirs = papi.memif_socket_filename_add_del_v2(is_add=True, socket_id=ANY,
                                                   socket_filename=SOCK).socket_id
    papi.memif_create_v2(role=0, mode=0, id=1, socket_id=theirs)
    with pytest.raises(TransactionError):
        vpp.commit({M1: memif(1)})
    status = vpp.scheduler.get_value_status(M1)
    assert "VNET_API_ERROR_SUBIF_ALREADY_EXISTS (-68)" in status.error_message
    vpp.commit({M1: memif(5)})  # their socket is reused ...
    assert memifs(vpp)["memif1/5"] == (SOCK, 5, 0)
    vpp.commit({M1: None})
    assert SOCK in sockets(vpp)  # ... and never removed


def test_memif_model_rules(vpp):
    with pytest.raises(TransactionError):
        vpp.commit({M1: memif(socket="relative.sock"),
                    M2: {"type": "memif", "memif": {"socket": SOCK, "mode": "ip"}}})
    assert vpp.scheduler.get_value_status(M1).details == ("memif.socket",)
    assert vpp.scheduler.get_value_status(M2).details == ("memif.mode",)


# ---------------------------------------------------------------------- every model
RESYNC_VALUES = {
    VRF10: {"name": "red"},
    LO1: {**LOOP, "vrf": 10, "addresses": ["10.0.0.1/24"]},
    NEIGH: NEIGH_VALUE,
    SUB: sub(),
    QINQ: sub(20, outer_vlan=100, inner_vlan=200),
    LO2: LOOP,
    XC2: {"transmit_interface": "lo1.20"},
    "vpp/interface/lo3": LOOP,
    BD: {"bd_id": 10, "interfaces": [{"name": "lo3"}]},
    "vpp/bd/bd1/fib/02:00:00:00:00:0a": {"interface": "lo3"},
    VX: vxlan(encap_vrf=10),
    M1: memif(1),
    M2: memif(2),
}
RESYNC_WRITES = Counter({
    "ip_table_add_del": 1,
    "create_loopback": 3,
    "vxlan_add_del_tunnel_v3": 1,
    "memif_socket_filename_add_del_v2": 1,
    "memif_create_v2": 2,
    "create_vlan_subif": 1,
    "create_subif": 1,
    "sw_interface_tag_add_del": 8,
    "sw_interface_set_table": 1,
    "sw_interface_set_flags": 8,
    "sw_interface_set_l2_xconnect": 1,
    "bridge_domain_add_del_v2": 1,
    "sw_interface_set_l2_bridge": 1,
    "l2fib_add_del": 1,
    "sw_interface_add_del_address": 1,
    "ip_neighbor_add_del": 1,
})


def test_resync_after_a_vpp_restart_rebuilds_with_the_minimum_of_calls(vpp):
    vpp.commit(RESYNC_VALUES)
    assert all(vpp.state(k) is CONFIGURED for k in RESYNC_VALUES)
    requests = restart_and_resync(vpp)
    assert writes(requests) == RESYNC_WRITES
    assert all(vpp.state(k) is CONFIGURED for k in RESYNC_VALUES)
    idx = vpp.sw_if_index("lo1")
    assert neighbors(vpp) == {(idx, "10.0.0.2"): ("02:00:00:00:00:02", 1)}
    assert tables(vpp)[(10, False)] == "red"
    # and a second resync has nothing to do
    before = counted(vpp)
    vpp.scheduler.resync({}, kind="downstream")
    assert writes(sent(vpp, before)) == Counter()


def test_plan_is_empty_when_unchanged_and_exact_otherwise(vpp):
    vpp.commit(RESYNC_VALUES)
    vpp.scheduler.resync(RESYNC_VALUES, kind="full")
    assert [op for op in vpp.scheduler.plan(RESYNC_VALUES, resync="full") if not op.noop] == []
    changed = {**RESYNC_VALUES, NEIGH: {"mac": "02:00:00:00:00:09"},
               XC2: {"transmit_interface": "lo1.10"}}
    ops = [op for op in vpp.scheduler.plan(changed, resync="full") if not op.noop]
    assert sorted((op.key, str(op.op)) for op in ops) == [(NEIGH, "UPDATE"), (XC2, "UPDATE")]


def test_what_others_made_on_kvmesh_objects_is_never_deleted(vpp):
    vpp.commit({LO1: LOOP, LO2: LOOP, "vpp/interface/lo3": LOOP,
                BD: {"bd_id": 10, "interfaces": [{"name": "lo3"}]}})
    api = vpp.papi.api
    lo1, lo2, lo3 = (vpp.sw_if_index(n) for n in ("lo1", "lo2", "lo3"))
    api.sw_interface_set_l2_xconnect(rx_sw_if_index=lo1, tx_sw_if_index=lo2, enable=True)
    api.l2fib_add_del(mac="02:00:00:00:00:77", bd_id=10, sw_if_index=lo3, is_add=True,
                      static_mac=True)
    api.ip_neighbor_add_del(is_add=True, neighbor={
        "sw_if_index": lo2, "flags": 1, "mac_address": "02:00:00:00:00:08",
        "ip_address": "10.0.0.8"})
    nb = {LO1: LOOP, LO2: LOOP, "vpp/interface/lo3": LOOP,
          BD: {"bd_id": 10, "interfaces": [{"name": "lo3"}]}}
    vpp.scheduler.resync(nb, kind="full")
    for key in (XC1, "vpp/bd/bd1/fib/02:00:00:00:00:77", "vpp/neighbor/lo2/10.0.0.8"):
        assert vpp.state(key) is OBTAINED, key
    assert xconnects(vpp) == {(lo1, lo2)}
    assert (10, "02:00:00:00:00:77") in l2fib(vpp)
    assert (lo2, "10.0.0.8") in neighbors(vpp)


FAILURES = [
    (VRF10, {}, {}, "ip_table_add_del"),
    (NEIGH, NEIGH_VALUE, {LO1: LOOP}, "ip_neighbor_add_del"),
    (SUB, sub(), {LO1: LOOP}, "create_vlan_subif"),
    (QINQ, sub(20, outer_vlan=100, inner_vlan=200), {LO1: LOOP}, "create_subif"),
    (XC1, {"transmit_interface": "lo2"}, {LO1: LOOP, LO2: LOOP}, "sw_interface_set_l2_xconnect"),
    (FIB, {"interface": "lo1"}, {LO1: LOOP, BD: {"bd_id": 10, "interfaces": [{"name": "lo1"}]}},
     "l2fib_add_del"),
    (VX, vxlan(), {}, "vxlan_add_del_tunnel_v3"),
    (M1, memif(1), {}, "memif_create_v2"),
]


@pytest.mark.parametrize(("key", "value", "needs", "message"), FAILURES,
                         ids=[f[3] for f in FAILURES])
def test_a_refusal_is_failed_with_vpps_error_name(vpp, key, value, needs, message):
    vpp.commit(needs)
    vpp.control.fail(message, retval=-6, count=1)
    with pytest.raises(TransactionError):
        vpp.commit({key: value}, retry=RetryPolicy(period=0.01, max_count=3))
    status = vpp.scheduler.get_value_status(key)
    assert status.state is ValueState.FAILED
    assert "VNET_API_ERROR_NO_SUCH_ENTRY (-6)" in status.error_message
    assert vpp.scheduler.stats()["scheduled_retries"] == 0


@pytest.mark.parametrize(("key", "value", "needs", "message"), FAILURES,
                         ids=[f[3] for f in FAILURES])
def test_a_transient_refusal_is_retried(vpp, key, value, needs, message):
    vpp.commit(needs)
    vpp.control.fail(message, retval=-167, count=1)  # BUSY
    with pytest.raises(TransactionError, match=r"VNET_API_ERROR_BUSY \(-167\)"):
        vpp.commit({key: value}, retry=RetryPolicy(period=0.05, max_count=3, exp_backoff=False))
    assert vpp.state(key) in (ValueState.RETRYING, CONFIGURED)
    wait_until(lambda: vpp.state(key) is CONFIGURED, timeout=10, message="retried")

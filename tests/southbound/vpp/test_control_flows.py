"""The seed's VPP control flows (001_...), end to end: scheduler -> VPP southbound -> vpp_papi ->
emulator, with the Linux southbound in a network namespace where host interfaces are involved."""

from __future__ import annotations

import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from kvmesh.vppemu import EmulatorProcess
from scheduler import RetryPolicy, TransactionError, ValueState
from tests.netns import netns_available, temporary_netns
from tests.parallel import scratch_dir
from tests.southbound.vpp.conftest import VppHarness
from tests.util import wait_until

CONFIGURED = ValueState.CONFIGURED
PENDING = ValueState.PENDING
LOOP = {"type": "loopback"}
TAP = "vpp/interface/my-tap"
ROUTE = "vpp/route/0/10.20.0.0/16/10.9.0.2"
ROUTE_VALUE = {"outgoing_interface": "my-tap"}


def executed(harness: VppHarness, seq: int) -> list[tuple[str, str, bool]]:
    """(operation, key, recreate) of what a transaction really did (NOOPs left out)."""
    (record,) = harness.scheduler.transaction_history(seq=seq)
    return [(str(op.op), op.key, op.recreate) for op in record.executed if not op.noop]


def tap(rx_ring_size: int = 256) -> dict:
    return {
        "type": "tap",
        "addresses": ["10.9.0.1/24"],
        "tap": {"rx_ring_size": rx_ring_size},
    }


def test_route_waits_for_its_interface(vpp):
    vpp.commit({ROUTE: ROUTE_VALUE})
    status = vpp.scheduler.get_value_status(ROUTE)
    assert (status.state, status.details) == (PENDING, ("interface my-tap",))
    assert "10.20.0.0/16" not in vpp.vpp_routes()
    seq = vpp.commit({TAP: tap()})
    assert vpp.state(ROUTE) is CONFIGURED
    ops = [(op, key) for op, key, _ in executed(vpp, seq)]
    assert ops.index(("CREATE", TAP)) < ops.index(("CREATE", ROUTE))
    assert vpp.vpp_routes()["10.20.0.0/16"] == [("10.9.0.2", vpp.sw_if_index("my-tap"))]


def test_bridge_domain_exists_with_a_missing_member(vpp):
    bd = "vpp/bd/my-bd"
    members = [{"name": "lo-a"}, {"name": "lo-b"}]
    vpp.commit({bd: {"bd_id": 20, "interfaces": members}, "vpp/interface/lo-a": LOOP})
    assert vpp.state(bd) is CONFIGURED
    assert vpp.state("vpp/bd/my-bd/interface/lo-a") is CONFIGURED
    assert vpp.scheduler.get_value_status("vpp/bd/my-bd/interface/lo-b").state is PENDING
    (domain,) = vpp.papi.api.bridge_domain_dump(bd_id=20)
    assert [m.sw_if_index for m in domain.sw_if_details] == [vpp.sw_if_index("lo-a")]
    seq = vpp.commit({"vpp/interface/lo-b": LOOP})
    assert ("CREATE", "vpp/bd/my-bd/interface/lo-b", False) in executed(vpp, seq)
    (domain,) = vpp.papi.api.bridge_domain_dump(bd_id=20)
    assert len(domain.sw_if_details) == 2


def test_tap_recreated_on_ring_size_change_route_repended_and_restored(vpp):
    vpp.commit({TAP: tap(256), ROUTE: ROUTE_VALUE})
    old = vpp.sw_if_index("my-tap")
    seq = vpp.commit({TAP: tap(1024)})
    ops = executed(vpp, seq)
    order = [(op, key) for op, key, _ in ops if key in (TAP, ROUTE)]
    assert order == [("DELETE", ROUTE), ("DELETE", TAP), ("CREATE", TAP), ("CREATE", ROUTE)]
    assert all(recreate for op, key, recreate in ops if key == TAP)
    new = vpp.sw_if_index("my-tap")
    assert new != old
    (details,) = vpp.papi.api.sw_interface_tap_v2_dump()
    assert (details.sw_if_index, details.rx_ring_sz) == (new, 1024)
    assert vpp.vpp_routes()["10.20.0.0/16"] == [("10.9.0.2", new)]
    assert vpp.state(ROUTE) is CONFIGURED


def test_failed_tap_create_is_retried(vpp):
    vpp.control.fail("tap_create_v3", retval=-167)  # VNET_API_ERROR_BUSY: transient
    with pytest.raises(TransactionError, match=r"VNET_API_ERROR_BUSY \(-167\)"):
        vpp.commit({TAP: tap()}, retry=RetryPolicy(period=0.05, max_count=3, exp_backoff=False))
    assert vpp.state(TAP) in (ValueState.RETRYING, CONFIGURED)
    wait_until(lambda: vpp.state(TAP) is CONFIGURED, timeout=30, message="tap created by a retry")
    assert len(vpp.papi.api.sw_interface_tap_v2_dump()) == 1
    history = vpp.scheduler.transaction_history()
    assert any(str(r.txn_type) == "retry failed ops" for r in history)


def test_tap_create_retried_after_vpp_drops_the_connection(vpp):
    vpp.control.drop_on("tap_create_v3")
    with pytest.raises(TransactionError, match="connection to VPP lost"):
        vpp.commit({TAP: tap()}, retry=RetryPolicy(period=0.1, max_count=10, exp_backoff=True))
    wait_until(lambda: vpp.state(TAP) is CONFIGURED, timeout=30, message="tap created by a retry")
    assert vpp.plugin.connected
    assert len(vpp.papi.api.sw_interface_tap_v2_dump()) == 1


def test_transaction_revert_when_the_route_fails(vpp):
    before = vpp.control.state()
    vpp.control.fail("ip_route_add_del", retval=-7, count=1)
    with pytest.raises(TransactionError) as info:
        vpp.commit({TAP: tap(), ROUTE: ROUTE_VALUE}, revert=True)
    assert set(info.value.errors) == {ROUTE}
    assert "VNET_API_ERROR_INVALID_VALUE (-7)" in str(info.value.errors[ROUTE][1])
    # no visible effect is left in VPP
    assert vpp.control.state() == before
    assert vpp.state(TAP) is ValueState.NONEXISTENT
    assert vpp.papi.api.sw_interface_tap_v2_dump() == []


def test_unnumbered_interface_via_anyof(vpp):
    unnumbered = "vpp/interface/lo-un/unnumbered"
    vpp.commit({"vpp/interface/lo-un": {**LOOP, "unnumbered": {"interface_with_ip": "lo-ip"}}})
    assert vpp.state("vpp/interface/lo-un") is CONFIGURED  # exists in L2 mode meanwhile
    status = vpp.scheduler.get_value_status(unnumbered)
    assert (status.state, status.details) == (PENDING, ("an address of lo-ip",))
    vpp.commit({"vpp/interface/lo-ip": {**LOOP, "addresses": ["192.168.5.1/24"]}})
    assert vpp.state(unnumbered) is CONFIGURED
    borrower = vpp.sw_if_index("lo-un")
    assert [(d.sw_if_index, d.ip_sw_if_index) for d in vpp.papi.api.ip_unnumbered_dump()] == [
        (borrower, vpp.sw_if_index("lo-ip"))
    ]
    vpp.commit({"vpp/interface/lo-ip": LOOP})  # the borrowed address goes
    assert vpp.state(unnumbered) is PENDING
    assert vpp.papi.api.ip_unnumbered_dump() == []
    assert vpp.sw_if_index("lo-un") == borrower  # returned to L2, not deleted


def test_vpp_restart_reconnect_resync_restores_everything(vpp):
    values = {
        TAP: tap(),
        ROUTE: ROUTE_VALUE,
        "vpp/interface/lo1": {**LOOP, "mtu": 1400, "addresses": ["10.1.1.1/24"]},
        "vpp/bd/bd1": {"bd_id": 30, "interfaces": [{"name": "lo1", "bvi": True}]},
    }
    vpp.commit(values)
    disconnected = threading.Event()
    resynced = threading.Event()
    vpp.plugin.on_disconnect(disconnected.set)

    def resync_after_reconnect() -> None:
        vpp.scheduler.resync({}, kind="downstream")
        resynced.set()

    vpp.plugin.on_connect(resync_after_reconnect)
    vpp.papi.disconnect()
    vpp.control.restart(downtime=0.3)
    wait_until(disconnected.is_set, timeout=30, message="the plugin saw VPP go away")
    wait_until(resynced.is_set, timeout=60, message="reconnected and resynced")
    vpp.papi = vpp.papi.__class__(bootstrapapi=True, server_address=vpp.emulator.socket_path)
    vpp.papi.connect("kvmesh-test")
    assert set(vpp.vpp_interfaces()) == {"kvmesh:my-tap", "kvmesh:lo1"}
    lo1 = vpp.sw_if_index("lo1")
    assert vpp.vpp_interfaces()["kvmesh:lo1"].sw_if_index == lo1  # metadata refreshed
    assert vpp.vpp_addresses(lo1) == ["10.1.1.1/24"]
    assert vpp.vpp_routes()["10.20.0.0/16"] == [("10.9.0.2", vpp.sw_if_index("my-tap"))]
    (domain,) = vpp.papi.api.bridge_domain_dump(bd_id=30)
    assert domain.bvi_sw_if_index == lo1
    assert all(vpp.state(key) is CONFIGURED for key in values)


# ---------------------------------------------------------------------- with the Linux southbound
needs_netns = pytest.mark.skipif(not netns_available(), reason="needs root and iproute2")


@pytest.fixture
def netns_vpp() -> Iterator[tuple]:
    """An emulator inside a fresh namespace (af_packet checks host interfaces there), a
    scheduler with both southbounds: Linux on that namespace, VPP on the emulator."""
    import southbound.linux

    workdir = scratch_dir("kvm-vpp-")
    with temporary_netns("kvpp") as ns:
        emulator = EmulatorProcess(str(Path(workdir) / "api.sock"), netns=ns.name)
        harness = None
        linux = None
        try:
            emulator.start()
            harness = VppHarness(emulator)
            linux = southbound.linux.register(harness.scheduler, netns=ns.name)
            yield ns, harness
        finally:
            if linux is not None:
                linux.close()
            if harness is not None:
                harness.close()
            emulator.stop()
            shutil.rmtree(workdir, ignore_errors=True)


@needs_netns
@pytest.mark.netns
def test_af_packet_pending_until_the_host_veth_exists(netns_vpp):
    ns, vpp = netns_vpp
    key = "vpp/interface/afp0"
    vpp.commit({key: {"type": "af_packet", "af_packet": {"host_if_name": "veth-h0"}}})
    status = vpp.scheduler.get_value_status(key)
    assert (status.state, status.details) == (PENDING, ("host interface veth-h0",))
    # created outside kvmesh: the Linux watcher reports it as an OBTAINED host interface
    ns.ip("link", "add", "veth-h0", "type", "veth", "peer", "name", "veth-h0p")
    wait_until(
        lambda: vpp.state("linux/interface/host/veth-h0") is ValueState.OBTAINED,
        timeout=30,
        message="host interface obtained",
    )
    wait_until(lambda: vpp.state(key) is CONFIGURED, timeout=30, message="af_packet created")
    assert [d.host_if_name for d in vpp.papi.api.af_packet_dump()] == ["veth-h0"]
    assert "kvmesh:afp0" in vpp.vpp_interfaces()
    # the host interface goes away: the af_packet interface is removed and waits again
    ns.ip("link", "del", "veth-h0")
    wait_until(lambda: vpp.state(key) is PENDING, timeout=30, message="af_packet pending again")
    assert vpp.papi.api.af_packet_dump() == []


@needs_netns
@pytest.mark.netns
def test_af_packet_on_a_veth_configured_through_the_linux_southbound(netns_vpp):
    ns, vpp = netns_vpp
    afp = "vpp/interface/afp1"
    seq = vpp.commit(
        {
            afp: {"type": "af_packet", "af_packet": {"host_if_name": "veth-k0"}},
            "linux/interface/veth-k0": {"type": "veth", "veth": {"peer": "veth-k0p"}},
            "linux/interface/veth-k0p": {"type": "veth", "veth": {"peer": "veth-k0"}},
        }
    )
    assert vpp.state(afp) is CONFIGURED
    ops = [(op, key) for op, key, _ in executed(vpp, seq)]
    assert ops.index(("CREATE", "linux/interface/veth-k0")) < ops.index(("CREATE", afp))
    assert "veth-k0" in ns.link_names()
    assert [d.host_if_name for d in vpp.papi.api.af_packet_dump()] == ["veth-k0"]

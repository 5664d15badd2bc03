"""`vpp/lcp/<vpp interface>`: one desired state across both planes. VPP (the emulator) makes
the pair's host tap for real in a namespace; the Linux southbound, watching that namespace, sees
it appear and configures it; the scheduler orders it all."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import southbound.linux
import southbound.vpp
from scheduler import KVScheduler, TransactionError, ValueState
from tests.netns import netns_available, temporary_netns
from tests.util import wait_until

pytestmark = [pytest.mark.process, pytest.mark.netns,
              pytest.mark.skipif(not netns_available(), reason="needs root and iproute2")]

LOOP = "vpp/interface/up0"
PAIR = "vpp/lcp/up0"
HOST = "linux/interface/vpp-up0"
ROUTE = "linux/route/main/10.66.0.0/24/vpp-up0"


@pytest.fixture
def planes(emulator, tmp_path) -> Iterator[tuple[KVScheduler, object]]:
    with temporary_netns("lcp") as ns:
        scheduler = KVScheduler()
        vpp = southbound.vpp.register(scheduler, socket=emulator.socket_path)
        linux = southbound.linux.register(scheduler, netns=ns.name, state_dir=str(tmp_path))
        try:
            yield scheduler, ns
        finally:
            linux.close()
            vpp.close()
            scheduler.close()


def commit(scheduler: KVScheduler, values: dict) -> None:
    txn = scheduler.start_txn()
    for key, value in values.items():
        txn.set_value(key, value)
    txn.commit()


def state(scheduler: KVScheduler, key: str) -> ValueState:
    return scheduler.get_value_status(key).state


def test_linux_values_wait_for_the_vpp_twin_then_apply(planes):
    scheduler, ns = planes
    # The Linux side first: it waits for the link VPP makes.
    commit(scheduler, {HOST: {"type": "existing", "addresses": ["10.65.0.1/24"]},
                       ROUTE: {"dst": "10.66.0.0/24", "dev": "vpp-up0",
                               "gateway": "10.65.0.2"}})
    assert state(scheduler, HOST) == ValueState.PENDING
    commit(scheduler, {LOOP: {"type": "loopback", "mtu": 1500},
                       PAIR: {"host_if_name": "vpp-up0", "netns": ns.name}})
    assert state(scheduler, PAIR) == ValueState.CONFIGURED
    wait_until(lambda: state(scheduler, HOST) == ValueState.CONFIGURED
               and state(scheduler, ROUTE) == ValueState.CONFIGURED, timeout=10,
               message="the Linux values applied once VPP made the host tap")
    assert ns.addresses("vpp-up0") == ["10.65.0.1/24"]
    assert ns.link("vpp-up0")["mtu"] == 1500
    assert "10.66.0.0/24 via 10.65.0.2" in ns.ip("route")
    # Removing the pair: the Linux values go back to waiting, nothing of theirs is deleted.
    commit(scheduler, {PAIR: None})
    wait_until(lambda: state(scheduler, HOST) == ValueState.PENDING, timeout=10,
               message="the Linux value pending again once the host tap went")
    assert ns.link("vpp-up0") is None


def test_pair_rules_and_vpps_refusal(planes):
    scheduler, ns = planes
    with pytest.raises(TransactionError):
        commit(scheduler, {PAIR: {"host_if_name": "a name that is far too long"}})
    assert scheduler.get_value_status(PAIR).details == ("host_if_name",)
    ns.ip("link", "add", "taken", "type", "veth", "peer", "name", "taken-p")
    with pytest.raises(TransactionError):
        commit(scheduler, {LOOP: {"type": "loopback"},
                           PAIR: {"host_if_name": "taken", "netns": ns.name}})
    status = scheduler.get_value_status(PAIR)
    assert status.state in (ValueState.FAILED, ValueState.RETRYING)
    assert "SYSCALL_ERROR_1" in status.error_message
    assert ns.link("taken") is not None  # never deleted: kvmesh did not make it

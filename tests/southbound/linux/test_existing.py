"""``"type": "existing"``: links kvmesh did not create (a node's ``eth0``), configured but never
deleted, through a real KVScheduler in a namespace per test."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler import TransactionError, ValueState
from tests.netns import Netns
from tests.southbound.linux.harness import (
    agent,
    assert_warm_restart_writes_nothing,
    commit,
    last_ops,
    last_record,
    state,
)
from tests.util import wait_until

pytestmark = pytest.mark.netns

CONFIGURED, PENDING = ValueState.CONFIGURED, ValueState.PENDING
E0 = "linux/interface/e0"


def existing(**fields: Any) -> dict[str, Any]:
    return {"type": "existing", **fields}


def host_link(ns: Netns, *addresses: str, mtu: int = 1500) -> None:
    """``e0``, made by hand (down, its own addresses), as an operator's NIC would be."""
    ns.ip("link", "add", "e0", "mtu", str(mtu), "type", "veth", "peer", "name", "e1")
    for cidr in addresses:
        ns.ip("addr", "add", cidr, "dev", "e0")


def link_state(ns: Netns) -> tuple[int, bool, str | None, int]:
    link = ns.link("e0")
    assert link is not None
    return link["mtu"], "UP" in link["flags"], link.get("master"), link["ifindex"]


def test_existing_link_waits_is_configured_updated_in_place_and_restored(linux) -> None:
    ns, scheduler, _plugin = linux
    commit(scheduler, {E0: existing(mtu=1400, addresses=["10.20.0.1/24", "fd00:20::1/64"])})
    status = scheduler.get_value_status(E0)
    assert status.state is PENDING and status.details == ("existing link e0",)
    host_link(ns, "10.20.0.9/24")
    wait_until(lambda: state(scheduler, E0) is CONFIGURED, timeout=15,
               message="existing link configured once it appears")
    mtu, up, _master, index = link_state(ns)
    assert (mtu, up) == (1400, True)
    assert sorted(ns.addresses("e0")) == ["10.20.0.1/24", "10.20.0.9/24", "fd00:20::1/64"]
    assert ns.link("e0")["group"] == "default", "kvmesh does not take the link over"
    assert state(scheduler, "linux/interface/host/e0") is ValueState.OBTAINED
    # Update in place: new MTU, one address less, one more.
    commit(scheduler, {E0: existing(mtu=1300, addresses=["10.20.0.1/24", "10.21.0.1/24"])})
    assert last_ops(scheduler, E0) == [("UPDATE", False)]
    assert link_state(ns)[0::3] == (1300, index)
    assert sorted(ns.addresses("e0")) == ["10.20.0.1/24", "10.20.0.9/24", "10.21.0.1/24"]
    # Delete: the link stays, with what it had before kvmesh.
    commit(scheduler, {E0: None})
    assert link_state(ns) == (1500, False, None, index)
    assert ns.addresses("e0") == ["10.20.0.9/24"]


def test_addresses_the_link_already_had_are_never_removed(ns) -> None:
    host_link(ns, "10.30.0.1/24", "fd00:30::1/64")
    values = {E0: existing(addresses=["10.30.0.1/24", "10.31.0.1/24", "fd00:30::1/64"])}
    with agent(ns) as (scheduler, _plugin):
        commit(scheduler, values)
        assert sorted(ns.addresses("e0")) == ["10.30.0.1/24", "10.31.0.1/24", "fd00:30::1/64"]
    # Even after a restart (which forgets what kvmesh recorded), the marker in the kernel says
    # which addresses kvmesh added.
    with agent(ns) as (scheduler, _plugin):
        scheduler.resync(values, kind="full")
        assert not last_record(scheduler).executed
        commit(scheduler, {E0: None})
        assert sorted(ns.addresses("e0")) == ["10.30.0.1/24", "fd00:30::1/64"]
        assert ns.link("e0") is not None


def test_removing_kvmeshs_address_keeps_the_operators_in_the_same_subnet(linux) -> None:
    """The kernel deletes an IPv4 subnet's secondary addresses with its primary unless the link
    promotes them: kvmesh's address, added first, was primary, and removing it took the
    operator's 10.20.0.9/24 (added after it) with it. Found in a loaded CI run, where the link's
    address arrived after kvmesh had configured the link."""
    ns, scheduler, _plugin = linux
    host_link(ns)
    wait_until(lambda: state(scheduler, "linux/interface/host/e0") is ValueState.OBTAINED,
               timeout=15)
    commit(scheduler, {E0: existing(addresses=["10.20.0.1/24"])})
    ns.ip("addr", "add", "10.20.0.9/24", "dev", "e0")  # the operator's: a secondary now
    promote = "/proc/sys/net/ipv4/conf/e0/promote_secondaries"
    before = ns.exec("cat", promote).stdout.strip()
    commit(scheduler, {E0: None})
    assert ns.addresses("e0") == ["10.20.0.9/24"]
    assert ns.exec("cat", promote).stdout.strip() == before, "the sysctl is as it was"


def test_master_is_set_and_the_original_master_restored(linux) -> None:
    ns, scheduler, _plugin = linux
    ns.ip("link", "add", "hostbr", "type", "bridge")
    host_link(ns)
    ns.ip("link", "set", "e0", "master", "hostbr")
    commit(scheduler, {"linux/interface/br0": {"type": "bridge"}})
    wait_until(lambda: state(scheduler, "linux/interface/host/e0") is ValueState.OBTAINED,
               timeout=15)
    commit(scheduler, {E0: existing(master="br0")})
    assert link_state(ns)[2] == "br0"
    # The bridge goes first: the binding is removed before it, the link stays configured.
    commit(scheduler, {"linux/interface/br0": None})
    assert state(scheduler, "linux/interface/e0/master") is PENDING
    assert state(scheduler, E0) is CONFIGURED
    commit(scheduler, {"linux/interface/br0": {"type": "bridge"}})
    assert link_state(ns)[2] == "br0"
    commit(scheduler, {E0: None})
    assert link_state(ns)[2] == "hostbr"


def test_a_type_change_restores_the_link_and_never_takes_it_over(linux) -> None:
    ns, scheduler, _plugin = linux
    host_link(ns, "10.70.0.9/24")
    wait_until(lambda: state(scheduler, "linux/interface/host/e0") is ValueState.OBTAINED,
               timeout=15)
    commit(scheduler, {E0: existing(mtu=1400, addresses=["10.70.0.1/24"])})
    index = link_state(ns)[3]
    # Another type re-creates: the existing link is restored, and a kvmesh bridge of that name
    # is refused while the host link has it.
    with pytest.raises(TransactionError):
        commit(scheduler, {E0: {"type": "bridge"}})
    assert [op for op, _ in last_ops(scheduler, E0)] == ["DELETE", "CREATE"]
    assert link_state(ns) == (1500, False, None, index)
    assert ns.addresses("e0") == ["10.70.0.9/24"]
    status = scheduler.get_value_status(E0)
    assert "not owned by kvmesh" in str(status.error)


def test_drift_on_an_existing_link_is_repaired_and_its_own_addresses_kept(linux) -> None:
    ns, scheduler, _plugin = linux
    host_link(ns, "10.40.0.9/24")
    wait_until(lambda: state(scheduler, "linux/interface/host/e0") is ValueState.OBTAINED,
               timeout=15)
    commit(scheduler, {E0: existing(mtu=1400, addresses=["10.40.0.1/24", "fd00:40::1/64"])})
    before = ns.dump()
    ns.ip("addr", "del", "10.40.0.1/24", "dev", "e0")
    ns.ip("-6", "addr", "del", "fd00:40::1/64", "dev", "e0")
    ns.ip("addr", "add", "10.40.0.77/24", "dev", "e0")  # someone else's: not kvmesh's to remove
    ns.ip("link", "set", "e0", "mtu", "1500")
    ns.ip("link", "set", "e0", "down")
    scheduler.resync(kind="downstream")
    after = ns.dump()
    assert sorted(ns.addresses("e0")) == ["10.40.0.1/24", "10.40.0.77/24", "10.40.0.9/24",
                                          "fd00:40::1/64"]
    assert after["links"] == before["links"]
    scheduler.resync(kind="downstream")
    assert not last_record(scheduler).executed


def test_warm_restart_with_an_existing_link_writes_nothing(ns) -> None:
    host_link(ns, "10.50.0.9/24")
    assert_warm_restart_writes_nothing(ns, {
        E0: existing(mtu=1400, addresses=["10.50.0.1/24"]),
        "linux/route/main/10.55.0.0/16/e0": {"gateway": "10.50.0.2"},
    })


def test_the_link_going_away_pends_the_value_and_it_is_applied_again(linux) -> None:
    ns, scheduler, _plugin = linux
    host_link(ns)
    wait_until(lambda: state(scheduler, "linux/interface/host/e0") is ValueState.OBTAINED,
               timeout=15)
    commit(scheduler, {E0: existing(addresses=["10.60.0.1/24"])})
    ns.ip("link", "del", "e0")
    wait_until(lambda: state(scheduler, E0) is PENDING, timeout=15,
               message="existing link pending once gone")
    host_link(ns)
    wait_until(lambda: state(scheduler, E0) is CONFIGURED, timeout=15,
               message="existing link configured again")
    assert ns.addresses("e0") == ["10.60.0.1/24"]


@pytest.mark.parametrize(("value", "field", "fragment"), [
    (existing(mac="02:00:00:00:00:01"), "mac", "not managed for type 'existing'"),
    (existing(veth={"peer": "x"}), "veth", "only allowed with type 'veth'"),
    (existing(mtu=20), "mtu", "68..65535"),
])
def test_bad_existing_values_are_invalid_with_a_one_line_reason(linux, value, field,
                                                                fragment) -> None:
    ns, scheduler, _plugin = linux
    host_link(ns)
    with pytest.raises(TransactionError):
        commit(scheduler, {E0: value})
    status = scheduler.get_value_status(E0)
    assert status.state is ValueState.INVALID and field in status.details
    assert fragment in str(status.error) and "\n" not in str(status.error)
    assert link_state(ns)[:3] == (1500, False, None)

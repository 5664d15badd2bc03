"""linux/sysctl/<name> through a real scheduler and plugin, in a namespace per test; and the
per-namespace sysctl access it is built on."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from scheduler import TransactionError, TxnOperation, ValueState
from southbound.linux.procsys import ProcSys, sysctl_path
from tests.southbound.linux.harness import commit, last_writes, linux_plugin, state, veth_pair
from tests.util import wait_until

pytestmark = pytest.mark.netns

CONFIGURED = ValueState.CONFIGURED
PENDING = ValueState.PENDING
FORWARD = "linux/sysctl/net.ipv4.ip_forward"
FORWARD6 = "linux/sysctl/net.ipv6.conf.all.forwarding"
RP = "linux/sysctl/net.ipv4.conf.s0.rp_filter"
PROXY = "linux/sysctl/net.ipv4.conf.s0.proxy_arp"


def sysctl(ns: Any, name: str) -> str:
    return ns.exec("sysctl", "-n", name).stdout.strip()


def sysctl_write(ns: Any, name: str, value: str) -> None:
    ns.exec("sysctl", "-qw", f"{name}={value}")


@pytest.fixture(autouse=True)
def _not_forwarding(ns: Any) -> None:
    """Each test's namespace starts not forwarding, as the tests assume. A new namespace copies
    the host's IPv4 settings (net.core.devconf_inherit_init_net=0), and a host that forwards
    (docker, another engineer's router test) made these tests fail on a shared machine."""
    sysctl_write(ns, "net.ipv4.ip_forward", "0")
    sysctl_write(ns, "net.ipv6.conf.all.forwarding", "0")


def originals(state_dir: Path) -> dict[str, str]:
    files = list(state_dir.glob("sysctl-originals-*.json"))
    if not files:
        return {}
    (path,) = files
    result: dict[str, str] = json.loads(path.read_text())["originals"]
    return result


def test_a_helper_thread_reads_and_writes_the_namespaces_own_sysctls(ns) -> None:
    path = sysctl_path("net.ipv4.ip_forward")
    host = ProcSys(None).read([path])[path]
    assert host is not None
    inside = "0" if host == "1" else "1"
    sysctl_write(ns, "net.ipv4.ip_forward", inside)
    assert ProcSys(ns.name).read([path]) == {path: inside}
    other = host  # the value of the test's own namespace
    assert ProcSys(ns.name).write(path, other)
    assert sysctl(ns, "net.ipv4.ip_forward") == other
    assert ProcSys(None).read([path])[path] == host  # the caller's namespace is untouched
    assert ProcSys(ns.name).read(["/proc/sys/net/ipv4/conf/nope/rp_filter"]) == {
        "/proc/sys/net/ipv4/conf/nope/rp_filter": None}


def test_set_update_and_delete_restores_the_original(ns, tmp_path) -> None:
    state_dir = tmp_path / "state"
    assert sysctl(ns, "net.ipv4.ip_forward") == "0"
    with linux_plugin(ns.name, state_dir=str(state_dir)) as (scheduler, _plugin):
        commit(scheduler, {FORWARD: {"value": "1"}, FORWARD6: {"value": "1"}})
        assert state(scheduler, FORWARD) is CONFIGURED
        assert sysctl(ns, "net.ipv4.ip_forward") == "1"
        assert sysctl(ns, "net.ipv6.conf.all.forwarding") == "1"
        # The originals are on disk, private to root.
        assert originals(state_dir) == {"net.ipv4.ip_forward": "0",
                                        "net.ipv6.conf.all.forwarding": "0"}
        (path,) = state_dir.glob("sysctl-originals-*.json")
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        assert stat.S_IMODE(os.stat(state_dir).st_mode) == 0o700
        commit(scheduler, {FORWARD6: {"value": "0"}})
        assert [op.op for op in scheduler.transaction_history()[-1].executed] == [
            TxnOperation.UPDATE]
        assert sysctl(ns, "net.ipv6.conf.all.forwarding") == "0"
        commit(scheduler, {FORWARD: None, FORWARD6: None})
        assert sysctl(ns, "net.ipv4.ip_forward") == "0"
        assert originals(state_dir) == {}


def test_originals_survive_a_restart(ns, tmp_path) -> None:
    sysctl_write(ns, "net.ipv4.ip_forward", "1")  # what the namespace had before kvmesh
    with linux_plugin(ns.name, state_dir=str(tmp_path)) as (scheduler, _plugin):
        commit(scheduler, {FORWARD: {"value": "0"}})
    assert sysctl(ns, "net.ipv4.ip_forward") == "0"
    with linux_plugin(ns.name, state_dir=str(tmp_path)) as (scheduler, _plugin):
        scheduler.resync({FORWARD: {"value": "0"}}, kind="full")
        assert last_writes(scheduler) == 0  # a warm restart writes nothing
        assert state(scheduler, FORWARD) is CONFIGURED
        commit(scheduler, {FORWARD: None})
    assert sysctl(ns, "net.ipv4.ip_forward") == "1"


def test_a_full_resync_restores_what_is_no_longer_desired(ns, tmp_path) -> None:
    with linux_plugin(ns.name, state_dir=str(tmp_path)) as (scheduler, _plugin):
        commit(scheduler, {FORWARD: {"value": "1"}})
    with linux_plugin(ns.name, state_dir=str(tmp_path)) as (scheduler, _plugin):
        scheduler.resync({}, kind="full")
    assert sysctl(ns, "net.ipv4.ip_forward") == "0"
    assert originals(tmp_path) == {}


def test_downstream_resync_repairs_drift(ns, tmp_path) -> None:
    name = "net.ipv4.conf.all.rp_filter"
    sysctl_write(ns, name, "0")
    with linux_plugin(ns.name, state_dir=str(tmp_path)) as (scheduler, _plugin):
        commit(scheduler, {f"linux/sysctl/{name}": {"value": "2"}})
        sysctl_write(ns, name, "1")
        scheduler.resync(kind="downstream")
        assert sysctl(ns, name) == "2"
        scheduler.resync(kind="downstream")
        assert last_writes(scheduler) == 0
        # The drift did not overwrite the original: delete still restores the first value.
        commit(scheduler, {f"linux/sysctl/{name}": None})
        assert sysctl(ns, name) == "0"


def test_originals_of_another_namespace_are_discarded(ns, tmp_path) -> None:
    # Left by a namespace of the same name that was deleted since (another identity).
    stale = tmp_path / f"sysctl-originals-{ns.name}.json"
    stale.write_text(json.dumps({"format": 1, "netns_id": "0:1",
                                 "originals": {"net.ipv4.ip_forward": "1"}}))
    with linux_plugin(ns.name, state_dir=str(tmp_path)) as (scheduler, _plugin):
        scheduler.resync({}, kind="full")
        assert last_writes(scheduler) == 0
        commit(scheduler, {FORWARD: {"value": "1"}})
        commit(scheduler, {FORWARD: None})
    assert sysctl(ns, "net.ipv4.ip_forward") == "0"


def test_per_link_names_wait_for_the_link(ns, tmp_path) -> None:
    host = "linux/sysctl/net.ipv6.conf.h0.accept_ra"
    with linux_plugin(ns.name, state_dir=str(tmp_path)) as (scheduler, _plugin):
        commit(scheduler, {RP: {"value": "2"}, PROXY: {"value": "1"}, host: {"value": "0"}})
        status = scheduler.get_value_status(RP)
        assert status.state is PENDING and status.details == ("interface s0",)
        commit(scheduler, veth_pair("s0", "s1"))
        assert state(scheduler, RP) is CONFIGURED and state(scheduler, PROXY) is CONFIGURED
        assert sysctl(ns, "net.ipv4.conf.s0.rp_filter") == "2"
        assert sysctl(ns, "net.ipv4.conf.s0.proxy_arp") == "1"
        # A host link (made by hand) satisfies the dependency too.
        ns.ip("link", "add", "h0", "type", "bridge")
        wait_until(lambda: state(scheduler, host) is CONFIGURED, timeout=15,
                   message="sysctl of the host link configured")
        assert sysctl(ns, "net.ipv6.conf.h0.accept_ra") == "0"
        # The link goes: its sysctls are restored first, then wait again.
        commit(scheduler, dict.fromkeys(veth_pair("s0", "s1")))
        ops = [(op.op, op.key) for op in scheduler.transaction_history()[-1].executed]
        assert ops.index((TxnOperation.DELETE, RP)) < ops.index(
            (TxnOperation.DELETE, "linux/interface/s0"))
        assert state(scheduler, RP) is PENDING
        assert set(originals(tmp_path)) == {"net.ipv6.conf.h0.accept_ra"}


def test_sysctls_kvmesh_never_wrote_are_never_touched(ns, tmp_path) -> None:
    sysctl_write(ns, "net.ipv4.ip_forward", "1")
    sysctl_write(ns, "net.ipv4.conf.all.rp_filter", "2")
    with linux_plugin(ns.name, state_dir=str(tmp_path)) as (scheduler, _plugin):
        scheduler.resync({}, kind="full")
        assert last_writes(scheduler) == 0
        # Desired and already so: owned from now on (the original is recorded), no write.
        commit(scheduler, {FORWARD: {"value": "1"}})
        assert originals(tmp_path) == {"net.ipv4.ip_forward": "1"}
        commit(scheduler, {FORWARD: None})
    assert sysctl(ns, "net.ipv4.ip_forward") == "1"
    assert sysctl(ns, "net.ipv4.conf.all.rp_filter") == "2"


@pytest.mark.parametrize(("key", "value", "reason"), [
    ("linux/sysctl/kernel.panic", {"value": "1"}, "not on kvmesh's allow-list"),
    ("linux/sysctl/net.ipv4.tcp_syncookies", {"value": "1"}, "not on kvmesh's allow-list"),
    (FORWARD, {"value": "2"}, "field 'value': must be one of 0, 1, got '2'"),
    (FORWARD, {"value": 1}, "field 'value': must be a string"),
    (RP, {"value": "3"}, "field 'value': must be one of 0, 1, 2"),
    ("linux/sysctl/net.ipv4.conf.a:b.rp_filter", {"value": "1"}, "device 'a:b'"),
])
def test_bad_values_are_invalid_with_a_one_line_reason(ns, tmp_path, key, value,
                                                       reason) -> None:
    with linux_plugin(ns.name, state_dir=str(tmp_path)) as (scheduler, _plugin):
        with pytest.raises(TransactionError):
            commit(scheduler, {key: value})
        status = scheduler.get_value_status(key)
        assert status.state is ValueState.INVALID
        assert reason in str(status.error) and "\n" not in str(status.error)
    assert originals(tmp_path) == {}

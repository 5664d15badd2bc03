"""The nftables model through a real KVScheduler and the Linux plugin, against the kernel's
nftables in a namespace per test (``nft`` run by the test to look and to tamper)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from functools import partial
from typing import Any

import pytest

from scheduler import KVScheduler, RetryPolicy, TransactionError, TxnOperation, ValueState
from southbound.linux import register
from southbound.linux.models.nftables import NAME as DESCRIPTOR_NAME
from southbound.linux.nft_table import MARKER_CHAIN, find_marker
from tests.netns import Netns, temporary_netns
from tests.util import wait_until

pytestmark = pytest.mark.netns

KEY = "linux/nftables/inet/kvf"
CONFIGURED = ValueState.CONFIGURED


def tcp_dport(port: int | str) -> dict[str, Any]:
    return {"match": {"op": "==", "left": {"payload": {"protocol": "tcp", "field": "dport"}},
                      "right": port}}


def filter_table(*ports: int, policy: str = "accept") -> dict[str, Any]:
    """inet table: an input chain dropping TCP to the ``blocked`` set, plus one rule per port."""
    return {
        "chains": [{"name": "input", "type": "filter", "hook": "input", "prio": 0,
                    "policy": policy},
                   {"name": "extra"}],
        "sets": [{"name": "blocked", "type": "inet_service", "elem": [9999]}],
        "rules": [{"chain": "input", "expr": [tcp_dport("@blocked"), {"drop": None}]},
                  *({"chain": "input", "expr": [tcp_dport(port), {"counter": None},
                                                {"drop": None}],
                     "comment": f"port {port}"} for port in ports)],
    }


def nft(ns: Netns, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return ns.exec("nft", *args, check=check)


def table(ns: Netns, family: str, name: str) -> list[dict[str, Any]] | None:
    result = nft(ns, "-j", "list", "table", family, name, check=False)
    if result.returncode != 0:
        return None
    return [item for item in json.loads(result.stdout)["nftables"] if "metainfo" not in item]


def rules_of(ns: Netns, family: str, name: str, chain: str = "input") -> list[list[Any]]:
    return [item["rule"]["expr"] for item in table(ns, family, name) or []
            if "rule" in item and item["rule"]["chain"] == chain]


def tables(ns: Netns) -> set[tuple[str, str]]:
    listing = json.loads(nft(ns, "-j", "list", "tables").stdout)["nftables"]
    return {(item["table"]["family"], item["table"]["name"]) for item in listing
            if "table" in item}


def baseline_recorded(ns: Netns, family: str, name: str) -> bool:
    objects = table(ns, family, name)
    marker = find_marker(objects) if objects is not None else None
    return marker is not None and marker.baseline is not None


def commit(scheduler: KVScheduler, values: dict[str, Any], **options: Any) -> None:
    txn = scheduler.start_txn()
    for key, value in values.items():
        txn.set_value(key, value)
    txn.commit(**options)


def state(scheduler: KVScheduler, key: str) -> ValueState:
    return scheduler.get_value_status(key).state


@contextmanager
def plugin_in(ns: Netns) -> Iterator[KVScheduler]:
    scheduler = KVScheduler()
    plugin = None
    try:
        plugin = register(scheduler, ns.name)
        yield scheduler
    finally:
        if plugin is not None:
            plugin.close()
        scheduler.close()


@pytest.fixture
def linux(ns: Netns) -> Iterator[tuple[Netns, KVScheduler]]:
    with plugin_in(ns) as scheduler:
        yield ns, scheduler


def applied(scheduler: KVScheduler, ns: Netns, values: dict[str, Any]) -> None:
    """Commit, then wait until the marker carries its baseline (recorded right after)."""
    commit(scheduler, values)
    for key, value in values.items():
        if value is not None and state(scheduler, key) is CONFIGURED:
            family, name = key.split("/")[2:4]
            wait_until(partial(baseline_recorded, ns, family, name), timeout=10)


class Monitor:
    """``nft monitor`` in a namespace: counts nftables transactions (generations) between two
    marks. A mark is a probe table added by hand: once the monitor shows it, everything before
    it has been reported."""

    def __init__(self, ns: Netns) -> None:
        self.ns = ns
        self.lines: list[str] = []
        self._lock = threading.Lock()
        self._probes = 0
        self.process = subprocess.Popen(["ip", "netns", "exec", ns.name, "nft", "monitor"],
                                        stdout=subprocess.PIPE, text=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            with self._lock:
                self.lines.append(line.strip())

    def _seen(self, text: str) -> int | None:
        with self._lock:
            return self.lines.index(text) + 1 if text in self.lines else None

    def _probe(self) -> str:
        self._probes += 1
        probe = f"kvprobe{self._probes}"
        nft(self.ns, "add", "table", "ip", probe)
        return f"add table ip {probe}"

    def mark(self) -> int:
        """Line index just past a fresh probe (every transaction before the probe is reported
        in ``lines[:index]``)."""
        probe = self._probe()
        index = wait_until(lambda: self._seen(probe), timeout=10,
                           message=f"nft monitor shows {probe}")
        assert index is not None
        return index

    def start(self) -> None:
        """Wait until the monitor listens: probe until one is reported (earlier ones may have
        come before it subscribed)."""
        wait_until(lambda: self._seen(self._probe()), timeout=10, interval=0.1,
                   message="nft monitor reports a probe")

    def transactions(self, start: int, end: int) -> list[list[str]]:
        """The transactions reported between two marks (each: its lines), probes left out."""
        with self._lock:
            window = self.lines[start:end]
        found: list[list[str]] = []
        current: list[str] = []
        for line in window:
            if line.startswith("# new generation"):
                if current and not all("kvprobe" in item for item in current):
                    found.append(current)
                current = []
            else:
                current.append(line)
        return found

    def close(self) -> None:
        self.process.kill()
        self.process.wait(timeout=10)
        self._reader.join(timeout=10)


@pytest.fixture
def monitor(ns: Netns) -> Iterator[Monitor]:
    watching = Monitor(ns)
    try:
        watching.start()
        yield watching
    finally:
        watching.close()


# -- create, update, delete -----------------------------------------------------------------


def test_create_update_delete(linux, monitor: Monitor) -> None:
    ns, scheduler = linux
    applied(scheduler, ns, {KEY: filter_table(22)})
    assert state(scheduler, KEY) is CONFIGURED
    assert rules_of(ns, "inet", "kvf") == [
        [tcp_dport("@blocked"), {"drop": None}],
        [tcp_dport(22), {"counter": {"packets": 0, "bytes": 0}}, {"drop": None}]]
    listed = table(ns, "inet", "kvf") or []
    chains = {item["chain"]["name"]: item["chain"] for item in listed if "chain" in item}
    assert chains["input"]["policy"] == "accept" and set(chains) == {"input", "extra",
                                                                     MARKER_CHAIN}
    sets = [item["set"] for item in listed if "set" in item]
    assert [(s["name"], s["elem"]) for s in sets] == [("blocked", [9999])]

    # Update: the whole table replaced in one nftables transaction.
    start = monitor.mark()
    applied(scheduler, ns, {KEY: filter_table(23, 24, policy="drop")})
    end = monitor.mark()
    assert [r[0] for r in rules_of(ns, "inet", "kvf")] == [
        tcp_dport("@blocked"), tcp_dport(23), tcp_dport(24)]
    replace, *after = monitor.transactions(start, end)
    # One generation: the old table goes and the new one comes in the same kernel transaction.
    assert replace.index("delete table inet kvf") < replace.index("add table inet kvf")
    assert any("policy drop" in line for line in replace)
    assert any("dport 24" in line for line in replace)
    # ... then the marker alone learns its baseline: not a change of the table's content.
    assert len(after) == 1 and all(MARKER_CHAIN in line for line in after[0]), after
    assert scheduler.transaction_history()[-1].executed[0].op is TxnOperation.UPDATE

    # Delete: only that table goes.
    nft(ns, "add", "table", "inet", "bystander")
    commit(scheduler, {KEY: None})
    assert ("inet", "kvf") not in tables(ns) and ("inet", "bystander") in tables(ns)
    assert state(scheduler, KEY) is ValueState.NONEXISTENT


def test_a_failed_update_leaves_the_previous_table_whole(linux) -> None:
    ns, scheduler = linux
    applied(scheduler, ns, {KEY: filter_table(22)})
    before = table(ns, "inet", "kvf")
    broken = filter_table(22)
    broken["rules"].append({"chain": "input", "expr": [
        {"match": {"op": "==", "left": {"payload": {"protocol": "tcp", "field": "nosuchfield"}},
                   "right": 1}}, {"drop": None}]})
    with pytest.raises(TransactionError):
        commit(scheduler, {KEY: broken}, retry=RetryPolicy(period=60))
    status = scheduler.get_value_status(KEY)
    assert status.state is ValueState.FAILED, status  # not retried: nft said it is wrong
    assert "nft: Unknown tcp field 'nosuchfield'" in str(status.error)
    assert "\n" not in str(status.error)
    assert table(ns, "inet", "kvf") == before


def test_a_table_nft_refuses_fails_with_its_reason_and_leaves_nothing(linux) -> None:
    ns, scheduler = linux
    value = {"chains": [{"name": "c"}],
             "rules": [{"chain": "c", "expr": [{"jump": {"target": "missing"}}]}]}
    with pytest.raises(TransactionError):
        commit(scheduler, {KEY: value})
    status = scheduler.get_value_status(KEY)
    assert status.state is ValueState.FAILED
    assert "create table inet kvf: nft: Could not process rule: No such file or directory" in \
        str(status.error), status.error
    assert ("inet", "kvf") not in tables(ns)


def test_invalid_values_are_refused_before_nft_runs(linux) -> None:
    ns, scheduler = linux
    bad = {
        "linux/nftables/ipx/t": {},
        "linux/nftables/ip/t0": {"chains": [{"name": "c", "type": "filter"}]},
        "linux/nftables/ip/t1": {"name": "other", "chains": [{"name": "c"}], "rules": [
            {"chain": "c", "family": "ip6", "expr": [{"accept": None}]}]},
        "linux/nftables/ip/t2": {"chains": [{"name": "c", "type": "filter", "hook": "input",
                                             "prio": "filter"}]},
        "linux/nftables/ip/t3": {"chains": [{"name": "c"}],
                                 "rules": [{"chain": "d", "expr": [{"accept": None}]}]},
        "linux/nftables/ip/t4": {"chains": [{"name": MARKER_CHAIN}]},
        "linux/nftables/host/ip/t5": {},
    }
    with pytest.raises(TransactionError):
        commit(scheduler, bad)
    reasons = {key: scheduler.get_value_status(key) for key in bad}
    assert all(status.state is ValueState.INVALID for status in reasons.values()), reasons
    assert "family must be one of ip, ip6, inet, arp, bridge, netdev" in str(
        reasons["linux/nftables/ipx/t"].error)
    assert reasons["linux/nftables/ip/t0"].details == ("chains[0].hook",)
    assert "a base chain needs type, hook and prio" in str(reasons["linux/nftables/ip/t0"].error)
    assert reasons["linux/nftables/ip/t1"].details == ("name", "rules[0].family")
    assert reasons["linux/nftables/ip/t2"].details == ("chains[0].prio",)
    assert "no chain 'd' in chains" in str(reasons["linux/nftables/ip/t3"].error)
    assert "reserved" in str(reasons["linux/nftables/ip/t4"].error)
    assert "read-only" in str(reasons["linux/nftables/host/ip/t5"].error)
    assert tables(ns) == set()


def test_plan_of_an_unchanged_table_is_empty(linux) -> None:
    ns, scheduler = linux
    applied(scheduler, ns, {KEY: filter_table(22)})
    assert scheduler.plan({KEY: filter_table(22)}) == []
    assert scheduler.plan({KEY: filter_table(22)}, resync="full") == []
    [op] = scheduler.plan({KEY: filter_table(23)})
    assert op.op is TxnOperation.UPDATE and op.key == KEY


def test_netdev_chain_waits_for_its_device(linux) -> None:
    ns, scheduler = linux
    key = "linux/nftables/netdev/ingress"
    value = {"chains": [{"name": "in", "type": "filter", "hook": "ingress", "prio": 0,
                         "dev": "nd0", "policy": "accept"}]}
    commit(scheduler, {key: value})
    status = scheduler.get_value_status(key)
    assert status.state is ValueState.PENDING and status.details == ("chain device nd0",)
    ns.ip("link", "add", "nd0", "type", "veth", "peer", "name", "nd1")
    wait_until(lambda: state(scheduler, key) is CONFIGURED, timeout=15)
    assert ("netdev", "ingress") in tables(ns)


# -- ownership ------------------------------------------------------------------------------


def test_tables_kvmesh_did_not_make_are_obtained_and_never_touched(linux) -> None:
    ns, scheduler = linux
    nft(ns, "add", "table", "ip", "theirs")
    nft(ns, "add", "chain", "ip", "theirs", "c")
    nft(ns, "add", "table", "inet", "kvf")  # the name kvmesh is asked for: taken by someone else
    applied(scheduler, ns, {"linux/nftables/ip/ours": filter_table()})
    scheduler.resync({"linux/nftables/ip/ours": filter_table()}, kind="full")
    assert state(scheduler, "linux/nftables/host/ip/theirs") is ValueState.OBTAINED
    assert state(scheduler, "linux/nftables/host/inet/kvf") is ValueState.OBTAINED
    # Declaring the taken name is refused, and the foreign table stays as it is.
    with pytest.raises(TransactionError):
        commit(scheduler, {KEY: filter_table(22)})
    status = scheduler.get_value_status(KEY)
    assert "exists and was not made by kvmesh" in str(status.error), status
    assert [list(item) for item in table(ns, "inet", "kvf") or []] == [["table"]]
    # A full resync with nothing desired removes kvmesh's table only.
    scheduler.resync({}, kind="full")
    assert tables(ns) == {("ip", "theirs"), ("inet", "kvf")}
    assert table(ns, "ip", "theirs") is not None and len(table(ns, "ip", "theirs") or []) == 2


def test_delete_leaves_a_table_that_lost_its_marker(linux) -> None:
    ns, scheduler = linux
    applied(scheduler, ns, {KEY: filter_table()})
    nft(ns, "delete", "table", "inet", "kvf")
    nft(ns, "add", "table", "inet", "kvf")  # someone else's now
    commit(scheduler, {KEY: None})
    assert ("inet", "kvf") in tables(ns)


# -- drift, restart -------------------------------------------------------------------------


def test_drift_is_repaired_by_downstream_resync(linux, monitor: Monitor) -> None:
    ns, scheduler = linux
    applied(scheduler, ns, {KEY: filter_table(22)})
    expected = rules_of(ns, "inet", "kvf")

    start = monitor.mark()
    scheduler.resync(kind="downstream")  # unchanged: nothing to repair, no nft write
    assert not scheduler.transaction_history()[-1].executed
    assert monitor.transactions(start, monitor.mark()) == []

    nft(ns, "delete", "table", "inet", "kvf")
    scheduler.resync(kind="downstream")
    assert rules_of(ns, "inet", "kvf") == expected

    nft(ns, "add", "rule", "inet", "kvf", "input", "udp", "dport", "53", "drop")
    scheduler.resync(kind="downstream")
    assert rules_of(ns, "inet", "kvf") == expected

    handle = next(item["rule"]["handle"] for item in table(ns, "inet", "kvf") or []
                  if "rule" in item and item["rule"]["chain"] == "input")
    nft(ns, "delete", "rule", "inet", "kvf", "input", "handle", str(handle))
    scheduler.resync(kind="downstream")
    assert rules_of(ns, "inet", "kvf") == expected

    nft(ns, "add", "element", "inet", "kvf", "blocked", "{ 80 }")
    nft(ns, "add", "chain", "inet", "kvf", "input", "{ policy drop ; }")
    scheduler.resync(kind="downstream")
    listed = table(ns, "inet", "kvf") or []
    assert [item["set"]["elem"] for item in listed if "set" in item] == [[9999]]
    assert [item["chain"]["policy"] for item in listed
            if "chain" in item and item["chain"]["name"] == "input"] == ["accept"]

    # Counters move with traffic: not drift.
    wait_until(lambda: baseline_recorded(ns, "inet", "kvf"), timeout=10)
    ns.ip("link", "set", "lo", "up")
    ns.exec(sys.executable, "-c", "import socket; s = socket.socket(); s.settimeout(0.2)\n"
            "try: s.connect(('127.0.0.1', 22))\nexcept OSError: pass")
    counted = [r[1] for r in rules_of(ns, "inet", "kvf") if len(r) == 3]
    assert counted and counted[0]["counter"]["packets"] > 0
    start = monitor.mark()
    scheduler.resync(kind="downstream")
    assert not scheduler.transaction_history()[-1].executed
    assert monitor.transactions(start, monitor.mark()) == []


def test_warm_restart_makes_no_nft_write(ns: Netns, monitor: Monitor) -> None:
    values = {KEY: filter_table(22), "linux/nftables/ip/nat": {
        "chains": [{"name": "post", "type": "nat", "hook": "postrouting", "prio": 100}],
        "rules": [{"chain": "post", "expr": [
            {"match": {"op": "==", "left": {"payload": {"protocol": "ip", "field": "saddr"}},
                       "right": {"prefix": {"addr": "10.50.0.0", "len": 16}}}},
            {"masquerade": None}]}]}}
    with plugin_in(ns) as first:
        applied(first, ns, values)
    before = {name: table(ns, "ip" if name == "nat" else "inet", name) for name in ("kvf", "nat")}
    start = monitor.mark()
    with plugin_in(ns) as second:
        second.resync(values, kind="full")
        assert not second.transaction_history()[-1].executed
        assert all(state(second, key) is CONFIGURED for key in values)
        assert second.plan(values) == []
    assert monitor.transactions(start, monitor.mark()) == []
    assert {name: table(ns, "ip" if name == "nat" else "inet", name)
            for name in ("kvf", "nat")} == before


def test_restart_with_a_changed_table_reapplies_it(ns: Netns) -> None:
    with plugin_in(ns) as first:
        applied(first, ns, {KEY: filter_table(22)})
    with plugin_in(ns) as second:
        second.resync({KEY: filter_table(25)}, kind="full")
        assert [op.op for op in second.transaction_history()[-1].executed] == [
            TxnOperation.UPDATE]
    assert [r[0] for r in rules_of(ns, "inet", "kvf")] == [tcp_dport("@blocked"),
                                                           tcp_dport(25)]


def test_the_descriptor_is_registered_by_the_plugin(linux) -> None:
    _ns, scheduler = linux
    assert DESCRIPTOR_NAME in [d.name for d in scheduler.descriptors()]


# -- traffic --------------------------------------------------------------------------------

TCP_SERVER = """
import selectors, socket, sys
selector = selectors.DefaultSelector()
for port in map(int, sys.argv[1:]):
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("0.0.0.0", port))
    listener.listen()
    selector.register(listener, selectors.EVENT_READ)
print("ready", flush=True)
while True:
    for key, _ in selector.select():
        key.fileobj.accept()[0].close()
"""

TCP_CLIENT = """
import socket, sys
host, timeout, ports = sys.argv[1], float(sys.argv[2]), sys.argv[3:]
results = []
for port in ports:
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
        results.append("open")
    except socket.timeout:
        results.append("timeout")
    except OSError as exc:
        results.append(type(exc).__name__)
print(" ".join(results))
"""

UDP_PEER_SERVER = """
import socket, sys
sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
sock.bind(("0.0.0.0", int(sys.argv[1])))
print("ready", flush=True)
while True:
    data, peer = sock.recvfrom(100)
    try:
        sock.sendto(peer[0].encode(), peer)  # tell the sender which source address arrived
    except OSError:
        pass
"""

UDP_CLIENT = """
import socket, sys
sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
sock.settimeout(float(sys.argv[3]))
sock.sendto(b"who am I", (sys.argv[1], int(sys.argv[2])))
try:
    print(sock.recvfrom(100)[0].decode())
except socket.timeout:
    print("timeout")
"""


@contextmanager
def server(ns: Netns, script: str, *args: str) -> Iterator[None]:
    process = subprocess.Popen(["ip", "netns", "exec", ns.name, sys.executable, "-c", script,
                                *args], stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None and process.stdout.readline().strip() == "ready"
        yield
    finally:
        process.kill()
        process.wait(timeout=10)


def run_in(ns: Netns, script: str, *args: str) -> str:
    return ns.exec(sys.executable, "-c", script, *args).stdout.strip()


def connect(a: Netns, veth: str, address: str, b: Netns, b_address: str) -> None:
    """A veth between two namespaces: ``veth`` in ``a`` (with ``address``), ``veth``-peer in b."""
    peer = f"{veth}p"
    a.ip("link", "add", veth, "type", "veth", "peer", "name", peer, "netns", b.name)
    a.ip("addr", "add", address, "dev", veth)
    b.ip("addr", "add", b_address, "dev", peer)
    a.ip("link", "set", veth, "up")
    b.ip("link", "set", peer, "up")


def test_a_table_drops_one_port_only(linux) -> None:
    b, scheduler = linux
    with ExitStack() as stack:
        a = stack.enter_context(temporary_netns("kvlx"))
        connect(a, "d0", "10.31.0.1/24", b, "10.31.0.2/24")
        stack.enter_context(server(b, TCP_SERVER, "5001", "5002"))
        assert run_in(a, TCP_CLIENT, "10.31.0.2", "5", "5001", "5002") == "open open"
        value = {"chains": [{"name": "input", "type": "filter", "hook": "input", "prio": 0}],
                 "rules": [{"chain": "input", "expr": [tcp_dport(5002), {"drop": None}]}]}
        commit(scheduler, {KEY: value})
        assert run_in(a, TCP_CLIENT, "10.31.0.2", "1", "5001", "5002") == "open timeout"
        commit(scheduler, {KEY: None})
        assert run_in(a, TCP_CLIENT, "10.31.0.2", "5", "5001", "5002") == "open open"


def test_masquerade_through_a_router(linux) -> None:
    router, scheduler = linux
    with ExitStack() as stack:
        a = stack.enter_context(temporary_netns("kvlx"))
        b = stack.enter_context(temporary_netns("kvlx"))
        connect(a, "m0", "10.41.0.2/24", router, "10.41.0.1/24")
        connect(b, "m1", "10.42.0.2/24", router, "10.42.0.1/24")
        a.ip("route", "add", "default", "via", "10.41.0.1")  # b has no route back to a
        router.exec("sysctl", "-qw", "net.ipv4.ip_forward=1")
        masquerade = {"chains": [{"name": "post", "type": "nat", "hook": "postrouting",
                                  "prio": 100}],
                      "rules": [{"chain": "post", "expr": [
                          {"match": {"op": "==", "left": {"payload": {"protocol": "ip",
                                                                      "field": "saddr"}},
                                     "right": {"prefix": {"addr": "10.41.0.0", "len": 24}}}},
                          {"match": {"op": "==", "left": {"meta": {"key": "oifname"}},
                                     "right": "m1p"}},
                          {"masquerade": None}]}]}
        commit(scheduler, {"linux/nftables/ip/nat": masquerade})
        stack.enter_context(server(b, UDP_PEER_SERVER, "6000"))
        assert run_in(a, UDP_CLIENT, "10.42.0.2", "6000", "5") == "10.42.0.1"

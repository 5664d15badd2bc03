"""The host-interface watcher against real netlink events."""

from __future__ import annotations

import threading

import pytest

from southbound.linux.context import KVMESH_LINK_GROUP, Ownership
from southbound.linux.errors import NamespaceNotFoundError
from southbound.linux.netlink import NetlinkClient
from southbound.linux.watcher import HostInterfaceWatcher
from tests.netns import unique_netns_name
from tests.util import wait_until

pytestmark = pytest.mark.netns


class Recorder:
    """Collects notifications like the scheduler would (last value per key)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.values: dict[str, dict | None] = {}
        self.history: list[tuple[str, dict | None]] = []

    def __call__(self, key, value) -> None:
        with self.lock:
            self.values[key] = value
            self.history.append((key, value))

    def present(self) -> dict[str, dict]:
        with self.lock:
            return {k: v for k, v in self.values.items() if v is not None}


@pytest.fixture
def watched(ns):
    recorder = Recorder()
    watcher = HostInterfaceWatcher(ns.name, Ownership(), recorder)
    watcher.start(timeout=30)
    try:
        yield ns, watcher, recorder
    finally:
        watcher.close()


def test_initial_dump_reports_existing_host_links(ns) -> None:
    ns.ip("link", "add", "pre0", "type", "veth", "peer", "name", "pre1")
    ns.ip("addr", "add", "10.5.0.1/24", "dev", "pre0")
    recorder = Recorder()
    watcher = HostInterfaceWatcher(ns.name, Ownership(), recorder)
    watcher.start(timeout=30)
    try:
        present = recorder.present()
        assert set(present) == {"linux/interface/host/lo", "linux/interface/host/pre0",
                                "linux/interface/host/pre1"}
        assert present["linux/interface/host/pre0"]["addresses"] == ["10.5.0.1/24"]
        assert present["linux/interface/host/pre0"]["type"] == "veth"
        assert present["linux/interface/host/lo"]["type"] == "loopback"
    finally:
        watcher.close()


def test_link_and_address_changes_are_notified(watched) -> None:
    ns, _watcher, recorder = watched
    key = "linux/interface/host/h0"
    ns.ip("link", "add", "h0", "type", "veth", "peer", "name", "h1")
    value = wait_until(lambda: recorder.present().get(key), timeout=10, message="h0 appears")
    assert value["name"] == "h0" and value["enabled"] is False and value["addresses"] == []
    ns.ip("addr", "add", "10.7.0.1/24", "dev", "h0")
    ns.ip("link", "set", "h0", "up", "mtu", "1400")
    wait_until(lambda: (recorder.present().get(key) or {}).get("addresses") == ["10.7.0.1/24"],
               timeout=10, message="address reported")
    wait_until(lambda: (recorder.present().get(key) or {}).get("mtu") == 1400, timeout=10,
               message="mtu reported")
    ns.ip("link", "del", "h0")
    wait_until(lambda: key not in recorder.present(), timeout=10, message="h0 retracted")
    assert recorder.values[key] is None
    assert "linux/interface/host/h1" not in recorder.present()


def test_rename_retracts_the_old_name(watched) -> None:
    ns, _watcher, recorder = watched
    ns.ip("link", "add", "old0", "type", "bridge")
    wait_until(lambda: "linux/interface/host/old0" in recorder.present(), timeout=10)
    ns.ip("link", "set", "old0", "name", "new0")
    wait_until(lambda: "linux/interface/host/new0" in recorder.present(), timeout=10)
    assert "linux/interface/host/old0" not in recorder.present()


def test_kvmesh_links_are_never_reported(watched) -> None:
    ns, _watcher, recorder = watched
    client = NetlinkClient(ns.name)
    try:
        client.create_link("own0", "veth", group=KVMESH_LINK_GROUP,
                           peer={"ifname": "own1", "group": KVMESH_LINK_GROUP})
        link = client.get_link("own0")
        assert link is not None
        client.add_address(link.index, "10.8.0.1/24", "addr")
    finally:
        client.close()
    # A host link created afterwards proves the events before it were processed.
    ns.ip("link", "add", "marker0", "type", "bridge")
    wait_until(lambda: "linux/interface/host/marker0" in recorder.present(), timeout=10)
    seen = {key for key, _ in recorder.history}
    assert not {"linux/interface/host/own0", "linux/interface/host/own1"} & seen


def test_link_taken_over_by_kvmesh_group_is_retracted(watched) -> None:
    ns, _watcher, recorder = watched
    ns.ip("link", "add", "adopt0", "type", "bridge")
    # The kernel announces a group change only for a link that is up.
    ns.ip("link", "set", "adopt0", "up")
    wait_until(lambda: (recorder.present().get("linux/interface/host/adopt0") or {}).get(
        "enabled"), timeout=10)
    ns.ip("link", "set", "adopt0", "group", str(KVMESH_LINK_GROUP))
    wait_until(lambda: "linux/interface/host/adopt0" not in recorder.present(), timeout=10)


def test_dropped_events_are_recovered_by_a_new_dump(ns, monkeypatch) -> None:
    """A consumer stalls, the tiny socket buffer overflows (ENOBUFS): the watcher dumps again."""
    import southbound.linux.watcher as watcher_module

    monkeypatch.setattr(watcher_module, "SOCKET_BUFFER", 4096)
    release = threading.Event()
    recorder = Recorder()

    def stalling(key, value) -> None:
        recorder(key, value)
        if key.endswith("/first0"):
            release.wait(timeout=30)

    watcher = HostInterfaceWatcher(ns.name, Ownership(), stalling)
    watcher.start(timeout=30)
    try:
        ns.ip("link", "add", "first0", "type", "bridge")
        wait_until(lambda: "linux/interface/host/first0" in recorder.values, timeout=10)
        ns.batch([f"link add burst{i} type bridge" for i in range(60)])
        release.set()
        wanted = {f"linux/interface/host/burst{i}" for i in range(60)}
        wait_until(lambda: wanted <= set(recorder.present()), timeout=20,
                   message="all links reported after the overflow")
        assert watcher.resyncs >= 2, "the overflow was detected and a new dump taken"
    finally:
        release.set()
        watcher.close()


def test_watcher_restarts_after_an_unexpected_failure(ns, monkeypatch) -> None:
    import southbound.linux.watcher as watcher_module

    monkeypatch.setattr(watcher_module, "RESTART_SECONDS", 0.05)
    recorder = Recorder()
    watcher = HostInterfaceWatcher(ns.name, Ownership(), recorder)
    watcher.start(timeout=30)
    original = watcher._handle_datagram
    broken = {"once": True}

    def handle(data):
        if broken.pop("once", False):
            raise RuntimeError("injected decoder bug")
        original(data)

    monkeypatch.setattr(watcher, "_handle_datagram", handle)
    try:
        ns.ip("link", "add", "lost0", "type", "bridge")  # its event hits the bug
        wait_until(lambda: watcher.failures == 1, timeout=10)
        # The restart's full dump reports it anyway.
        wait_until(lambda: "linux/interface/host/lost0" in recorder.present(), timeout=10)
        assert watcher.alive
    finally:
        watcher.close()


def test_failing_consumer_does_not_stop_the_watcher(ns) -> None:
    calls: list[str] = []

    def flaky(key, value) -> None:
        calls.append(key)
        if key.endswith("/bad0"):
            raise RuntimeError("consumer bug")

    watcher = HostInterfaceWatcher(ns.name, Ownership(), flaky)
    watcher.start(timeout=30)
    try:
        ns.ip("link", "add", "bad0", "type", "bridge")
        ns.ip("link", "add", "good0", "type", "bridge")
        wait_until(lambda: "linux/interface/host/good0" in calls, timeout=10)
        assert watcher.notify_errors >= 1 and watcher.alive
    finally:
        watcher.close()


def test_close_stops_the_thread(ns) -> None:
    watcher = HostInterfaceWatcher(ns.name, Ownership(), lambda key, value: None)
    watcher.start(timeout=30)
    assert watcher.alive
    watcher.close()
    assert not watcher.alive
    watcher.close()  # idempotent


def test_missing_namespace_is_an_error() -> None:
    watcher = HostInterfaceWatcher(unique_netns_name("kvlx"), Ownership(), lambda k, v: None)
    with pytest.raises(NamespaceNotFoundError):
        watcher.start(timeout=5)

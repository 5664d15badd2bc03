"""The agent with the VPP southbound (emulator, real vpp_papi client): the reconciliation
framework's KNOWN gate, cancel on disconnect, DISCONNECT with reconnect, and a VPP restart."""

from __future__ import annotations

import contextlib
import shutil
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kvmesh.agent.agent import Agent, AgentConfig
from kvmesh.agent.desired import encode_config_value
from kvmesh.agent.recon import (
    CancelToken,
    DeviceState,
    ReconciliationService,
    ResultIntent,
)
from kvmesh.agent.status import decode_status
from kvmesh.vppemu import EmulatorProcess
from kvstore.client import KvStoreClient
from tests.kvstore.conftest import Mesh, Node
from tests.parallel import scratch_dir
from tests.southbound.vpp.conftest import connect
from tests.util import wait_until


def counter(agent: Agent, service: str, name: str) -> int:
    value = agent.recon.status("vpp")["vpp"][service][name]
    assert isinstance(value, int)
    return value


@dataclass
class Setup:
    node: Node
    emulator: EmulatorProcess
    agent: Agent

    def set_config(self, model_key: str, value: dict[str, object]) -> None:
        with KvStoreClient(self.node.cmd_url) as client:
            client.set_key(f"config/v1/{model_key}", encode_config_value(value))

    def vpp_interfaces(self) -> set[str]:
        return {i["tag"].removeprefix("kvmesh:")
                for i in self.emulator.control.state()["interfaces"] if i["tag"]}

    def vpp_state(self) -> DeviceState:
        return self.agent.recon.device_state("vpp")


def status_state(node_url: str, node: str, model_key: str) -> str | None:
    """The state `node`'s agent published for `model_key`, read from the mesh."""
    key = f"status/{node}/{model_key}"
    with KvStoreClient(node_url) as client:
        found = client.get([key]).get(key)
    record = decode_status(found.value if found else None)
    return None if record is None else str(record["state"])


@contextlib.contextmanager
def rig(tmp_path: Path, start_node: Callable[[Mesh], Node] = lambda m: m.chain(["v1"])[0],
        vpp: bool = True, **config: Any) -> Iterator[Setup]:
    """A KvStore node v1, a VPP emulator (optional) and an agent for v1 (not started); all
    stopped and removed afterwards."""
    mesh = Mesh(tmp_path)
    workdir = scratch_dir("kvm-ag-")  # short: unix socket paths are limited
    emulator = EmulatorProcess(str(Path(workdir) / "api.sock"))
    agent: Agent | None = None
    try:
        node = start_node(mesh)
        if vpp:
            emulator.start()
            config["vpp_socket"] = emulator.socket_path
        # A lone ephemeral node is EMPTY for good: say its store is the truth (tests of the
        # safe start say otherwise).
        config.setdefault("assume_current", True)
        agent = Agent(AgentConfig(node="v1", kv_url=node.cmd_url, **config))
        yield Setup(node, emulator, agent)
    finally:
        if agent is not None:
            agent.stop()
        if vpp:
            emulator.stop()
        mesh.close()
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[Setup]:
    with rig(tmp_path, coalesce_s=0.01, reconnect_backoff_s=(0.1, 1.0)) as prepared:
        yield prepared


def test_config_is_held_back_until_vpp_is_known_and_disconnect_cancels(setup: Setup) -> None:
    agent = setup.agent
    gate = threading.Event()
    first_run = threading.Event()
    ends: list[str] = []

    def hold_first_run(device: str, token: CancelToken) -> bool:
        if device == "vpp" and not first_run.is_set():
            first_run.set()
            token.wait(60)  # held until the device goes away
            token.check()
        gate.wait(60)
        return True

    def succeed(device: str, token: CancelToken) -> bool:
        return True

    def end_of(name: str) -> Callable[[str], None]:
        return lambda device: ends.append(f"{name}@{device}")

    for name, priority in (("early", 5), ("hold", 15), ("late", 25)):
        agent.recon.register(ReconciliationService(
            name, priority, ResultIntent.DO_NOTHING,
            hold_first_run if name == "hold" else succeed, end=end_of(name)))
    agent.start()
    assert first_run.wait(30), "reconciliation reached the holding service"
    assert setup.vpp_state() is DeviceState.RECONCILING

    # Desired state arriving now is held back: VPP is not KNOWN yet.
    setup.set_config("vpp/interface/loop1", {"type": "loopback", "addresses": ["10.1.0.1/24"]})
    wait_until(lambda: "vpp/interface/loop1" in agent.northbound.desired.pending(), timeout=20,
               message="the change reached the agent and waits")
    assert "loop1" not in setup.vpp_interfaces()

    # VPP drops the connection mid-reconciliation: the run is cancelled, every service's end
    # callback runs in priority order, and the reconnect starts a fresh run.
    setup.emulator.control.disconnect()
    wait_until(lambda: len(ends) >= 3, timeout=30, message="end callbacks after the disconnect")
    assert ends[:3] == ["early@vpp", "hold@vpp", "late@vpp"]
    wait_until(lambda: counter(agent, "hold", "cancellations") >= 1, timeout=30)
    gate.set()
    wait_until(lambda: setup.vpp_state() is DeviceState.KNOWN, timeout=30,
               message="VPP KNOWN after the reconnect")
    wait_until(lambda: "loop1" in setup.vpp_interfaces(), timeout=30,
               message="the held change is applied once VPP is KNOWN")
    status = agent.recon.status("vpp")["vpp"]
    assert status["hold"]["successes"] == 1 and status["late"]["successes"] == 1


def test_failed_disconnect_service_drops_vpp_and_reconnects(setup: Setup) -> None:
    agent = setup.agent
    attempts: list[int] = []

    def flaky(device: str, token: CancelToken) -> bool:
        attempts.append(1)
        return len(attempts) > 1  # fails the first time only

    agent.recon.register(ReconciliationService("flaky", 12, ResultIntent.DISCONNECT, flaky))
    agent.start()
    wait_until(lambda: setup.vpp_state() is DeviceState.KNOWN, timeout=30,
               message="KNOWN after the reconnect that followed the failure")
    assert len(attempts) == 2
    plugin = agent.devices.all()["vpp"].plugin
    assert plugin.stats()["drops"] == 1
    status = agent.recon.status("vpp")["vpp"]["flaky"]
    assert status["failures"] == 1 and status["successes"] == 1


def test_vpp_restart_is_reconciled_back(setup: Setup) -> None:
    agent = setup.agent
    agent.start()
    wait_until(lambda: setup.vpp_state() is DeviceState.KNOWN, timeout=30)
    setup.set_config("vpp/interface/loop7", {"type": "loopback", "addresses": ["10.7.0.1/24"]})
    wait_until(lambda: "loop7" in setup.vpp_interfaces(), timeout=30)
    setup.emulator.control.restart()  # VPP restarts empty
    wait_until(lambda: counter(agent, "resync-interfaces", "successes") >= 2, timeout=30,
               message="the reconnect ran the reconciliation again")
    wait_until(lambda: setup.vpp_state() is DeviceState.KNOWN, timeout=30)
    assert "loop7" in setup.vpp_interfaces(), "reconciliation restored the interface"


def test_store_not_current_creates_but_never_deletes_until_declared_current(
        tmp_path: Path) -> None:
    """A store that is not known to be current (EMPTY, its only peer never answers): the agent
    creates what is desired, deletes nothing it made, holds the device out of KNOWN with the
    reason published in node/<N>/device/vpp; an operator's `assume_current` releases it (no
    timeout ever does)."""

    def node_with_a_silent_peer(mesh: Mesh) -> Node:
        ghost = mesh.allocate("ghost")  # declared as a peer, never started
        return mesh.start(mesh.allocate("v1", sync_timeout_ms=60_000), peers=[ghost])

    with rig(tmp_path, node_with_a_silent_peer, coalesce_s=0.01, store_poll_s=0.05) as setup:
        # A first agent life, told its store is current, makes loop8.
        setup.set_config("vpp/interface/loop8", {"type": "loopback"})
        setup.agent.start()
        wait_until(lambda: "loop8" in setup.vpp_interfaces(), timeout=30)
        setup.agent.stop()
        # While no agent runs: loop8 is no longer desired (a tombstone), loop9 is new.
        with KvStoreClient(setup.node.cmd_url) as client:
            client.set_key("config/v1/vpp/interface/loop8", b"")
            assert client.counters()["kvstore.store_state"] == 0  # EMPTY: nothing on disk
        setup.set_config("vpp/interface/loop9", {"type": "loopback"})

        agent = Agent(AgentConfig(node="v1", kv_url=setup.node.cmd_url, coalesce_s=0.01,
                                  store_poll_s=0.05, vpp_socket=setup.emulator.socket_path))
        try:
            agent.start()
            wait_until(lambda: "loop9" in setup.vpp_interfaces(), timeout=30,
                       message="creates go ahead while the store is not current")
            device = wait_until(lambda: device_record(setup.node.cmd_url, "vpp", "reason"),
                                timeout=30, message="the hold reason is published")
            assert device is not None
            assert device["state"] != "KNOWN" and "EMPTY" in device["reason"], device
            assert agent.rest.recon_services()["held"]["vpp"] == device["reason"]
            # Not deleted, however long we look (the service never times out).
            assert "loop8" in setup.vpp_interfaces()
            assert agent.recon.device_state("vpp") is not DeviceState.KNOWN
            history = agent.rest.txn_history(None, None, None)
            assert not any(op.op.value == "DELETE" for rec in history
                           for op in rec.executed), "nothing deleted while held"

            assert agent.rest.assume_current()["all_known"] is False
            wait_until(lambda: agent.recon.device_state("vpp") is DeviceState.KNOWN, timeout=30)
            wait_until(lambda: "loop8" not in setup.vpp_interfaces(), timeout=30,
                       message="the tombstoned interface is deleted once the store is current")
            assert "loop9" in setup.vpp_interfaces()
            wait_until(lambda: "reason" not in (device_record(setup.node.cmd_url, "vpp")
                                                or {"reason": "absent"}),
                       timeout=30, message="the hold reason is withdrawn")
        finally:
            agent.stop()


def device_record(node_url: str, device: str, need: str | None = None) -> dict[str, Any] | None:
    """`node/v1/device/<device>` as published by the agent (None if absent or lacking `need`)."""
    with KvStoreClient(node_url) as client:
        found = client.get([f"node/v1/device/{device}"]).get(f"node/v1/device/{device}")
    record = decode_status(found.value if found else None)
    if record is None or (need is not None and need not in record):
        return None
    return dict(record)


def test_model_without_a_southbound_here_is_reported_unimplemented(setup: Setup) -> None:
    setup.agent.start()
    wait_until(lambda: setup.vpp_state() is DeviceState.KNOWN, timeout=30)
    setup.set_config("linux/interface/br0", {"type": "bridge"})  # no Linux southbound here
    wait_until(lambda: status_state(setup.node.cmd_url, "v1", "linux/interface/br0")
               == "UNIMPLEMENTED", timeout=30, message="status says no descriptor handles it")
    assert "linux/interface/br0" not in setup.agent.northbound.desired.pending()


def test_agent_without_southbounds_still_reports_statuses(tmp_path: Path) -> None:
    with rig(tmp_path, vpp=False) as setup:
        setup.set_config("vpp/interface/loop1", {"type": "loopback"})
        setup.agent.start()
        wait_until(lambda: status_state(setup.node.cmd_url, "v1", "vpp/interface/loop1")
                   == "UNIMPLEMENTED", timeout=30)


def test_interface_deleted_behind_kvmeshs_back_is_repaired(setup: Setup) -> None:
    agent = setup.agent
    agent.start()
    wait_until(lambda: setup.vpp_state() is DeviceState.KNOWN, timeout=30)
    setup.set_config("vpp/interface/loop5", {"type": "loopback", "addresses": ["10.5.0.1/24"]})
    wait_until(lambda: "loop5" in setup.vpp_interfaces(), timeout=30)
    index = next(i["sw_if_index"] for i in setup.emulator.control.state()["interfaces"]
                 if i["tag"] == "kvmesh:loop5")
    papi = connect(setup.emulator.socket_path)  # an operator's own client
    try:
        assert papi.api.delete_loopback(sw_if_index=index).retval == 0
    finally:
        papi.disconnect()
    wait_until(lambda: agent.counters["drift_repairs"] >= 1, timeout=30,
               message="the deletion event triggered a repair")
    wait_until(lambda: "loop5" in setup.vpp_interfaces(), timeout=30,
               message="the interface is back, without waiting for the periodic resync")
    restored = next(i for i in setup.emulator.control.state()["interfaces"]
                    if i["tag"] == "kvmesh:loop5")
    assert [a.split("/")[0] for a in map(str, restored["addresses"])] == ["10.5.0.1"]


def test_a_redump_during_a_rest_apply_does_not_undo_it(
    setup: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    """POST /configuration applies its values, then records them in the mesh. A periodic
    re-dump landing in between once read the mesh without them and deleted the new interface
    (and the stream re-created it a moment later): the re-dump now waits for the apply."""
    import kvmesh.agent.northbound as northbound_module

    agent = setup.agent
    agent.start()
    wait_until(lambda: setup.vpp_state() is DeviceState.KNOWN, timeout=30)
    redump_done = threading.Event()
    redump_at_lock = threading.Event()  # the re-dump is waiting for the transaction lock
    record = northbound_module.write_node_change
    follower = agent.northbound
    txn_lock = follower._txn_lock

    class WatchedLock:
        """The agent's transaction lock, telling when the re-dump thread asks for it."""

        def __enter__(self) -> bool:
            if threading.current_thread().name == "redump":
                redump_at_lock.set()
            return txn_lock.__enter__()

        def __exit__(self, *exc: Any) -> None:
            txn_lock.release()

    def redump_then_record(*args: Any, **kwargs: Any) -> int:
        def redump() -> None:
            with KvStoreClient(setup.node.cmd_url) as client:
                follower.redump(client)
            redump_done.set()

        threading.Thread(target=redump, name="redump", daemon=True).start()
        # Between the apply and the mesh write: the re-dump either runs through (the bug) or
        # waits for the lock the apply holds.
        wait_until(lambda: redump_done.is_set() or redump_at_lock.is_set(), timeout=30,
                   message="the re-dump ran or reached the transaction lock")
        return int(record(*args, **kwargs))

    monkeypatch.setattr(follower, "_txn_lock", WatchedLock())
    monkeypatch.setattr(northbound_module, "write_node_change", redump_then_record)
    result = agent.rest.apply_configuration({"vpp/interface/rest1": {"type": "loopback"}},
                                       replace=False, who="test")
    assert result["ok"], result
    assert redump_done.wait(timeout=30)
    assert "vpp/interface/rest1" not in agent.northbound.desired.pending(), (
        "the re-dump queued the REST value's deletion")
    assert "rest1" in setup.vpp_interfaces()

"""The agent under faults (issue 10): a storm of VPP disconnects during reconciliation, the
agent killed in the middle of a transaction, and the KvStore node killed under a running agent.
Device states stay truthful, nothing kvmesh made is deleted on the strength of not knowing, and
VPP converges to the desired state."""

from __future__ import annotations

import signal
import threading
from pathlib import Path

from kvmesh import launch
from kvmesh.agent.recon import DeviceState
from tests.agent.test_agent_vpp import Setup, counter, device_record, rig
from tests.kvstore.conftest import Mesh, Node
from tests.util import wait_until

LOOPS = {"loop1": "10.1.0.1/24", "loop2": "10.2.0.1/24"}


def _configure(setup: Setup) -> None:
    for name, address in LOOPS.items():
        setup.set_config(f"vpp/interface/{name}", {"type": "loopback", "addresses": [address]})


def test_disconnect_storm_during_reconciliation_stays_truthful_and_converges(
    tmp_path: Path,
) -> None:
    with rig(tmp_path, coalesce_s=0.01, reconnect_backoff_s=(0.05, 0.2)) as setup:
        heard: list[tuple[DeviceState, bool]] = []
        lock = threading.Lock()
        agent = setup.agent

        def listen(device: str, state: DeviceState) -> None:
            if device == "vpp":
                plugin = agent.devices.all()["vpp"].plugin
                with lock:
                    heard.append((state, bool(plugin.connected)))

        agent.recon.add_listener(listen)
        agent.start()
        _configure(setup)
        wait_until(lambda: set(LOOPS) <= setup.vpp_interfaces(), timeout=30)
        connection = agent.devices.all()["vpp"].plugin.connection  # type: ignore[attr-defined]
        disconnects_before = connection.counters["disconnects"]
        with lock:
            heard.clear()
        storm = 6
        # Every reconciliation dumps the interfaces: the emulator cuts the connection instead of
        # answering, six times in a row, then VPP restarts empty.
        setup.emulator.control.drop_on("sw_interface_dump", count=storm)
        setup.emulator.control.restart()
        wait_until(lambda: connection.counters["disconnects"] - disconnects_before > storm,
                   timeout=60, message="the storm of disconnects")
        wait_until(lambda: setup.vpp_state() is DeviceState.KNOWN
                   and set(LOOPS) <= setup.vpp_interfaces(), timeout=60,
                   message="KNOWN and converged after the storm")
        with lock:
            states = [state for state, _connected in heard]
        # Each disconnect was announced, and KNOWN only once: at the end, over a live connection.
        assert states.count(DeviceState.DISCONNECTED) > storm, states
        assert states.count(DeviceState.KNOWN) == 1 and states[-1] is DeviceState.KNOWN, states
        assert heard[-1][1], "KNOWN announced over a dead connection"
        # The storm hit reconciliation runs: cancelled by the disconnect, or failed first (the
        # dump answered by a dropped connection), whichever the race gave.
        assert (counter(agent, "resync-interfaces", "cancellations")
                + counter(agent, "resync-interfaces", "failures")) >= 1
        wait_until(lambda: (device_record(setup.node.cmd_url, "vpp") or {}).get("state")
                   == "KNOWN", timeout=20, message="the published device state")
        state = setup.emulator.control.state()
        addresses = {i["tag"].removeprefix("kvmesh:"): i for i in state["interfaces"]
                     if i["tag"]}
        assert set(addresses) == set(LOOPS)  # nothing half-made, nothing extra


def test_kvstore_node_killed_under_a_running_agent_deletes_nothing(tmp_path: Path) -> None:
    data = tmp_path / "data"
    meshes: list[Mesh] = []

    def durable_node(mesh: Mesh) -> Node:
        meshes.append(mesh)
        return mesh.start(mesh.allocate("v1", data_dir=str(data)))

    with rig(tmp_path, start_node=durable_node, coalesce_s=0.01,
             reconnect_backoff_s=(0.05, 0.2)) as setup:
        agent = setup.agent
        agent.start()
        _configure(setup)
        wait_until(lambda: set(LOOPS) <= setup.vpp_interfaces(), timeout=30)
        missing: list[set[str]] = []
        stop = threading.Event()

        def watch() -> None:
            while not stop.wait(0.02):
                present = setup.vpp_interfaces()
                if not set(LOOPS) <= present:
                    missing.append(set(LOOPS) - present)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        try:
            setup.node.stop(signal.SIGKILL)
            # With its store gone, a downstream resync must keep what the agent made.
            agent.rest.downstream_resync(retry=False)
            assert set(LOOPS) <= setup.vpp_interfaces()
            # The node comes back with its durable store; a new change still gets through.
            meshes[0].start(setup.node)
            setup.set_config("vpp/interface/loop3", {"type": "loopback",
                                                     "addresses": ["10.3.0.1/24"]})
            wait_until(lambda: "loop3" in setup.vpp_interfaces(), timeout=60,
                       message="a change after the node restarted")
        finally:
            stop.set()
            watcher.join(5)
        assert not missing, f"interfaces deleted while the store was gone: {missing[:3]}"
        assert setup.vpp_state() is DeviceState.KNOWN


def _agent_process(node_url: str, vpp_socket: str, log_path: Path) -> launch.Launched:
    return launch.start(launch.AgentSpec("v1", node_url, launch.AgentOptions(
        vpp_socket=vpp_socket, assume_current=True)), log_path)


def test_agent_killed_in_the_middle_of_a_transaction_leaves_nothing_half_applied(
    tmp_path: Path,
) -> None:
    """SIGKILL while VPP holds the reply to an interface's address: the interface exists, its
    address does not (yet). The restarted agent completes it: one interface, with its address."""
    with rig(tmp_path) as setup:
        control = setup.emulator.control
        agent = _agent_process(setup.node.cmd_url, setup.emulator.socket_path,
                               tmp_path / "agent.log")
        try:
            wait_until(lambda: (device_record(setup.node.cmd_url, "vpp") or {}).get("state")
                       == "KNOWN", timeout=60, message="agent up")
            control.delay("sw_interface_add_del_address", seconds=30)
            setup.set_config("vpp/interface/loop5", {"type": "loopback",
                                                     "addresses": ["10.5.0.1/24"]})
            wait_until(lambda: "loop5" in setup.vpp_interfaces(), timeout=30,
                       message="the transaction is under way")
            half = [i for i in control.state()["interfaces"] if i["tag"] == "kvmesh:loop5"]
            assert half and not half[0]["addresses"], "killed mid-transaction: no address yet"
            agent.kill()
            control.clear_faults()
            agent = _agent_process(setup.node.cmd_url, setup.emulator.socket_path,
                                   tmp_path / "agent.log")

            def converged() -> bool:
                tagged = [i for i in control.state()["interfaces"]
                          if i["tag"] == "kvmesh:loop5"]
                return len(tagged) == 1 and len(tagged[0]["addresses"]) == 1

            wait_until(converged, timeout=60, message="the restarted agent completed loop5 "
                       f"({(tmp_path / 'agent.log').read_text(errors='replace')[-2000:]})")
            tagged = [i for i in control.state()["interfaces"] if i["tag"] == "kvmesh:loop5"]
            assert "10.5.0.1" in str(tagged[0]["addresses"])
            assert setup.vpp_interfaces() == {"loop5"}
        finally:
            agent.kill()

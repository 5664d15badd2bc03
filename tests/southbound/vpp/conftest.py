"""Fixtures: the VPP emulator as a real process, and real vpp_papi clients connected to it."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from vpp_papi import VPPApiClient

import southbound.vpp
from kvmesh.vppemu import EmulatorProcess
from scheduler import KVScheduler
from tests.parallel import scratch_dir


@pytest.fixture(scope="module")
def emulator_process() -> Iterator[EmulatorProcess]:
    # A short directory: unix socket paths are limited to 107 bytes.
    workdir = scratch_dir("kvm-vpp-")
    emulator = EmulatorProcess(str(Path(workdir) / "api.sock"))
    try:
        yield emulator.start()
    finally:
        emulator.stop()
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture
def emulator(emulator_process: EmulatorProcess) -> EmulatorProcess:
    """The module's emulator, freshly restarted: empty state, no faults, no clients."""
    emulator_process.control.clear_faults()
    emulator_process.control.restart()
    return emulator_process


def connect(socket_path: str, read_timeout: float = 10.0) -> VPPApiClient:
    client = VPPApiClient(bootstrapapi=True, server_address=socket_path, read_timeout=read_timeout)
    client.connect("kvmesh-test")
    return client


@pytest.fixture
def papi(emulator: EmulatorProcess) -> Iterator[VPPApiClient]:
    client = connect(emulator.socket_path)
    try:
        yield client
    finally:
        if client.transport.connected:
            client.disconnect()


@pytest.fixture
def ref_papi(emulator: EmulatorProcess) -> Iterator[VPPApiClient]:
    """A client built from VPP 24.06's own API files (what a real VPP installs), not from the
    emulator's: it checks the emulator speaks VPP's definitions (skipped without them)."""
    from tests.southbound.vpp.reference import require_reference_dir

    client = VPPApiClient(apidir=str(require_reference_dir()),
                          server_address=emulator.socket_path, read_timeout=10)
    client.connect("kvmesh-reference")
    try:
        yield client
    finally:
        if client.transport.connected:
            client.disconnect()


class VppHarness:
    """A scheduler with the VPP southbound registered against the emulator, plus helpers."""

    def __init__(self, emulator: EmulatorProcess) -> None:
        self.emulator = emulator
        self.control = emulator.control
        self.scheduler = KVScheduler()
        self.plugin = southbound.vpp.register(self.scheduler, socket=emulator.socket_path)
        self.papi = connect(emulator.socket_path)

    def commit(self, values: dict, **kwargs) -> int:
        txn = self.scheduler.start_txn()
        for key, value in values.items():
            txn.set_value(key, value)
        return txn.commit(**kwargs)

    def state(self, key: str):
        return self.scheduler.get_value_status(key).state

    def sw_if_index(self, name: str) -> int:
        return self.scheduler.get_metadata_map("vpp-interface")[name].sw_if_index

    def vpp_interfaces(self) -> dict:
        """VPP's interfaces by tag (kvmesh ones are tagged kvmesh:<name>)."""
        return {d.tag: d for d in self.papi.api.sw_interface_dump() if d.tag}

    def vpp_addresses(self, sw_if_index: int) -> list[str]:
        return [
            str(d.prefix)
            for is_ip6 in (False, True)
            for d in self.papi.api.ip_address_dump(sw_if_index=sw_if_index, is_ipv6=is_ip6)
        ]

    def vpp_routes(self, table_id: int = 0, is_ip6: bool = False) -> dict:
        """Routes with a next hop or through an interface: prefix -> [(next hop, sw_if_index)]."""
        result: dict = {}
        table = {"table_id": table_id, "is_ip6": is_ip6}
        for d in self.papi.api.ip_route_dump(table=table):
            for p in d.route.paths:
                if int(p.type) != 0:
                    continue
                hop = str(p.nh.address.ip6 if is_ip6 else p.nh.address.ip4)
                result.setdefault(str(d.route.prefix), []).append((hop, p.sw_if_index))
        return result

    def close(self) -> None:
        for closer in (self.papi.disconnect, self.plugin.close, self.scheduler.close):
            with contextlib.suppress(Exception):  # teardown: close what can be closed
                closer()


@pytest.fixture
def vpp(emulator: EmulatorProcess) -> Iterator[VppHarness]:
    harness = VppHarness(emulator)
    try:
        yield harness
    finally:
        harness.close()


def pytest_collection_modifyitems(config, items):
    # vpp_papi 2.4.2 itself uses a deprecated importlib API on every client construction.
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(
                pytest.mark.filterwarnings("ignore:open_text is deprecated:DeprecationWarning")
            )

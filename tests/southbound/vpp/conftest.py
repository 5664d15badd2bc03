"""Fixtures: the VPP emulator as a real process, and real vpp_papi clients connected to it."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from vpp_papi import VPPApiClient

from kvmesh.vppemu import EmulatorProcess


@pytest.fixture(scope="module")
def emulator_process() -> Iterator[EmulatorProcess]:
    # A short directory: unix socket paths are limited to 107 bytes.
    workdir = tempfile.mkdtemp(prefix="kvm-vpp-")
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

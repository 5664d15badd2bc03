"""A vpp_papi client built from VPP 24.06's own API files (what a real VPP installs), connected to
the module's emulator: the emulator tests of wireguard, span and punt speak through it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from vpp_papi import VPPApiClient

from kvmesh.vppemu import EmulatorProcess
from tests.southbound.vpp.reference import require_reference_dir


@pytest.fixture
def ref_papi(emulator: EmulatorProcess) -> Iterator[VPPApiClient]:
    client = VPPApiClient(apidir=str(require_reference_dir()),
                          server_address=emulator.socket_path, read_timeout=10)
    client.connect("kvmesh-reference")
    try:
        yield client
    finally:
        if client.transport.connected:
            client.disconnect()

"""Fixtures shared by the agent tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kvmesh.agent.recon import ReconciliationManager


@pytest.fixture()
def manager() -> Iterator[ReconciliationManager]:
    """A reconciliation manager, closed after the test."""
    mgr = ReconciliationManager()
    try:
        yield mgr
    finally:
        mgr.close()

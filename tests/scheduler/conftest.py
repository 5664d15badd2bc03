from __future__ import annotations

from collections.abc import Iterator

import pytest

from scheduler import KVScheduler
from tests.scheduler.mocksb import MockSB


@pytest.fixture
def sched() -> Iterator[KVScheduler]:
    scheduler = KVScheduler()
    try:
        yield scheduler
    finally:
        scheduler.close()


@pytest.fixture
def sb() -> MockSB:
    return MockSB()

"""The pattern of test_node_ttl.py::test_ttl_refresh_keeps_key_alive on the seeded simulation
of the KvStore core (kvmesh/chaos/sim.py): a chain a - b - c, a key with a 1000 ms TTL set on a
and refreshed (TTL-only, higher ttl_version) every 250 ms for 4 s, then left alone; over lossy,
slow, reordering, partitioned networks with skewed clocks. No node may ever hold it past its last
legitimate expiry plus the clock bound (the simulation checks every merge), and at the end no
node holds it.

That test once failed under load with the key still served at c 10 s after the refreshes
stopped; this is the reproduction attempt on the core (see docs/testing.md, "Flaky tests")."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kvmesh.chaos.sim import Simulation, scenario_of
from kvstore.value import Value

KEY = "alive"
REFRESHES = 16
PERIOD_MS = 250


class RefreshThenStop(Simulation):
    def workload(self) -> list[tuple[int, int, dict[str, Value]]]:
        ops = [(0, 0, {KEY: Value(1, "a", b"yes", 1000, 0)})]
        ops += [(i * PERIOD_MS, 0, {KEY: Value(1, "a", None, 1000, i)})
                for i in range(1, REFRESHES + 1)]
        return ops


@pytest.mark.parametrize("seed", range(40))
def test_a_key_no_longer_refreshed_expires_everywhere(seed: int) -> None:
    base = scenario_of(seed)
    scenario = replace(base, nodes=3, links=((0, 1), (1, 2)), duration_ms=9000, writes=0,
                       partitions=tuple(p for p in base.partitions if p[2] and max(p[2]) < 3))
    sim = RefreshThenStop(scenario)
    result = sim.run()
    assert sim.now > REFRESHES * PERIOD_MS + 1000 + sim.bound_ms
    assert [p for p in result.problems if KEY in p] == []
    assert [name for name, db in zip(sim.names, sim.dbs, strict=True)
            if KEY in db.get([KEY], sim.now)] == []

"""A short seeded chaos run in CI: 5 isolated nodes with their agents, 2 rounds of faults, the
full checker (kernel state of every namespace included).

A failure prints the run's report, ending with the seed and the command that reproduces it.
KVMESH_CHAOS_SEED picks another seed.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from kvmesh.chaos.run import DEFAULT_FAULTS, ChaosConfig, run
from tests.netns import netns_available

pytestmark = [
    pytest.mark.netns,
    pytest.mark.skipif(not netns_available() or shutil.which("nft") is None,
                       reason="needs root, iproute2 and nftables"),
]


def test_short_chaos_run(tmp_path: Path) -> None:
    config = ChaosConfig(nodes=5, seed=int(os.environ.get("KVMESH_CHAOS_SEED", "5")), rounds=2,
                         faults=DEFAULT_FAULTS, duration=4, run_dir=tmp_path, agents=True)
    lines: list[str] = []
    summary: dict[str, object] = {}
    reports = run(config, say=lines.append, summary=summary)
    output = "\n".join(lines)
    failed = [r for r in reports if r.problems]
    assert not failed, (f"{output}\nFAILED (seed {config.seed}); reproduce with: "
                        f"{config.command()} (as root)")
    assert len(reports) == 2 and all(r.faults for r in reports), output
    assert all(r.convergence_s is not None for r in reports), output
    assert summary["writes_acknowledged"] and summary["writes_lost"] == 0, output
    assert summary["ttl_monitor_samples"], output
    assert all(r.desired_links is not None for r in reports), output

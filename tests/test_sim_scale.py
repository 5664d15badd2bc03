"""The scale benchmark's simulation (tools/bench/sim_scale.py) on tiny topologies: what it counts
is what the flood core does, and a leaf holds only its share."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[1] / "tools" / "bench" / "sim_scale.py"


@pytest.fixture(scope="module")
def sim_scale() -> ModuleType:
    spec = importlib.util.spec_from_file_location("sim_scale", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["sim_scale"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_an_update_on_a_chain_of_four_costs_three_messages(sim_scale: ModuleType) -> None:
    """Each node floods to its peers not on the path: one message per link, none back."""
    sim = sim_scale.Measured(sim_scale.chain(4))
    cost = sim_scale.update_cost(sim, 0, sim_scale.config_set(0))
    assert (cost["msgs"], cost["hops_max"], cost["reached"]) == (3, 3, 4)
    assert cost["sent_max"] == 1 and cost["recv_max"] == 1 and cost["bytes"] > 3 * 2000
    # From the middle: n1 -> n0 and n2, n2 -> n3; n0's only peer is on the path.
    cost = sim_scale.update_cost(sim, 1, sim_scale.status_set(1))
    assert (cost["msgs"], cost["hops_max"], cost["sent_max"]) == (3, 2, 2)


def test_every_peer_gets_the_flood(sim_scale: ModuleType) -> None:
    """A node with more peers than the first round of syncs takes floods to all of them."""
    star = sim_scale.Topology("star", 5, ((0, 1), (0, 2), (0, 3), (0, 4)))
    cost = sim_scale.update_cost(sim_scale.Measured(star), 0, sim_scale.config_set(0))
    assert (cost["msgs"], cost["sent_max"], cost["reached"]) == (4, 4, 5)


def test_leaves_hold_only_their_share(sim_scale: ModuleType) -> None:
    topo = sim_scale.leaf_spine(6, spines=2)  # n0, n1 spines; n2..n5 leaves
    # workload_figures raises if a leaf holds another's key.
    figures = sim_scale.workload_figures(sim_scale.Measured(topo), topo)
    per_node = sim_scale.CONFIG_KEYS + sim_scale.STATUS_KEYS
    assert figures["leaf_keys_max"] == per_node and figures["leaf_keys_min"] == per_node
    assert figures["full_keys_min"] == per_node * 6
    # A key only n5 wants, written at n0: n0 -> n1 -> n5 (n5 hangs off spine n1).
    sim = sim_scale.Measured(topo)
    key = sim_scale.config_set(5)
    cost = sim_scale.update_cost(sim, 0, key)
    assert (cost["msgs"], cost["hops_max"], cost["reached"]) == (2, 2, 3)
    assert sim.received[2:5] == [0, 0, 0]
    # An anti-entropy round with the stores in sync: one digest request and its reply each.
    assert sim_scale.anti_entropy_round(sim)["ae_msgs_per_node"] == 2


def test_a_new_leaf_syncs_only_its_share(sim_scale: ModuleType) -> None:
    full, leaf = sim_scale.join_cost(20, leaf=False), sim_scale.join_cost(20, leaf=True)
    assert full["keys"] == 20 * 20 and leaf["keys"] == 20
    assert leaf["bytes"] * 10 < full["bytes"]

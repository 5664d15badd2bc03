"""Conflicting VPP sub-interfaces written straight into the store (`kvmesh config set` has no
view of the node's whole desired state): the agent's own validation makes the one VPP would
refuse INVALID, naming the other, whatever order they arrive in; the winner is applied."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kvmesh.agent.recon import DeviceState
from kvmesh.agent.status import decode_status
from kvstore.client import KvStoreClient
from tests.agent.test_agent_vpp import Setup, rig
from tests.util import wait_until

PARENT = "vpp/interface/lo1"
FIRST = "vpp/interface/lo1.a"  # first in key order: the one that is applied
SECOND = "vpp/interface/lo1.b"


def sub(sub_id: int, vlan: int) -> dict[str, Any]:
    return {"type": "sub_interface",
            "sub_interface": {"parent": "lo1", "sub_id": sub_id, "outer_vlan": vlan}}


def status(setup: Setup, model_key: str) -> dict[str, Any] | None:
    key = f"status/v1/{model_key}"
    with KvStoreClient(setup.node.cmd_url) as client:
        found = client.get([key]).get(key)
    return decode_status(found.value if found else None)


def state_of(setup: Setup, model_key: str) -> str | None:
    record = status(setup, model_key)
    return None if record is None else str(record["state"])


def delete_config(setup: Setup, model_key: str) -> None:
    with KvStoreClient(setup.node.cmd_url) as client:
        client.set_key(f"config/v1/{model_key}", b"")


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[Setup]:
    with rig(tmp_path, coalesce_s=0.01, reconnect_backoff_s=(0.1, 1.0)) as prepared:
        prepared.agent.start()
        wait_until(lambda: prepared.vpp_state() is DeviceState.KNOWN, timeout=30)
        prepared.set_config(PARENT, {"type": "loopback"})
        wait_until(lambda: state_of(prepared, PARENT) == "CONFIGURED", timeout=30)
        yield prepared


def expect_first_wins(setup: Setup, claim: str) -> None:
    wait_until(lambda: state_of(setup, FIRST) == "CONFIGURED"
               and state_of(setup, SECOND) == "INVALID", timeout=30,
               message="the first in key order applied, the second INVALID")
    record = status(setup, SECOND)
    assert record is not None
    assert FIRST in record["error"] and claim in record["error"], record
    assert {"lo1.a", "lo1"} <= setup.vpp_interfaces()
    assert "lo1.b" not in setup.vpp_interfaces()
    # VPP was never asked for the second: no refusal at apply
    assert "retval.create_vlan_subif.-56" not in setup.emulator.control.counters()


@pytest.mark.parametrize("arrival", [(FIRST, SECOND), (SECOND, FIRST)], ids=["in", "reversed"])
def test_the_same_sub_interface_id_twice_is_invalid_whatever_the_arrival_order(
    setup: Setup, arrival: tuple[str, str]
) -> None:
    for key in arrival:
        setup.set_config(key, sub(10, 10 if key == FIRST else 20))
        # one transaction each: the second arrives when the first is applied
        wait_until(lambda: state_of(setup, key) is not None, timeout=30)  # noqa: B023
    expect_first_wins(setup, "sub-interface id 10")
    # the winner goes: the other is no longer refused and is applied
    delete_config(setup, FIRST)
    wait_until(lambda: state_of(setup, SECOND) == "CONFIGURED", timeout=30,
               message="the second applied once the first is gone")
    assert "lo1.b" in setup.vpp_interfaces() and "lo1.a" not in setup.vpp_interfaces()


def test_the_same_vlan_twice_on_one_parent_is_invalid(setup: Setup) -> None:
    setup.set_config(SECOND, sub(20, 10))
    wait_until(lambda: state_of(setup, SECOND) == "CONFIGURED", timeout=30)
    setup.set_config(FIRST, sub(10, 10))
    expect_first_wins(setup, "VLAN 10")
    # the loser changes to a VLAN of its own: no longer in conflict
    setup.set_config(SECOND, sub(20, 20))
    wait_until(lambda: state_of(setup, SECOND) == "CONFIGURED", timeout=30)
    assert {"lo1.a", "lo1.b"} <= setup.vpp_interfaces()

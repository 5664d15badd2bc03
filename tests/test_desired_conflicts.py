"""Values that are valid one by one but that the plane refuses together are INVALID before
anything is applied: `plan` reports them, `apply` writes nothing (issue 28: two sub-interfaces
with one parent and VLAN passed `plan` and failed at apply with VLAN_ALREADY_EXISTS, the rest
applied)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kvmesh.agent.models import invalid_values

LO = {"type": "loopback"}


def sub(parent: str = "lo1", sub_id: int = 10, outer: int = 10, **extra):
    return {"type": "sub_interface",
            "sub_interface": {"parent": parent, "sub_id": sub_id, "outer_vlan": outer, **extra}}


def test_one_vlan_twice_on_a_parent_is_invalid() -> None:
    values = {"vpp/interface/lo1": LO, "vpp/interface/a": sub(), "vpp/interface/b": sub()}
    errors = invalid_values(values)
    assert list(errors) == ["vpp/interface/b"]  # the second in key order
    message = str(errors["vpp/interface/b"])
    assert "sub-interface id 10 on lo1 is vpp/interface/a already" in message
    assert "VLAN_ALREADY_EXISTS" in message


def test_same_tags_under_another_sub_id_and_qinq() -> None:
    values = {"vpp/interface/a": sub(sub_id=1, outer=20),
              "vpp/interface/b": sub(sub_id=2, outer=20),
              "vpp/interface/c": sub(sub_id=3, outer=20, inner_vlan=5),
              "vpp/interface/d": sub(sub_id=4, outer=20, inner_vlan=5)}
    errors = invalid_values(values)
    assert sorted(errors) == ["vpp/interface/b", "vpp/interface/d"]
    assert ("VLAN 20/5 on lo1 is vpp/interface/c already (the first in key order wins): "
            "VPP refuses the second (vlan is already in use)") in str(errors["vpp/interface/d"])


def test_no_conflict_on_other_parents_or_other_matches() -> None:
    values = {"vpp/interface/a": sub(), "vpp/interface/b": sub(parent="lo2"),
              "vpp/interface/c": sub(sub_id=11, outer=30, exact_match=False),
              "vpp/interface/d": sub(sub_id=12, outer=30)}
    assert invalid_values(values) == {}


@pytest.mark.process
def test_plan_reports_the_conflict_and_writes_nothing(tmp_path: Path) -> None:
    state = tmp_path / "state.yaml"
    state.write_text("nodes:\n  n9:\n"
                     "    vpp/interface/lo1: {type: loopback}\n"
                     "    vpp/interface/lo1.10: {type: sub_interface, sub_interface: "
                     "{parent: lo1, sub_id: 10, outer_vlan: 10}}\n"
                     "    vpp/interface/vlan10: {type: sub_interface, sub_interface: "
                     "{parent: lo1, sub_id: 10, outer_vlan: 10}}\n")
    result = subprocess.run([sys.executable, "-m", "kvmesh", "plan", "-f", str(state),
                             "--offline"], capture_output=True, text=True, timeout=60,
                            check=False)
    assert result.returncode == 1, result
    assert "invalid: n9: vpp/interface/vlan10: sub-interface id 10 on lo1 is " \
           "vpp/interface/lo1.10 already" in result.stderr

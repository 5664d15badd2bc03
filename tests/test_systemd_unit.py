"""packaging/systemd/kvmesh@.service: what issue 25 asks of it, and `systemd-analyze verify` on it
(which works without systemd as PID 1; it needs the ExecStart binary to exist, so the test points
it at this checkout's `kvmesh`)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
UNIT = REPO / "packaging" / "systemd" / "kvmesh@.service"
PACKAGED = REPO / "kvmesh" / "packaging" / "systemd" / "kvmesh@.service"
INSTALLED_KVMESH = "/usr/local/bin/kvmesh"


def settings(text: str) -> dict[str, list[str]]:
    """Every `Key=value` of the unit (a key may repeat), comments left out."""
    found: dict[str, list[str]] = {}
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith(("#", ";", "[")):
            key, _, value = line.partition("=")
            found.setdefault(key, []).append(value)
    return found


def verify(unit_text: str, directory: Path) -> subprocess.CompletedProcess[str]:
    """`systemd-analyze verify` of an instance of `unit_text`, ExecStart at a real kvmesh."""
    analyze = shutil.which("systemd-analyze")
    assert analyze, "systemd-analyze is missing: tools/setup.sh installs the systemd package"
    kvmesh = Path(sys.executable).with_name("kvmesh")
    assert kvmesh.exists(), kvmesh
    (directory / "kvmesh@.service").write_text(unit_text.replace(INSTALLED_KVMESH, str(kvmesh)))
    return subprocess.run([analyze, "verify", str(directory / "kvmesh@h1.service")],
                          capture_output=True, text=True, timeout=60, cwd=directory)


def test_the_repository_unit_is_the_packaged_one() -> None:
    """One file: packaging/systemd/ at the top links to the package data the wheel ships."""
    assert UNIT.resolve() == PACKAGED.resolve()


def test_unit_runs_the_instance_node_supervised_and_hardened() -> None:
    unit = settings(PACKAGED.read_text())
    assert unit["ExecStart"] == [f"{INSTALLED_KVMESH} node run --config /etc/kvmesh/%i.toml"]
    assert unit["Type"] == ["notify"]
    assert unit["Restart"] == ["on-failure"]
    assert unit["WatchdogSec"] and unit["WatchdogSec"][0] not in ("0", "infinity")
    assert unit["StateDirectory"] == ["kvmesh/%i"]  # the default data dir /var/lib/kvmesh/NAME
    assert "kvmesh/%i" in unit["RuntimeDirectory"][0].split()
    assert set(unit["CapabilityBoundingSet"][0].split()) == {"CAP_NET_ADMIN", "CAP_SYS_ADMIN"}
    assert set(unit["AmbientCapabilities"][0].split()) == {"CAP_NET_ADMIN", "CAP_SYS_ADMIN"}
    for key, value in (("NoNewPrivileges", "yes"), ("ProtectSystem", "strict"),
                       ("ProtectHome", "yes"), ("PrivateTmp", "yes")):
        assert unit[key] == [value], key


@pytest.mark.process
def test_systemd_analyze_verify_passes(tmp_path: Path) -> None:
    result = verify(PACKAGED.read_text(), tmp_path)
    assert result.returncode == 0 and not result.stderr.strip(), result.stderr


@pytest.mark.process
def test_systemd_analyze_verify_catches_a_broken_unit(tmp_path: Path) -> None:
    """The check can fail: a misspelt hardening key and a bad service type are reported."""
    broken = PACKAGED.read_text().replace("ProtectSystem=", "ProtectSystm=").replace(
        "Type=notify", "Type=notified")
    result = verify(broken, tmp_path)
    assert "ProtectSystm" in result.stderr and "notified" in result.stderr, result.stderr

"""The wheel installs into a fresh virtualenv, with no checkout and no package index, and runs a
node: its generated Thrift code, the VPP emulator's API definitions and the systemd unit come
from the package (tools/wheelhouse.sh builds the wheelhouse; issue 25)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from kvstore import KvStoreClient, KvStoreError
from kvstore.node_ports import free_tcp_port
from kvstore.version import __version__
from tests.util import wait_until

REPO = Path(__file__).resolve().parents[1]

pytestmark = [pytest.mark.process, pytest.mark.slow]


def run(*args: str | Path, cwd: Path, timeout: float = 300) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    result = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True,
                            text=True, timeout=timeout)
    assert result.returncode == 0, f"{args}: {result.stderr[-3000:]}"
    return result.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv (no pip of its own) with kvmesh installed from the wheelhouse alone."""
    tmp = tmp_path_factory.mktemp("wheel")
    wheelhouse = tmp / "wheelhouse"
    run(REPO / "tools" / "wheelhouse.sh", wheelhouse, cwd=tmp)
    venv = tmp / "venv"
    run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=tmp)
    run(sys.executable, "-m", "pip", "--python", venv / "bin" / "python", "install", "-q",
        "--no-index", "--find-links", wheelhouse, "kvmesh", cwd=tmp)
    return venv


def test_installed_package_is_the_venvs_own_with_its_data(installed: Path) -> None:
    probe = (
        "import importlib.metadata as m, importlib.resources as r, kvmesh, kvstore.gen;"
        "print(m.version('kvmesh'));"
        "print(kvmesh.__file__);"
        "print(kvstore.gen.__file__);"
        "print(r.files('kvmesh').joinpath('packaging/systemd/kvmesh@.service').read_text());"
        "print(len(list(r.files('kvmesh').joinpath('vppemu/api').iterdir())))"
    )
    out = run(installed / "bin" / "python", "-I", "-c", probe, cwd=installed)
    version, kvmesh_file, gen_file, *rest = out.split("\n")
    assert version == __version__
    assert kvmesh_file.startswith(str(installed)) and gen_file.startswith(str(installed))
    unit = "\n".join(rest[:-2])
    assert unit.strip() == (REPO / "packaging/systemd/kvmesh@.service").read_text().strip()
    assert int(rest[-2]) == len(list((REPO / "kvmesh/vppemu/api").glob("*.json")))
    assert "node" in run(installed / "bin" / "kvmesh", "--help", cwd=installed)


def test_installed_kvmesh_runs_a_node_outside_the_checkout(installed: Path,
                                                           tmp_path: Path) -> None:
    cmd_url = f"tcp://127.0.0.1:{free_tcp_port()}"
    kvmesh = installed / "bin" / "kvmesh"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    proc = subprocess.Popen(
        [kvmesh, "node", "run", "--name", "w1", "--cmd-url", cmd_url,
         "--pub-url", f"tcp://127.0.0.1:{free_tcp_port()}", "--insecure", "--ephemeral"],
        cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        def answers() -> bool:
            try:
                with KvStoreClient(cmd_url, timeout_s=1) as client:
                    client.node_info()
                return True
            except KvStoreError:
                return False

        wait_until(answers, timeout=30, message="the installed node answers")
        run(kvmesh, "--url", cmd_url, "key", "set", "wheel/probe", "installed", cwd=tmp_path)
        with KvStoreClient(cmd_url, timeout_s=5) as client:
            value = client.get(["wheel/probe"])["wheel/probe"]
        assert value.value == b"installed" and value.originator_id == "w1"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

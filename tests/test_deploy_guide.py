"""docs/deploy.md, run as written: three hosts from nothing, a fourth added, one removed, a
node's data backed up and restored (issue 25, "The guide is a test").

Every guide block that starts with `# on HOST` runs in that host: a network namespace of an
isolated lab (kvmesh.netlab: the hosts reach each other over a bridge, never over loopback) and
a private mount namespace in which the host's own directories stand at /etc/kvmesh,
/var/lib/kvmesh, /run/kvmesh and /var/backups (its shell starts in a directory of its own).
`systemctl` and `scp` are the shims of
tests/deploy_shims.py (systemctl runs the unit file's ExecStart and waits for its READY=1 on a
real NOTIFY_SOCKET). After the guide, the test checks what the guide promises.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from kvmesh import netlab
from tests.netns import netns_available
from tests.util import wait_until

pytestmark = [pytest.mark.process, pytest.mark.netns, pytest.mark.slow,
              pytest.mark.skipif(not netns_available(), reason="needs root and iproute2")]

REPO = Path(__file__).resolve().parents[1]
GUIDE = REPO / "docs" / "deploy.md"
SHIMS = Path(__file__).with_name("deploy_shims.py")
HOSTS = ("op", "h1", "h2", "h3", "h4")
MOUNTS = {"/etc/kvmesh": "etc", "/var/lib/kvmesh": "lib", "/run/kvmesh": "run",
          "/var/backups": "backups"}
BLOCK_TIMEOUT_S = 240


@dataclass(frozen=True)
class Block:
    host: str
    script: str
    line: int  # where it starts in the guide, for failure messages


def guide_blocks(text: str) -> list[Block]:
    """The guide's ```sh blocks that begin with `# on HOST`, in order."""
    blocks = []
    for match in re.finditer(r"^```sh\n(.*?)^```", text, flags=re.S | re.M):
        body = match.group(1)
        first, _, rest = body.partition("\n")
        on = re.fullmatch(r"# on (\S+)", first.strip())
        if on:
            blocks.append(Block(on.group(1), rest, text[:match.start()].count("\n") + 1))
    return blocks


def test_the_guide_names_its_hosts() -> None:
    blocks = guide_blocks(GUIDE.read_text())
    assert {b.host for b in blocks} == set(HOSTS)
    assert len(blocks) >= 12


class Fleet:
    """The guide's hosts: namespaces, their directories, a way to run a block in one."""

    def __init__(self, tmp: Path, lab: netlab.Lab) -> None:
        self.tmp = tmp
        self.lab = lab
        self.roots = {host: {mount: str(tmp / host / sub) for mount, sub in MOUNTS.items()}
                      for host in HOSTS}
        for host, dirs in self.roots.items():
            for directory in [*dirs.values(), str(tmp / host / "home")]:
                Path(directory).mkdir(parents=True, mode=0o755)
        bindir = tmp / "bin"
        bindir.mkdir()
        for shim in ("systemctl", "scp"):
            (bindir / shim).write_text(
                f"#!/bin/sh\nexec {shlex.quote(sys.executable)} {shlex.quote(str(SHIMS))} "
                f"{shim} \"$@\"\n")
            (bindir / shim).chmod(0o755)
        self.path = f"{bindir}:{Path(sys.executable).parent}:/usr/sbin:/usr/bin:/sbin:/bin"
        self.addresses = {f"H{h[1:]}": lab.address(h) for h in HOSTS if h != "op"}

    def run(self, block: Block) -> subprocess.CompletedProcess[str]:
        mounts = "".join(f"mount --bind {shlex.quote(real)} {mount}\n"
                         for mount, real in self.roots[block.host].items())
        home = self.tmp / block.host / "home"
        env_file = shlex.quote(str(home / ".guide-env"))
        script = (
            f"set -e\n{mounts}cd {shlex.quote(str(home))}\n"
            f"[ -f {env_file} ] && . {env_file}\n"
            f"{block.script}\n"
            # What the guide exported stays for the host's next block (a shell session).
            f"export -p | grep -E ' (KVMESH_[A-Z_]*)=' > {env_file} || true\n")
        env = {"PATH": self.path, "HOME": str(home), "LANG": "C.UTF-8",
               "PYTHONDONTWRITEBYTECODE": "1", "DEPLOY_GUIDE_ROOTS": json.dumps(self.roots),
               **self.addresses}
        if os.environ.get("PYTHONPATH"):
            env["PYTHONPATH"] = os.environ["PYTHONPATH"]
        return subprocess.run(
            ["ip", "netns", "exec", self.lab.namespaces[block.host],
             "unshare", "--mount", "--propagation", "private", "bash", "-c", script],
            capture_output=True, text=True, env=env, timeout=BLOCK_TIMEOUT_S, check=False)

    def kvmesh(self, host: str, *args: str) -> subprocess.CompletedProcess[str]:
        """`kvmesh ARGS` on a host as the guide's operator left its shell."""
        return self.run(Block(host, shlex.join(["kvmesh", *args]), 0))

    def stop_everything(self) -> None:
        for dirs in self.roots.values():
            for pid_file in Path(dirs["/run/kvmesh"]).glob("*.pid"):
                with contextlib.suppress(OSError, ValueError):
                    os.killpg(int(pid_file.read_text()), signal.SIGKILL)


@contextlib.contextmanager
def mount_points() -> Iterator[None]:
    """The directories the hosts' own are bound onto; made if missing, removed if made here."""
    made = []
    for mount in MOUNTS:
        if not Path(mount).exists():
            Path(mount).mkdir(mode=0o755, parents=True)
            made.append(mount)
    try:
        yield
    finally:
        for mount in reversed(made):
            with contextlib.suppress(OSError):
                Path(mount).rmdir()


@pytest.fixture
def fleet() -> Iterator[Fleet]:
    tmp = Path(tempfile.mkdtemp(prefix="kvm-deploy-"))
    lab = netlab.create_lab(list(HOSTS))
    hosts = None
    try:
        with mount_points():
            hosts = Fleet(tmp, lab)
            yield hosts
    finally:
        if hosts is not None:
            hosts.stop_everything()
        netlab.destroy_lab(lab)
        shutil.rmtree(tmp, ignore_errors=True)


def members(fleet: Fleet) -> dict[str, dict]:
    result = fleet.kvmesh("op", "--json", "member", "list")
    assert result.returncode == 0, result.stderr
    return {m["name"]: m for m in json.loads(result.stdout)["members"]}


def test_the_deploy_guide_as_written(fleet: Fleet) -> None:
    old_h2_secret = fleet.tmp / "h2-old.key_secret"
    for block in guide_blocks(GUIDE.read_text()):
        if block.host == "h2" and "keys generate h2" in block.script:
            # Kept to check that the rotation revoked it (the guide moves the new pair over).
            shutil.copyfile(Path(fleet.roots["h2"]["/etc/kvmesh"]) / "keys" / "h2.key_secret",
                            old_h2_secret)
        result = fleet.run(block)
        assert result.returncode == 0, (
            f"docs/deploy.md line {block.line} on {block.host} failed "
            f"({result.returncode}):\n{block.script}\n--- stdout\n{result.stdout[-3000:]}\n"
            f"--- stderr\n{result.stderr[-3000:]}")

    # Three nodes and the operator active, h4 removed (a record, not a deletion).
    states = {name: m["state"] for name, m in members(fleet).items()}
    assert states == {"operator": "active", "h1": "active", "h2": "active", "h3": "active",
                      "h4": "removed"}
    # The mesh is one: h1, reached directly, has what h3's agent published after the restore.
    def applied_on_h3() -> bool:
        result = fleet.kvmesh("op", "status", "h3")
        return result.returncode == 0 and "br-guide" in result.stdout \
            and "CONFIGURED" in result.stdout
    wait_until(applied_on_h3, timeout=30, message="h3's bridge CONFIGURED after the restore")
    # h2 rotated its key and restarted: peered again with h1 (which knows it from the record).
    def h2_back() -> bool:
        result = fleet.kvmesh("op", "--json", "peer", "dump")
        return result.returncode == 0 and \
            json.loads(result.stdout).get("h2", {}).get("state") == "INITIALIZED"
    wait_until(h2_back, timeout=30, message="h1 peered with h2 again after its key rotation")
    # h2's old key is refused, even by h3, whose authorized-keys/peer/ still lists it.
    old = fleet.run(Block("h3", f'kvmesh --url tcp://$H3:60002 --key-file {old_h2_secret} '
                                '--server-key /etc/kvmesh/keys/h3.key key get member/h1', 0))
    assert old.returncode != 0, old.stdout
    # h4, removed, is refused by the node it joined through.
    refused = fleet.run(Block("h4", 'kvmesh --url tcp://$H3:60002 --key-file '
                                    '/etc/kvmesh/keys/h4.key_secret --server-key '
                                    '/etc/kvmesh/h3.key key get member/h1', 0))
    assert refused.returncode != 0

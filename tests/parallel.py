"""What keeps tests apart when pytest-xdist runs them side by side (docs/testing.md, "How to write
a test that runs in parallel").

`isolate_session()` (called once per test process by tests/conftest.py, before any kvmesh module
is imported) gives the process:

* a runtime base of its own (`KVMESH_RUNTIME_DIR`): the default cluster and chaos run dirs and
  the agents' token directory lie under it, never under the machine's `/run/kvmesh`;
* a slice of the port range of its own (`KVMESH_PORT_RANGE`): `free_tcp_port` in two workers
  never draws the same port (each only checks that a port is bindable *now*);
* none of the caller's client settings (`KVMESH_RUN_DIR`, key, token and CA files): a test sees
  what it sets up, whatever shell ran the suite.

Names a test makes that other processes can see (network namespaces, links in the root
namespace, files outside tmp_path) carry `unique_prefix()`.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import uuid
from pathlib import Path

# Drawn from by free_tcp_port (kvstore/node_ports.py): below the kernel's ephemeral range.
PORT_LOW, PORT_HIGH = 20000, 32767
# Client settings a developer's shell may carry (`eval "$(kvmesh cluster env)"`).
CALLER_SETTINGS = ("KVMESH_RUN_DIR", "KVMESH_KEY_FILE", "KVMESH_SERVER_KEY",
                   "KVMESH_HTTP_TOKEN_FILE", "KVMESH_HTTP_CA")


def worker_index() -> tuple[int, int]:
    """(this worker's index, the number of workers): (0, 1) without xdist."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    index = int(name[2:]) if name.startswith("gw") and name[2:].isdigit() else 0
    return index % max(count, 1), max(count, 1)


def port_slice(index: int, count: int) -> tuple[int, int]:
    """The inclusive port range of worker `index` of `count`."""
    size = (PORT_HIGH - PORT_LOW + 1) // count
    low = PORT_LOW + index * size
    return low, low + size - 1


def unique_prefix(stem: str = "kvt") -> str:
    """A short name prefix no other test process uses (pid and randomness): for namespaces
    (`cluster.up(netns_prefix=...)`), links in the root namespace, anything machine-wide.
    Keep `stem` to a few letters: Linux link names are at most 15 bytes."""
    return f"{stem}{os.getpid() % 100000}{uuid.uuid4().hex[:4]}"


RUNTIME_PREFIX = "kvmesh-rt-"


def isolate_session() -> Path:
    """Set this test process's environment apart (see the module doc); returns its runtime
    base, removed when the process exits (and, if it was killed first, by the next test
    process: `sweep_dead_runtime_bases`)."""
    for name in CALLER_SETTINGS:
        os.environ.pop(name, None)
    base = Path(tempfile.mkdtemp(prefix=f"{RUNTIME_PREFIX}{os.getpid()}-"))
    os.environ["KVMESH_RUNTIME_DIR"] = str(base)
    low, high = port_slice(*worker_index())
    os.environ["KVMESH_PORT_RANGE"] = f"{low}-{high}"
    atexit.register(shutil.rmtree, base, True)
    sweep_dead_runtime_bases(base.parent)
    return base


def sweep_dead_runtime_bases(tmp: Path) -> list[Path]:
    """Remove the runtime bases (`kvmesh-rt-<pid>-*`) of test processes that are gone: a worker
    killed outright (SIGKILL, a timeout) never runs its exit handler. A base whose process may
    still live (its pid exists, whoever has it now) is left alone."""
    from kvmesh.launch import pid_alive  # after isolate_session has set the environment

    removed = []
    for base in tmp.glob(f"{RUNTIME_PREFIX}*-*"):
        pid = base.name[len(RUNTIME_PREFIX):].partition("-")[0]
        if not pid.isdigit() or pid_alive(int(pid)):
            continue
        shutil.rmtree(base, ignore_errors=True)
        removed.append(base)
    return removed


def scratch_dir(prefix: str) -> Path:
    """A new directory under this test process's runtime base, for what needs a short path
    (unix socket paths are limited to 107 bytes); the caller removes it, and the base goes with
    the process in any case."""
    return Path(tempfile.mkdtemp(prefix=prefix, dir=os.environ["KVMESH_RUNTIME_DIR"]))

"""Where kvmesh keeps runtime state unless told otherwise: one base directory, one mode rule.

The base is `$KVMESH_RUNTIME_DIR` when set, else `/run/kvmesh` for root, else
`$XDG_RUNTIME_DIR/kvmesh` (or `~/.local/state/kvmesh` without it). Under it, one directory per
purpose: `cluster/` (`kvmesh cluster`), `chaos/` (`kvmesh chaos run`), `agents/` (the agents'
REST tokens). Never a predictable path in a world-writable directory (docs/security.md).

The mode rule: the base is 0755, whichever command makes it first. It holds directories only, and
each carries its own protection (`cluster/` and `chaos/` 0700, `agents/` 0750 with the group
`kvmesh`); the base must let that group through to `agents/`, and 0700 made by one command
would lock the group out of what another made (0.4.0 did that: the first of `cluster up` or an
agent decided). A base that exists with another mode is set to 0755 when the invoking user owns
it. The test suite points `KVMESH_RUNTIME_DIR` at a directory of its own, so no test touches the
machine's `/run/kvmesh`.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

RUNTIME_DIR_ENV = "KVMESH_RUNTIME_DIR"
ROOT_BASE = Path("/run/kvmesh")
BASE_MODE = 0o755


def base(euid: int | None = None) -> Path:
    """The invoking user's base directory (see the module doc); nothing is made."""
    override = os.environ.get(RUNTIME_DIR_ENV)
    if override:
        return Path(override)
    if (os.geteuid() if euid is None else euid) == 0:
        return ROOT_BASE
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    home_base = Path(runtime) if runtime else Path.home() / ".local" / "state"
    return home_base / "kvmesh"


def default_dir(purpose: str, euid: int | None = None) -> Path:
    """`<base>/<purpose>`: the default directory of `purpose` (cluster, chaos, agents)."""
    return base(euid) / purpose


def make_base_for(path: Path) -> None:
    """Before making `path`: if it lies under the base, make the base first, with its mode
    (an existing base of the user's own is set to it). Elsewhere nothing is done."""
    root = base()
    try:
        Path(os.path.abspath(path)).relative_to(os.path.abspath(root))
    except ValueError:
        return
    os.makedirs(root.parent, mode=0o755, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        os.mkdir(root, BASE_MODE)
    st = os.lstat(root)
    if stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() \
            and stat.S_IMODE(st.st_mode) != BASE_MODE:
        os.chmod(root, BASE_MODE)

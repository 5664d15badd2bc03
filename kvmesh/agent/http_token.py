"""Bearer token files of the agent's REST API: read a configured one, make one at start.

An agent started without `--http-token-file` makes a fresh token and writes it where the local
CLI looks for it: `<token dir>/<netns>-<host>-<port>.token`, named by the agent's network
namespace and address, so that the CLI (which must be in that namespace to reach a loopback
address) finds the token of exactly the agent it talks to, and never reads a path the mesh
names (a forged `node/<N>/agent` record cannot make it send a token elsewhere).

The token directory is the invoking user's: `/run/kvmesh/agents` for root, else
`$XDG_RUNTIME_DIR/kvmesh/agents` (or `~/.local/state/kvmesh/agents`); `agents/` under
`$KVMESH_RUNTIME_DIR` when that is set (`kvmesh.rundirs`). The file is born with its
final mode — 0600, or 0640 with the group `kvmesh` when that group exists — opened with
O_CREAT|O_EXCL|O_NOFOLLOW (a planted file or symlink is replaced, never followed), and written
only once nobody else can open it (`kvstore.safefs`: the directory and file rules of every
secret kvmesh keeps). The files of agents that were killed (nobody listens on their
address any more) are swept when the next agent writes its own.
"""

from __future__ import annotations

import contextlib
import grp
import os
import secrets
from pathlib import Path

from kvmesh import rundirs
from kvmesh.agent.proc_net import anyone_listens
from kvstore import safefs

ROOT_TOKEN_DIR = rundirs.ROOT_BASE / "agents"
TOKEN_GROUP = "kvmesh"
MIN_TOKEN_CHARS = 16


class TokenFileError(ValueError):
    """An unusable token file or directory; the message names it and why."""


def read_token(path: str | os.PathLike[str]) -> str:
    try:
        token = Path(path).read_text().strip()
    except OSError as exc:
        raise TokenFileError(f"{path}: cannot read the token: {exc.strerror or exc}") from exc
    if len(token) < MIN_TOKEN_CHARS or any(c.isspace() for c in token):
        raise TokenFileError(f"{path}: a token is one word of at least {MIN_TOKEN_CHARS} "
                             f"characters")
    return token


def new_token() -> str:
    return secrets.token_urlsafe(32)


def token_dir(euid: int | None = None) -> Path:
    """The invoking user's directory for agent tokens: `<runtime base>/agents`
    (`kvmesh.rundirs`)."""
    return rundirs.default_dir("agents", euid)


def search_dirs() -> list[Path]:
    """Where a client looks for an agent's token: its own directory, then root's."""
    return list(dict.fromkeys([token_dir(), ROOT_TOKEN_DIR]))


def netns_id() -> str:
    """This process's network namespace (its inode), as in a token file's name."""
    try:
        return str(os.stat("/proc/self/ns/net").st_ino)
    except OSError:
        return "0"


def token_name(host: str, port: int) -> str:
    return f"{netns_id()}-{host}-{port}.token"


def sweep_stale(directory: Path) -> list[Path]:
    """Remove the token files of agents of this network namespace that are gone (killed before
    they could remove theirs): nobody listens on their address any more. An agent writes its
    file only once it listens, so a live agent's file is never taken."""
    prefix = f"{netns_id()}-"
    removed = []
    with contextlib.suppress(OSError):
        for path in directory.glob(f"{prefix}*.token"):
            host, _sep, port = path.name[len(prefix):-len(".token")].rpartition("-")
            if port.isdigit() and not anyone_listens(host, int(port)):
                with contextlib.suppress(OSError):
                    path.unlink()
                    removed.append(path)
    return removed


def _group() -> int | None:
    try:
        return grp.getgrnam(TOKEN_GROUP).gr_gid
    except KeyError:
        return None


def write_token_file(path: Path, token: str) -> None:
    """Create `path` holding `token`, readable by its owner (and the kvmesh group) only; an
    older file of that name (a killed agent's, or planted) is replaced, never followed."""
    gid = _group()
    try:
        rundirs.make_base_for(path.parent)
        safefs.private_dir(path.parent, group=gid)
    except OSError as exc:
        raise TokenFileError(f"token directory: {exc}") from exc
    sweep_stale(path.parent)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    try:
        # Born 0600: only once it has the kvmesh group (and before a byte of the token is in
        # it) may the group read it.
        safefs.write_new(path, (token + "\n").encode(), 0o640 if gid is not None else 0o600,
                         group=gid)
    except OSError as exc:
        raise TokenFileError(f"{path}: cannot create the token file: "
                             f"{exc.strerror or exc}") from exc


def remove_token_file(path: Path, token: str) -> None:
    """Remove `path` if it still holds `token` (another agent may have taken the name since)."""
    with contextlib.suppress(TokenFileError, OSError):
        if read_token(path) == token:
            os.unlink(path)

"""Bearer token files of the agent's REST API: read a configured one, make one at start.

An agent started without `--http-token-file` makes a fresh token and writes it where the local
CLI looks for it: `<token dir>/<netns>-<host>-<port>.token`, named by the agent's network
namespace and address, so that the CLI (which must be in that namespace to reach a loopback
address) finds the token of exactly the agent it talks to, and never reads a path the mesh
names (a forged `node/<N>/agent` record cannot make it send a token elsewhere).

The token directory is the invoking user's: `/run/kvmesh/agents` for root, else
`$XDG_RUNTIME_DIR/kvmesh/agents` (or `~/.local/state/kvmesh/agents`). The file is born with its
final mode — 0600, or 0640 with the group `kvmesh` when that group exists — opened with
O_CREAT|O_EXCL|O_NOFOLLOW (a planted file or symlink is replaced, never followed), and written
only once nobody else can open it. The files of agents that were killed (nobody listens on their
address any more) are swept when the next agent writes its own.
"""

from __future__ import annotations

import contextlib
import grp
import os
import secrets
import stat
from pathlib import Path

from kvmesh.agent.proc_net import anyone_listens

ROOT_TOKEN_DIR = Path("/run/kvmesh/agents")
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
    """The invoking user's directory for agent tokens."""
    if (os.geteuid() if euid is None else euid) == 0:
        return ROOT_TOKEN_DIR
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    base = Path(runtime) if runtime else Path.home() / ".local" / "state"
    return base / "kvmesh" / "agents"


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


def _private_dir(path: Path, gid: int | None) -> None:
    """Make `path` (0700, or 0750 with the kvmesh group) and check nobody else controls it."""
    for directory in reversed([path, *path.parents]):
        if not os.path.lexists(directory):
            with contextlib.suppress(FileExistsError):
                os.mkdir(directory, 0o755 if directory != path else 0o700)
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise TokenFileError(f"{path}: not a directory (a symlink?): refusing it for tokens")
    if st.st_uid != os.geteuid():
        raise TokenFileError(f"{path}: owned by uid {st.st_uid}, not by the agent's uid "
                             f"{os.geteuid()}: refusing it for tokens")
    if st.st_mode & 0o022:
        raise TokenFileError(f"{path}: writable by group or others (mode "
                             f"{stat.S_IMODE(st.st_mode):04o}): refusing it for tokens")
    if gid is not None and (st.st_gid != gid or stat.S_IMODE(st.st_mode) != 0o750):
        with contextlib.suppress(PermissionError):
            os.chown(path, -1, gid)
            os.chmod(path, 0o750)


def write_token_file(path: Path, token: str) -> None:
    """Create `path` holding `token`, readable by its owner (and the kvmesh group) only; an
    older file of that name (a killed agent's, or planted) is replaced, never followed."""
    gid = _group()
    _private_dir(path.parent, gid)
    sweep_stale(path.parent)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600)
    except OSError as exc:
        raise TokenFileError(f"{path}: cannot create the token file: "
                             f"{exc.strerror or exc}") from exc
    try:
        # Born 0600: only now, before a byte of the token is in it, may the group read it.
        if gid is not None:
            with contextlib.suppress(PermissionError):
                os.fchown(fd, -1, gid)
                os.fchmod(fd, 0o640)
        if stat.S_IMODE(os.fstat(fd).st_mode) & 0o037:  # a umask cannot widen, but be sure
            os.fchmod(fd, 0o600)
        os.write(fd, (token + "\n").encode())
    finally:
        os.close(fd)


def remove_token_file(path: Path, token: str) -> None:
    """Remove `path` if it still holds `token` (another agent may have taken the name since)."""
    with contextlib.suppress(TokenFileError, OSError):
        if read_token(path) == token:
            os.unlink(path)

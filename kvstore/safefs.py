"""Safe directories and files for run, data and key directories (docs/security.md).

A directory kvmesh keeps state, logs or keys in must be the invoking user's alone: another local
user who made it first (or can write to it) could plant a key that is then trusted, or a symlink
that redirects a log or key write into a file of her choice. So:

- `private_dir` creates each missing component 0700 and refuses (UnsafePathError, one line) a
  directory that is a symlink, is not owned by the invoking user, or is group/world-writable; and
  every existing parent must be owned by the user or root and, if others can write to it,
  sticky (like /tmp), so that nobody else can rename our directory away and put hers in place.
- Files are opened with O_NOFOLLOW (a planted symlink is refused, never followed), must be
  regular files owned by the user, and are created with their final mode at open time (no
  write-then-chmod window, whatever the umask).

Everything here raises UnsafePathError (an OSError, so existing `except OSError` handlers show
its one-line message) for an unsafe path, and OSError for the rest.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path

PRIVATE_DIR_MODE = 0o700
SECRET_MODE = 0o600
LOG_MODE = 0o600


class UnsafePathError(OSError):
    """A path another user could control; the message is one line naming it and why."""

    def __init__(self, path: str | os.PathLike[str], why: str) -> None:
        super().__init__(errno.EPERM, f"refusing {os.fspath(path)}: {why}")

    def __str__(self) -> str:
        return str(self.strerror)


def _who(uid: int) -> str:
    try:
        import pwd

        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except (KeyError, ImportError):
        return f"uid {uid}"


def check_private_dir(path: str | os.PathLike[str]) -> None:
    """`path` exists, is a directory (not a symlink), is the invoking user's and nobody else
    can write to it; its parents are trusted (see the module doc)."""
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        raise UnsafePathError(path, "it is a symlink (a run/data/key directory must be a "
                                    "real directory)")
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafePathError(path, "not a directory")
    uid = os.geteuid()
    if st.st_uid != uid:
        raise UnsafePathError(path, f"owned by {_who(st.st_uid)}, not by the invoking "
                                    f"{_who(uid)} (another user made it first?)")
    if st.st_mode & 0o022:
        raise UnsafePathError(path, f"writable by group or others (mode "
                                    f"{stat.S_IMODE(st.st_mode):04o}; chmod go-w it)")
    _check_parents(Path(os.path.abspath(path)).parent)


def _check_parents(directory: Path) -> None:
    """Every directory from `directory` up to / is owned by the user or root, and sticky
    if group/others may write to it (a symlink on the way is followed: its target is checked)."""
    uid = os.geteuid()
    real = Path(os.path.realpath(directory))
    for parent in (real, *real.parents):
        st = os.stat(parent)
        if st.st_uid not in (uid, 0):
            raise UnsafePathError(parent, f"a parent directory owned by {_who(st.st_uid)} "
                                          f"(who could replace what is under it)")
        if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
            raise UnsafePathError(parent, f"a parent directory writable by group or others "
                                          f"and not sticky (mode {stat.S_IMODE(st.st_mode):04o})")


def private_dir(path: str | os.PathLike[str], group: int | None = None) -> Path:
    """Make `path` (and each missing parent, 0700) if needed and check it is private.

    `group`: a directory the group `group` may read too (an agent's tokens for the `kvmesh`
    group): `path` gets that group and mode 0750, and the parents it makes 0755 (the group must
    be able to reach it); where the group cannot be set (not root), it stays 0700."""
    target = Path(os.path.abspath(path))
    missing: list[Path] = []
    probe = target
    while not os.path.lexists(probe):
        missing.append(probe)
        probe = probe.parent
    for directory in reversed(missing):
        mode = PRIVATE_DIR_MODE if group is None or directory == target else 0o755
        with contextlib.suppress(FileExistsError):  # made meanwhile: checked below
            os.mkdir(directory, mode)
    check_private_dir(target)
    if group is not None:
        st = os.lstat(target)
        if st.st_gid != group or stat.S_IMODE(st.st_mode) != 0o750:
            with contextlib.suppress(PermissionError):
                os.chown(target, -1, group)
                os.chmod(target, 0o750)
    return target


def check_owned_file(path: str | os.PathLike[str]) -> None:
    """An existing file kvmesh is about to trust (a reused key, say): a regular file, not a
    symlink, owned by the invoking user."""
    st = os.lstat(path)
    _check_file_stat(path, st)


def check_private_file(path: str | os.PathLike[str]) -> None:
    """A file kvmesh is about to take credentials from (a cluster's state, its token): owned
    by the invoking user (see `check_owned_file`) and writable by nobody else."""
    st = os.lstat(path)
    _check_file_stat(path, st)
    if st.st_mode & 0o022:
        raise UnsafePathError(path, f"writable by group or others (mode "
                                    f"{stat.S_IMODE(st.st_mode):04o})")


def _check_file_stat(path: str | os.PathLike[str], st: os.stat_result) -> None:
    if stat.S_ISLNK(st.st_mode):
        raise UnsafePathError(path, "it is a symlink")
    if not stat.S_ISREG(st.st_mode):
        raise UnsafePathError(path, "not a regular file")
    if st.st_uid != os.geteuid():
        raise UnsafePathError(path, f"owned by {_who(st.st_uid)}, not by the invoking "
                                    f"{_who(os.geteuid())}")


def _open(path: str | os.PathLike[str], flags: int, mode: int | None) -> int:
    """os.open with O_NOFOLLOW (and O_NONBLOCK, so a planted FIFO cannot hang us), then check
    what was opened; a file opened for writing ends with exactly `mode`."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                     SECRET_MODE if mode is None else mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafePathError(path, "it is a symlink") from None
        if exc.errno == errno.ENXIO:
            raise UnsafePathError(path, "not a regular file") from None
        raise
    try:
        st = os.fstat(fd)
        _check_file_stat(path, st)
        if mode is not None and stat.S_IMODE(st.st_mode) != mode:
            os.fchmod(fd, mode)  # an older file with a wider mode (or a umask narrowed ours)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_log(path: str | os.PathLike[str], mode: int = LOG_MODE) -> int:
    """A log file to append to (created `mode`); an fd the caller (or a child) owns."""
    return _open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, mode)


def write_new(path: str | os.PathLike[str], data: bytes, mode: int = SECRET_MODE,
              group: int | None = None) -> None:
    """Create `path` (it must not exist: O_EXCL) with `mode` from the start and write `data`.

    `group`: the file is born 0600, gets the group `group`, and only then (still empty) `mode`
    (0640, say), so no one outside that group can ever open it; where the group cannot be set
    (not root) it stays 0600."""
    try:
        fd = _open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL,
                   mode if group is None else SECRET_MODE)
    except FileExistsError:
        raise UnsafePathError(path, "exists already (not overwriting it)") from None
    with os.fdopen(fd, "wb") as handle:
        if group is not None:
            with contextlib.suppress(PermissionError):
                os.fchown(fd, -1, group)
                os.fchmod(fd, mode)
        handle.write(data)


def write_replace(path: str | os.PathLike[str], data: bytes, mode: int = SECRET_MODE) -> None:
    """Write `path` whole, atomically: a new temporary file (O_EXCL, `mode`) next to it,
    renamed over it (a symlink at `path` is replaced, never followed)."""
    # Loaded here: tempfile brings shutil and its compression modules (0.6 MiB), and a KvStore
    # node, which imports this module, never replaces a file.
    import tempfile

    target = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_trusted(path: str | os.PathLike[str]) -> bytes:
    """The bytes of a file kvmesh takes its orders from (a node's configuration file): a
    regular file owned by the invoking user or by root, writable by nobody else, in
    directories nobody else can replace it in (see `check_private_dir`'s parents).

    Root is trusted as an owner because a root-owned file writable only by root is the usual
    /etc layout (`/etc/kvmesh/NAME.toml` for a node run by systemd as another user), and root
    can change whatever the node runs anyway. A symlink is followed: it is the file it leads
    to, and that file's directories, that are checked."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO: no hang
    try:
        _check_trusted(path, os.fstat(fd))
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    with os.fdopen(fd, "rb") as handle:
        return handle.read()


def _check_trusted(path: str | os.PathLike[str], st: os.stat_result) -> None:
    if stat.S_ISDIR(st.st_mode):
        raise UnsafePathError(path, "it is a directory, not a file")
    if not stat.S_ISREG(st.st_mode):
        raise UnsafePathError(path, "not a regular file")
    if st.st_uid not in (os.geteuid(), 0):
        raise UnsafePathError(path, f"owned by {_who(st.st_uid)}, not by the invoking "
                                    f"{_who(os.geteuid())} or root")
    if st.st_mode & 0o022:
        raise UnsafePathError(path, f"writable by group or others (mode "
                                    f"{stat.S_IMODE(st.st_mode):04o}; chmod go-w it)")
    for directory in {Path(os.path.abspath(path)).parent, Path(os.path.realpath(path)).parent}:
        _check_parents(directory)


def read_owned(path: str | os.PathLike[str]) -> bytes:
    """The bytes of a file kvmesh made itself (a token, state): no symlink, owned by the user."""
    with os.fdopen(_open(path, os.O_RDONLY, None), "rb") as handle:
        return handle.read()

"""The source tree of a released version, taken from the repository's history.

Releases are listed in tests/compat/RELEASES (version and the main-branch commit it was cut
from). `export_release` writes that commit's Python packages into a directory of its own with
`git archive` (rather than `git worktree add`: nothing is registered in the repository's .git,
so parallel test runs cannot trip over each other's worktree locks and a killed run leaves no
stale worktree behind). Code of the release then runs with this venv's interpreter and
dependencies, its tree first on the path (`release_env`), from a working directory outside
both trees, so `import kvstore` resolves to the release (`imported_from` checks it).

A clone without the commit (shallow, or a fork) is fetched from `origin`; if that fails too,
`ReleaseTreeError` says so — the compatibility tests fail on it, they never skip.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RELEASES_FILE = REPO / "tests" / "compat" / "RELEASES"
# What a release's code needs to run (the rest of the tree is docs and tests).
PACKAGES = ("kvstore", "kvmesh", "scheduler", "southbound")


class ReleaseTreeError(RuntimeError):
    """The release's code cannot be had (the message says what to do)."""


def releases() -> dict[str, str]:
    """version -> commit, oldest first (as RELEASES lists them)."""
    out: dict[str, str] = {}
    for line in RELEASES_FILE.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            version, commit = line.split()
            out[version] = commit
    return out


def newest_release() -> str:
    return list(releases())[-1]


def _git(*args: str, check: bool = True) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, check=check)


def ensure_commit(commit: str) -> None:
    """The commit is in this clone, fetched from origin if it was not."""
    if _git("cat-file", "-e", f"{commit}^{{commit}}", check=False).returncode == 0:
        return
    fetched = _git("fetch", "--no-tags", "origin", commit, check=False)
    if _git("cat-file", "-e", f"{commit}^{{commit}}", check=False).returncode != 0:
        why = fetched.stderr.decode(errors="replace").strip() or "no error text"
        raise ReleaseTreeError(
            f"commit {commit} (tests/compat/RELEASES) is not in this clone and `git fetch "
            f"origin {commit}` did not bring it ({why}): clone with full history "
            "(git fetch --unshallow)")


def extract_safely(archive: tarfile.TarFile, dest: Path) -> None:
    """Unpack `archive` under `dest` with tarfile's "data" filter where the interpreter has it
    (3.11.4 and later: Debian 12's 3.11.2 has not); else only regular files and directories
    whose names stay under `dest` (all these archives hold), anything else refused."""
    if hasattr(tarfile, "data_filter"):
        archive.extractall(dest, filter="data")
        return
    for member in archive:
        name = Path(member.name)
        if name.is_absolute() or ".." in name.parts or not (member.isfile() or member.isdir()):
            raise ReleaseTreeError(f"refusing archive member {member.name!r} (not a plain file "
                                   "or directory under the destination)")
        archive.extract(member, dest)


def export_release(version: str, dest: Path) -> Path:
    """The packages of release `version` under `dest` (created); returns `dest`."""
    table = releases()
    if version not in table:
        raise ReleaseTreeError(f"no release {version} in {RELEASES_FILE}")
    commit = table[version]
    ensure_commit(commit)
    dest.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(["git", "-C", str(REPO), "archive", "--format=tar", commit,
                             *PACKAGES], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    with tarfile.open(fileobj=proc.stdout, mode="r|") as archive:
        extract_safely(archive, dest)
    err = proc.stderr.read() if proc.stderr is not None else b""
    if proc.wait() != 0:
        raise ReleaseTreeError(f"git archive {commit} failed: {err.decode(errors='replace')}")
    return dest


def release_env(tree: Path) -> dict[str, str]:
    """Environment additions that make this venv's python import `tree`'s packages first
    (PYTHONPATH comes before site-packages, where the editable install of today's tree is)."""
    return {"PYTHONPATH": str(tree), "PYTHONNOUSERSITE": "1"}


def imported_from(tree: Path, cwd: Path) -> dict[str, str]:
    """Where this venv's python, run as a release's processes are, imports each package from
    (package -> directory); ReleaseTreeError unless every one is under `tree`."""
    code = ("import json, importlib; print(json.dumps({p: __import__(p).__path__[0] "
            f"for p in {PACKAGES!r}}}))")
    out = subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True,
                         env={**os.environ, **release_env(tree)}, check=True).stdout
    where: dict[str, str] = json.loads(out)
    wrong = {p: d for p, d in where.items() if not Path(d).resolve().is_relative_to(
        tree.resolve())}
    if wrong:
        raise ReleaseTreeError(f"the release's processes would import {wrong}, not {tree}")
    return where

"""Issue 17 item 2: run, data and key directories another local user could control are refused,
planted symlinks are never followed, and secret files are born 0600 (kvstore/safefs.py).

"Another user made it first" is simulated by chowning a directory to `nobody` (uid 65534), so the
tests need root (as the attack did: root's `kvmesh cluster up` reused mallory's directory)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kvmesh import cluster, rundirs
from kvmesh.agent.http_token import token_dir
from kvstore import curve, safefs
from kvstore.storage import DurableStore, StorageError
from tests.util import wait_until

NOBODY = 65534
VICTIM_TEXT = "root's file, not to be touched\n"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="chowns to another user: needs root")


def kvmesh(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kvmesh", *args], capture_output=True,
                          text=True, timeout=120)


def refused_up(run_dir: Path) -> subprocess.CompletedProcess[str]:
    """`kvmesh cluster up` from run_dir, expected to be refused: one error line, exit 1,
    nothing left running."""
    result = kvmesh("cluster", "up", "--nodes", "1", "--no-netns", "--run-dir", str(run_dir))
    if result.returncode == 0:  # not refused (the bug): stop what it started, then fail
        kvmesh("cluster", "down", "--run-dir", str(run_dir))
    assert result.returncode == 1, result
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "refusing" in errors[0], result.stderr
    assert "Traceback" not in result.stderr
    return result


@pytest.fixture
def victim(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "victim-file"
    path.write_text(VICTIM_TEXT)
    yield path
    assert path.read_text() == VICTIM_TEXT  # every test: the victim is untouched


def test_run_dir_made_by_another_user_is_refused(tmp_path: Path) -> None:
    # mallory's directory at the path root will use, with her operator key in it.
    run_dir = tmp_path / "kvmesh-cluster"
    (run_dir / "keys").mkdir(parents=True)
    curve.generate("operator", run_dir / "keys")
    planted = (run_dir / "keys" / "operator.key_secret").read_bytes()
    for path in (run_dir, run_dir / "keys", *(run_dir / "keys").iterdir()):
        os.chown(path, NOBODY, NOBODY)
    result = refused_up(run_dir)
    assert f"owned by uid {NOBODY}" in result.stderr
    assert (run_dir / "keys" / "operator.key_secret").read_bytes() == planted
    assert sorted(p.name for p in run_dir.iterdir()) == ["keys"]  # nothing added


def test_world_writable_run_dir_and_unsafe_parent_are_refused(tmp_path: Path) -> None:
    run_dir = tmp_path / "open"
    run_dir.mkdir(mode=0o777)
    run_dir.chmod(0o777)
    assert "writable by group or others" in refused_up(run_dir).stderr
    # Our own directory, but under one another user owns (she could swap ours for hers).
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, NOBODY, NOBODY)
    mine = theirs / "mine"
    mine.mkdir(mode=0o700)
    assert "a parent directory owned by uid 65534" in refused_up(mine).stderr
    # A parent others may write to must be sticky (like /tmp), or they could swap ours.
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(safefs.UnsafePathError, match="not sticky"):
        safefs.private_dir(shared / "run")
    shared.chmod(0o1777)
    assert safefs.private_dir(shared / "run") == shared / "run"
    # A run dir that is a symlink (to a directory of ours) is refused too.
    (tmp_path / "link").symlink_to(tmp_path / "real", target_is_directory=True)
    (tmp_path / "real").mkdir(mode=0o700)
    assert "symlink" in refused_up(tmp_path / "link").stderr


def test_planted_log_symlink_is_refused_not_followed(tmp_path: Path, victim: Path) -> None:
    run_dir = safefs.private_dir(tmp_path / "run")
    (run_dir / "n1.log").symlink_to(victim)
    assert "n1.log: it is a symlink" in refused_up(run_dir).stderr
    assert cluster.status(run_dir)["running"] is False


def test_planted_key_symlinks_are_refused(tmp_path: Path, victim: Path) -> None:
    # A dangling link where the operator's secret key will be written: not written through.
    run_dir = safefs.private_dir(tmp_path / "run")
    keys = safefs.private_dir(run_dir / "keys")
    target = tmp_path / "would-be-created"
    (keys / "operator.key_secret").symlink_to(target)
    assert "operator.key_secret: it is a symlink" in refused_up(run_dir).stderr
    assert not target.exists()
    # A link to an existing file: neither reused as the key nor overwritten.
    (keys / "operator.key_secret").unlink()
    (keys / "operator.key_secret").symlink_to(victim)
    assert "operator.key_secret: it is a symlink" in refused_up(run_dir).stderr
    # `kvmesh keys generate` into a directory with a planted link.
    (keys / "n7.key_secret").symlink_to(target)
    result = kvmesh("keys", "generate", "n7", "--out", str(keys))
    assert result.returncode == 2 and "exists: not overwriting" in result.stderr
    assert not target.exists()


def test_down_refuses_a_state_file_in_someone_elses_dir(tmp_path: Path) -> None:
    """`down` kills the pids in cluster.json: a planted one must not make root kill anything."""
    bystander = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        run_dir = tmp_path / "run"
        run_dir.mkdir()
        node = {"cmd_url": "x", "pub_url": "y", "netns": None, "http": None,
                "pids": {"node": bystander.pid}}
        (run_dir / "cluster.json").write_text(json.dumps(
            {"run_dir": str(run_dir), "topology": "chain", "nodes": {"n1": node}}))
        os.chown(run_dir, NOBODY, NOBODY)
        result = kvmesh("cluster", "down", "--run-dir", str(run_dir))
        assert result.returncode == 1 and "refusing" in result.stderr, result
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()


def test_data_dir_of_another_user_is_refused(tmp_path: Path) -> None:
    data = tmp_path / "data" / "n1"
    data.mkdir(parents=True)
    os.chown(data, NOBODY, NOBODY)
    with pytest.raises(StorageError, match="owned by uid 65534"):
        DurableStore(data, "n1").open()
    os.chown(data, 0, 0)
    data.chmod(0o770)
    with pytest.raises(StorageError, match="writable by group or others"):
        DurableStore(data, "n1").open()
    # The node itself: one line, non-zero exit, before it binds anything.
    result = kvmesh("node", "run", "--name", "n1", "--insecure", "--cmd-url",
                    "tcp://127.0.0.1:1", "--pub-url", "tcp://127.0.0.1:2", "--data-dir", str(data))
    assert result.returncode == 1 and "writable by group or others" in result.stderr, result


def _creations(monkeypatch: pytest.MonkeyPatch) -> dict[str, tuple[int, int]]:
    """Every file created through os.open (path -> flags, mode), with the umask at 0 so a mode
    the code asks for is the mode the file gets."""
    made: dict[str, tuple[int, int]] = {}
    real_open = os.open

    def recording_open(path: str | os.PathLike[str], flags: int, mode: int = 0o777,
                       *args: object, **kwargs: object) -> int:
        if flags & os.O_CREAT:
            made[os.fspath(path)] = (flags, mode)
        return real_open(path, flags, mode, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", recording_open)
    monkeypatch.setattr(os, "umask", lambda _mask: 0)  # nothing may narrow the umask back
    return made


def test_secret_files_are_born_0600(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    old_umask = os.umask(0)  # the caller's umask protects nothing
    try:
        made = _creations(monkeypatch)
        run_dir = safefs.private_dir(tmp_path / "run")
        _auth, secrets = cluster.make_keys(run_dir, ["n1"])
        _cert, key, token = cluster.make_http_credentials(run_dir, ["198.18.0.1"])
    finally:
        monkeypatch.undo()
        os.umask(old_umask)
    for secret in (*secrets.values(), token):
        flags, mode = made[str(secret)]  # created by os.open, so with a mode...
        assert mode == 0o600 and flags & os.O_EXCL and flags & os.O_NOFOLLOW, secret
    for secret in (*secrets.values(), token, key):  # ...and that is the mode it has
        assert stat.S_IMODE(secret.stat().st_mode) == 0o600, secret
    for directory in (run_dir, run_dir / "keys", run_dir / "authorized-keys" / "peer"):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700, directory
    assert stat.S_IMODE(secrets["n1"].with_suffix(".key").stat().st_mode) == 0o644
    # No temporary directory of openssl's left behind.
    assert not [p for p in run_dir.iterdir() if p.name.startswith(".")]


def test_logs_are_private_and_a_restore_is_announced(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    said: list[str] = []
    try:
        cluster.up(1, run_dir=run_dir, namespaces=False, agents=False, progress=said.append)
        assert stat.S_IMODE((run_dir / "n1.log").stat().st_mode) == 0o600
        assert not any("restoring" in line for line in said)
        wait_until(lambda: (run_dir / "data" / "n1" / "kvstore.sqlite3").exists(), 10,
                   message="n1's database")
        cluster.down(run_dir)
        said.clear()
        cluster.up(1, run_dir=run_dir, namespaces=False, agents=False, progress=said.append)
        assert [line for line in said if "restoring" in line] == [
            f"restoring the configuration of n1 from {run_dir / 'data'} "
            f"(kvmesh cluster down --purge starts empty)"]
    finally:
        cluster.down(run_dir, purge=True)


def test_default_run_dir_is_the_users_own(monkeypatch: pytest.MonkeyPatch) -> None:
    # The suite runs with a runtime base of its own (tests/parallel.py): the override first.
    assert cluster.default_run_dir() == Path(os.environ["KVMESH_RUNTIME_DIR"]) / "cluster"
    assert token_dir() == Path(os.environ["KVMESH_RUNTIME_DIR"]) / "agents"
    monkeypatch.delenv("KVMESH_RUNTIME_DIR")
    assert cluster.default_run_dir() == Path("/run/kvmesh/cluster")
    assert token_dir() == Path("/run/kvmesh/agents")
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setenv("XDG_RUNTIME_DIR", "/run/user/1000")
    assert cluster.default_run_dir("chaos") == Path("/run/user/1000/kvmesh/chaos")
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    monkeypatch.setenv("HOME", "/home/alice")
    assert cluster.default_run_dir() == Path("/home/alice/.local/state/kvmesh/cluster")


def test_the_runtime_base_is_0755_whichever_command_makes_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`cluster up` used to make /run/kvmesh 0700 and an agent 0755 (its token group must get
    through): one rule now, and a base left 0700 is put right."""
    base = tmp_path / "rt"
    monkeypatch.setenv("KVMESH_RUNTIME_DIR", str(base))
    old_umask = os.umask(0o077)  # a strict umask must not decide the mode either
    try:
        rundirs.make_base_for(cluster.default_run_dir() / "x")
        assert stat.S_IMODE(base.stat().st_mode) == 0o755
        base.chmod(0o700)
        rundirs.make_base_for(token_dir())
        assert stat.S_IMODE(base.stat().st_mode) == 0o755
        rundirs.make_base_for(tmp_path / "elsewhere")  # not under the base: left alone
        base.chmod(0o700)
        rundirs.make_base_for(tmp_path / "elsewhere")
        assert stat.S_IMODE(base.stat().st_mode) == 0o700
    finally:
        os.umask(old_umask)


GROUP = 1  # a group that exists everywhere (daemon): stands in for `kvmesh`


def test_a_group_readable_directory_and_file_get_their_group_before_their_mode(
        tmp_path: Path) -> None:
    """An agent's token for the `kvmesh` group: the directory 0750 and the file 0640, both
    with that group, the file born 0600 and widened only once the group is set; the parents
    made on the way stay reachable (0755)."""
    directory = safefs.private_dir(tmp_path / "kvmesh" / "agents", group=GROUP)
    st = directory.stat()
    assert (stat.S_IMODE(st.st_mode), st.st_gid) == (0o750, GROUP)
    assert stat.S_IMODE((tmp_path / "kvmesh").stat().st_mode) == 0o755
    safefs.write_new(directory / "t.token", b"secret\n", 0o640, group=GROUP)
    st = (directory / "t.token").stat()
    assert (stat.S_IMODE(st.st_mode), st.st_gid) == (0o640, GROUP)
    assert safefs.private_dir(directory, group=GROUP) == directory  # reused as it is
    directory.chmod(0o770)
    with pytest.raises(safefs.UnsafePathError, match="writable by group or others"):
        safefs.private_dir(directory, group=GROUP)


def test_credentials_come_only_from_files_nobody_else_can_write(tmp_path: Path) -> None:
    token = tmp_path / "token"
    safefs.write_new(token, b"t\n")
    safefs.check_private_file(token)
    token.chmod(0o620)
    with pytest.raises(safefs.UnsafePathError, match="writable by group or others"):
        safefs.check_private_file(token)
    link = tmp_path / "link"
    link.symlink_to(token)
    with pytest.raises(safefs.UnsafePathError, match="symlink"):
        safefs.check_private_file(link)
    os.chown(token, NOBODY, NOBODY)
    token.chmod(0o600)
    with pytest.raises(safefs.UnsafePathError, match="owned by uid 65534"):
        safefs.check_private_file(token)

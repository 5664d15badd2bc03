"""The durable store in real node processes: restart after SIGKILL, acknowledgement means
durable, corrupt databases, a second process on one data dir, a full or read-only disk, and how
the node says it got its state (EMPTY / RESTORED / SYNCED)."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from kvstore.client import KvStoreError, KvStoreRequestError, make_value
from kvstore.storage import DB_FILE
from tests.kvstore.conftest import REPO, Mesh, Node
from tests.util import wait_until


def durable_node(mesh: Mesh, name: str, data_dir: Path, **config: object) -> Node:
    return mesh.allocate(name, data_dir=str(data_dir), **config)


def counters(node: Node) -> dict[str, int]:
    with node.client() as client:
        return client.counters()


def test_sigkill_and_restart_keeps_infinite_ttl_keys_only(mesh: Mesh, tmp_path: Path) -> None:
    node = mesh.start(durable_node(mesh, "d1", tmp_path / "d1"))
    with node.client() as client:
        assert client.node_info(refresh=True).store_state == "EMPTY"
        client.set({
            "config/d1/a": make_value(b"kept", version=3, originator_id="op"),
            "status/d1/b": make_value(b"refreshed by its owner", version=1,
                                      originator_id="d1", ttl_ms=60_000),
            "config/d1/erased": make_value(b"x", version=1, originator_id="op"),
        })
        # `key erase`: a TTL-only update to a finite TTL: it leaves the durable part.
        client.set({"config/d1/erased": make_value(None, version=1, originator_id="op",
                                                   ttl_ms=60_000, ttl_version=1)})
    node.kill()  # SIGKILL: no shutdown path runs
    mesh.start(node)
    with node.client() as client:
        got = client.dump()
        info = client.node_info(refresh=True)
        count = client.counters()
    assert set(got) == {"config/d1/a"}, "infinite-TTL keys come back, finite ones do not"
    a = got["config/d1/a"]
    assert (a.version, a.originator_id, a.value) == (3, "op", b"kept")
    assert info.store_state == "RESTORED"
    assert count["kvstore.store_state"] == 1 and count["kvstore.store_state.RESTORED"] == 1
    assert count["kvstore.storage.loaded_keys"] == 1


def test_acknowledged_writes_survive_sigkill(mesh: Mesh, tmp_path: Path) -> None:
    """16 writers; the node is killed while they write; every acknowledged write is back."""
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    node = mesh.start(durable_node(mesh, "d2", tmp_path / "d2"))
    acked: dict[str, int] = {}
    lock = threading.Lock()
    stop = threading.Event()

    def writer(index: int) -> None:
        version = 0
        with node.client(timeout_s=2.0) as client:
            while not stop.is_set():
                version += 1
                key = f"config/d2/w{index}/{version % 7}"
                try:
                    reasons = client.set({key: make_value(b"v%d" % version, version=version,
                                                          originator_id="op")})
                except KvStoreError:
                    return  # the node is gone
                assert not reasons, reasons
                with lock:
                    acked[key] = max(acked.get(key, 0), version)

    threads = [threading.Thread(target=writer, args=(i,), daemon=True) for i in range(16)]
    for thread in threads:
        thread.start()
    target = rng.randrange(200, 1500)
    wait_until(lambda: len(acked) >= 50 and sum(acked.values()) >= target, timeout=60)
    node.kill()
    stop.set()
    for thread in threads:
        thread.join(timeout=10)
    with lock:
        expected = dict(acked)
    mesh.start(node)
    with node.client() as client:
        got = client.dump(prefix="config/d2/")
    lost = {k: v for k, v in expected.items() if k not in got or got[k].version < v}
    assert not lost, (f"acknowledged writes lost (seed {seed}; rerun: pytest "
                      f"{__file__}::test_acknowledged_writes_survive_sigkill): {lost}")


def run_node(*args: str) -> subprocess.CompletedProcess[str]:
    """`kvmesh node run` as a user types it, run to its exit (a refusal to start is the CLI's
    own behaviour under test: not through the launcher, kvmesh.launch)."""
    return subprocess.run([sys.executable, "-m", "kvmesh", "node", "run", "--insecure", *args],
                          cwd=REPO,
                          capture_output=True, text=True, timeout=60)


def test_corrupt_database_refuses_to_start_unless_discarded(mesh: Mesh, tmp_path: Path) -> None:
    data_dir = tmp_path / "d3"
    data_dir.mkdir()
    (data_dir / DB_FILE).write_bytes(b"garbage, not a database" * 500)
    result = run_node("--name", "d3", "--cmd-url", "tcp://127.0.0.1:0",
                      "--pub-url", "tcp://127.0.0.1:0", "--data-dir", str(data_dir))
    assert result.returncode == 1
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and str(data_dir / DB_FILE) in lines[0], result.stderr
    assert "--discard-corrupt-state" in lines[0]
    assert "Traceback" not in result.stderr

    node = durable_node(mesh, "d3", data_dir)
    node.config["discard_corrupt_state"] = True
    mesh.start(node)
    with node.client() as client:
        assert client.node_info(refresh=True).store_state == "EMPTY"
    assert "DISCARDING CORRUPT STATE" in node.log()
    assert list(data_dir.glob(f"{DB_FILE}.corrupt-*")), "the corrupt file is kept aside"


def test_second_process_on_one_data_dir_is_refused(mesh: Mesh, tmp_path: Path) -> None:
    data_dir = tmp_path / "d4"
    first = mesh.start(durable_node(mesh, "d4", data_dir))
    result = run_node("--name", "d4", "--cmd-url", "tcp://127.0.0.1:0",
                      "--pub-url", "tcp://127.0.0.1:0", "--data-dir", str(data_dir))
    assert result.returncode == 1
    assert f"data dir {data_dir} is in use by another kvmesh node (pid " in result.stderr
    assert first.answers(), "the first node is untouched"


def test_store_state_is_synced_only_after_a_completed_peer_sync(
        mesh: Mesh, tmp_path: Path) -> None:
    b = mesh.allocate("sb")
    a = mesh.start(durable_node(mesh, "sa", tmp_path / "sa", sync_timeout_ms=500,
                                sync_initial_backoff_ms=100, sync_max_backoff_ms=200),
                   peers=[b])
    with a.client() as client:
        client.set({"config/x": make_value(b"1", version=1, originator_id="op")})
    mesh.wait_ready(a)  # the round is over: its only peer failed
    assert counters(a)["kvstore.store_state.EMPTY"] == 1, "a failed peer does not sync a node"
    a.kill()
    mesh.start(a, wait=True)
    assert counters(a)["kvstore.store_state.RESTORED"] == 1
    mesh.start(b, peers=[a])
    wait_until(lambda: counters(a)["kvstore.store_state.SYNCED"] == 1, timeout=30,
               message="SYNCED once the peer answered a full sync")
    with b.client() as client:
        assert client.get(["config/x"])["config/x"].value == b"1"


# ---------------------------------------------------------------------- a full, read-only disk


@contextlib.contextmanager
def tiny_tmpfs(path: Path, size: str) -> Iterator[Path]:
    path.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                   check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


@pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs (root)")
def test_full_disk(mesh: Mesh, tmp_path: Path) -> None:
    with tiny_tmpfs(tmp_path / "mnt", "1m") as mnt:
        node = mesh.start(durable_node(mesh, "d5", mnt / "d5"))
        acked: dict[str, bytes] = {}
        refused = None
        with node.client() as client:
            for i in range(2000):
                key = f"config/d5/big{i}"
                data = os.urandom(4000)
                try:
                    client.set({key: make_value(data, version=1, originator_id="op")})
                except KvStoreRequestError as exc:
                    refused = exc
                    break
                acked[key] = data
            assert refused is not None, "a 1 MiB disk fills up"
            assert refused.code == "STORAGE_ERROR" and "disk full" in str(refused), refused
            # Reads and further requests keep working; the refusal is counted.
            assert client.get([next(iter(acked))])
            count = client.counters()
            assert count["kvstore.errors.STORAGE_ERROR"] >= 1
            assert count["kvstore.storage.healthy"] == 0
            with pytest.raises(KvStoreRequestError, match="STORAGE_ERROR"):
                client.set({"config/d5/more": make_value(b"x", version=1, originator_id="op")})
            # Room again: the writer's retry succeeds and writes are acknowledged again.
            subprocess.run(["mount", "-o", "remount,size=64m", str(mnt)], check=True)
            wait_until(lambda: client.counters()["kvstore.storage.healthy"] == 1, timeout=30)
            client.set({"config/d5/after": make_value(b"y", version=1, originator_id="op")})
            acked["config/d5/after"] = b"y"
        node.kill()
        mesh.start(node)
        with node.client() as client:
            got = client.dump(prefix="config/d5/")
        lost = [k for k, v in acked.items() if k not in got or got[k].value != v]
        assert not lost, f"acknowledged writes lost: {lost[:5]} ({len(lost)})"


@pytest.mark.skipif(os.geteuid() != 0, reason="chattr +i (root)")
def test_unwritable_database_files(mesh: Mesh, tmp_path: Path) -> None:
    """Files the node cannot write (immutable here; a read-only or failing disk alike): KEY_SET
    is refused with STORAGE_ERROR, reads go on, and writing resumes once it can."""
    data_dir = tmp_path / "d7"
    node = mesh.start(durable_node(mesh, "d7", data_dir))
    frozen = [str(data_dir / DB_FILE), str(data_dir / f"{DB_FILE}-wal")]
    with node.client() as client:
        client.set({"config/d7/before": make_value(b"1", version=1, originator_id="op")})
        subprocess.run(["chattr", "+i", *frozen], check=True)
        try:
            with pytest.raises(KvStoreRequestError, match=r"STORAGE_ERROR.*I/O error"):
                client.set({"config/d7/k": make_value(b"2", version=1, originator_id="op")})
            assert client.get(["config/d7/before"])["config/d7/before"].value == b"1"
            assert client.counters()["kvstore.storage.errors"] >= 1
        finally:
            subprocess.run(["chattr", "-i", *frozen], check=True)
        wait_until(lambda: client.counters()["kvstore.storage.healthy"] == 1, timeout=30,
                   message="the writer's retry succeeds once the files are writable")
        client.set({"config/d7/after": make_value(b"3", version=1, originator_id="op")})
    node.kill()
    mesh.start(node)
    with node.client() as client:
        assert {"config/d7/before", "config/d7/after"} <= set(client.dump(prefix="config/d7/"))


def test_sigterm_writes_what_is_pending(mesh: Mesh, tmp_path: Path) -> None:
    """batch durability: acknowledged before the disk, but a clean stop writes everything."""
    node = mesh.start(durable_node(mesh, "d6", tmp_path / "d6", durability="batch"))
    with node.client() as client:
        client.set({f"config/d6/k{i}": make_value(b"v", version=1, originator_id="op")
                    for i in range(5000)})
    assert node.stop(signal.SIGTERM) == 0
    mesh.start(node)
    with node.client() as client:
        assert len(client.dump(prefix="config/d6/")) == 5000

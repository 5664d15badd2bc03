"""Nodes of the previous release and of today's in one mesh (real processes, agents, VPP
emulators): flooding, full sync and anti-entropy converge both ways, desired state written on a
node of one release is applied by an agent of the other, `kvmesh status` shows both; a rolling
upgrade under load loses nothing; and a data directory goes back to the previous release.

The previous release's code is its commit from the repository's history
(tools/compat/release_tree.py); a clone without it fetches it or the test FAILS, never skips."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import pytest
import zmq

from kvmesh import cluster, launch
from kvmesh.chaos.model import WriteLog, check_store
from kvmesh.chaos.workload import Writer, monotonic_ms
from kvmesh.cluster import LEGACY_VERSION, node_versions
from kvstore import safefs, stats, wire
from kvstore.client import make_value
from kvstore.db import compare_values
from kvstore.gen.kvstore_thrift.ttypes import Command, KeySetParams, PeerState, Request
from kvstore.storage import DB_FILE
from kvstore.value import TTL_INFINITY, Value
from kvstore.version import PROTOCOL_VERSION, __version__
from tests.compat.conftest import ALL_RELEASES, release_launch_env
from tests.compat.mixed import NODE_CONFIG, TODAY, Member, ring, wait_everywhere
from tests.util import wait_until

PREVIOUS = ALL_RELEASES[-1]  # the newest release: today's code must run beside it
pytestmark = pytest.mark.process

LOOP = {"type": "loopback"}


def _start(members: dict[str, Member], plan: dict[str, str],
           release_tree: Callable[[str], Path]) -> None:
    for name, release in plan.items():  # all at once, then wait: they start in parallel
        members[name].start(release, None if release == TODAY else release_tree(release),
                            wait=False)
    for member in members.values():
        assert member.proc is not None
        member.proc.wait_answering(member.cmd_url)
    for member in members.values():
        wait_until(member.synced, timeout=30, message=f"{member.name} synced\n{member.log()}")


def _inject_unflooded(member: Member, key: str, value: bytes) -> None:
    """Set `key` on `member` alone: a one-way KEY_SET whose flood path names every peer of
    `member`, so flooding sends it nowhere; only anti-entropy can spread it."""
    request = Request(cmd=Command.KEY_SET, key_set=KeySetParams(
        key_vals={key: make_value(value, version=1, originator_id="ae")},
        solicit_response=False, node_ids=sorted(member.peers)))
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    try:
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 1000)
        sock.connect(member.cmd_url)
        sock.send_multipart([b"", wire.encode(request)])
        sock.close(linger=1000)
    finally:
        ctx.term()


def test_two_releases_in_one_mesh_converge_and_apply_each_others_desired_state(
        tmp_path: Path, release_tree: Callable[[str], Path]) -> None:
    names = ["n1", "n2", "n3", "n4"]
    # A ring old-new-old-new: every peering crosses releases.
    plan = {"n1": PREVIOUS, "n2": TODAY, "n3": PREVIOUS, "n4": TODAY}
    with ring(tmp_path, names) as members:
        _start(members, plan, release_tree)
        old, new = [members["n1"], members["n3"]], [members["n2"], members["n4"]]
        # Each process runs the tree it was meant to: only today's code says its version.
        for member in old:
            info = member.info()
            assert (info.version, info.protocol) == (None, None), member.name
            assert node_versions(member.cmd_url, None) == {"version": LEGACY_VERSION,
                                                           "protocol": 1}
        for member in new:
            assert (member.info().version, member.info().protocol) == (
                __version__, PROTOCOL_VERSION)
            with member.client() as client:
                peers = client.peers()
            for name in member.peers:  # both its peers are old: protocol 1, no version
                spec = peers[name]
                assert spec.state == PeerState.INITIALIZED and spec.refused is None
                assert (spec.protocol, spec.version) == (1, None)
        _cluster_status_shows_versions(tmp_path / "run", members)
        # Flooding, both ways.
        with members["n1"].client() as client:
            client.set_key("flood/from-old", b"o")
        with members["n2"].client() as client:
            client.set_key("flood/from-new", b"n")
        wait_everywhere(members, "flood/from-old", b"o")
        wait_everywhere(members, "flood/from-new", b"n")
        # Anti-entropy, both ways: a key only one node holds reaches every node.
        repairs_before = sum(m.counters().get(stats.ANTI_ENTROPY_REPAIRS, 0)
                             for m in members.values())
        _inject_unflooded(members["n3"], "ae/on-old", b"ao")
        _inject_unflooded(members["n4"], "ae/on-new", b"an")
        ae_deadline = 4 * NODE_CONFIG["sync_interval_s"] + 10
        wait_everywhere(members, "ae/on-old", b"ao", timeout=ae_deadline)
        wait_everywhere(members, "ae/on-new", b"an", timeout=ae_deadline)
        assert sum(m.counters().get(stats.ANTI_ENTROPY_REPAIRS, 0)
                   for m in members.values()) > repairs_before
        # Full sync, both ways: what was written while a node was down reaches it when it
        # comes back (its peers are of the other release).
        for down, writer in (("n2", "n1"), ("n3", "n4")):
            members[down].stop()
            members[down].wait_agent_gone()
            with members[writer].client() as client:
                client.set_key(f"fs/while-{down}-down", b"f")
            members[down].start(plan[down], members[down].tree)
            wait_until(members[down].synced, timeout=30, message=f"{down} synced again")
            wait_everywhere(members, f"fs/while-{down}-down", b"f")
            assert members[down].counters()[stats.FULL_SYNC_SUCCESS] >= 1
        # Desired state written on a node of one release, applied by an agent of the other.
        members["n1"].set_config("n2", {"vpp/interface/loopa": LOOP})  # old -> new agent
        members["n4"].set_config("n3", {"vpp/interface/loopb": LOOP})  # new -> old agent
        wait_until(lambda: members["n2"].state_of("vpp/interface/loopa") == "CONFIGURED",
                   timeout=30, message=f"n2 applied loopa\n{members['n2'].log()}")
        wait_until(lambda: members["n3"].state_of("vpp/interface/loopb") == "CONFIGURED",
                   timeout=30, message=f"n3 applied loopb\n{members['n3'].log()}")
        assert "loopa" in members["n2"].vpp_interfaces()
        assert "loopb" in members["n3"].vpp_interfaces()
        # `kvmesh status` (today's CLI), asked of an old node, shows both agents' statuses.
        shown = subprocess.run(
            [sys.executable, "-m", "kvmesh", "--url", members["n1"].cmd_url, "status"],
            capture_output=True, text=True, timeout=60, cwd=tmp_path)
        assert shown.returncode == 0, shown.stderr
        lines = shown.stdout.splitlines()
        for node, key in (("n2", "vpp/interface/loopa"), ("n3", "vpp/interface/loopb")):
            assert any(line.split()[:3] == [node, key, "CONFIGURED"] for line in lines), (
                shown.stdout)
        # The agents' own records: today's say their versions, the old ones do not.
        for member in new:
            record = member.agent_record()
            assert record is not None
            assert (record["version"], record["protocol"]) == (__version__, PROTOCOL_VERSION)
        for member in old:
            record = member.agent_record()
            assert record is not None and "version" not in record


def _cluster_status_shows_versions(run_dir: Path, members: dict[str, Member]) -> None:
    """`kvmesh cluster status` of these processes (a run dir written for them) shows each
    node's version as the node says it: its own for today's, "0.4.0?" for the old ones."""
    state = cluster.ClusterState(str(safefs.private_dir(run_dir)), "ring", {
        name: cluster.NodeInfo(m.cmd_url, m.pub_url, None, m.http,
                               pids={"node": m.proc.pid} if m.proc else {})
        for name, m in members.items()})
    state.save()
    want = {name: __version__ if m.release == TODAY else LEGACY_VERSION
            for name, m in members.items()}
    as_json = subprocess.run([sys.executable, "-m", "kvmesh", "--json", "cluster", "status",
                              "--run-dir", str(run_dir)], capture_output=True, text=True,
                             timeout=60, cwd=run_dir)
    assert as_json.returncode == 0, as_json.stderr
    nodes = json.loads(as_json.stdout)["nodes"]
    assert {name: info["version"] for name, info in nodes.items()} == want
    table = subprocess.run([sys.executable, "-m", "kvmesh", "cluster", "status", "--run-dir",
                            str(run_dir)], capture_output=True, text=True, timeout=60,
                           cwd=run_dir).stdout
    assert "VERSION" in table.splitlines()[0]
    for name, version in want.items():
        assert any(line.split()[:3] == [name, "full", version] for line in table.splitlines())


# ------------------------------------------------------------------------ rolling upgrade

def _caught_up(member: Member, log: WriteLog, before_ms: int) -> bool:
    """Does `member` hold, for every key with an acknowledged infinite-TTL write finished before
    `before_ms`, that write or a better one?"""
    best: dict[str, Value] = {}
    for write in log.snapshot():
        if not write.acked or write.done_ms > before_ms or write.value.value is None or \
                write.value.ttl_ms != TTL_INFINITY:
            continue
        held = best.get(write.key)
        if held is None or compare_values(write.value, held) == 1:
            best[write.key] = write.value
    with member.client() as client:
        store = client.get(list(best))
    return all(key in store and compare_values(store[key], value) >= 0
               for key, value in best.items())


def _configured(member: Member, model_key: str) -> bool:
    return member.state_of(model_key) == "CONFIGURED"


def _resynced(member: Member) -> tuple[dict[str, int]] | None:
    writes = member.southbound_writes()
    return None if writes is None else (writes,)


@pytest.mark.slow
def test_rolling_upgrade_under_load_loses_no_acknowledged_write(
        tmp_path: Path, release_tree: Callable[[str], Path]) -> None:
    names = ["n1", "n2", "n3", "n4"]
    with ring(tmp_path, names) as members:
        _start(members, dict.fromkeys(names, PREVIOUS), release_tree)
        # Every agent has something applied in its VPP before the upgrade.
        for name, member in members.items():
            member.set_config(name, {f"vpp/interface/lo{name}": LOOP})
        for name, member in members.items():
            wait_until(partial(_configured, member, f"vpp/interface/lo{name}"), timeout=30,
                       message=f"{name} configured")
        log = WriteLog()
        writer = Writer("w1", [m.cmd_url for m in members.values()], log, seed=26,
                        pace_s=0.01)
        writer.start()
        convergence: dict[str, float] = {}
        try:
            wait_until(lambda: log.acknowledged() > 50, timeout=20,
                       message="the writer's first writes acknowledged")
            for name in names:
                member = members[name]
                member.stop()
                member.wait_agent_gone()  # never two agents for one node
                member.start(TODAY, None)
                restarted_ms = monotonic_ms()
                assert member.info().version == __version__
                wait_until(member.synced, timeout=30, message=f"{name} synced after upgrade")
                wait_until(partial(_caught_up, member, log, restarted_ms), timeout=30,
                           message=f"{name} holds what was acknowledged before its restart")
                convergence[name] = (monotonic_ms() - restarted_ms) / 1000
                # The agent's warm restart: VPP already holds its value, nothing is written.
                resynced = wait_until(partial(_resynced, member), timeout=30,
                                      message=f"{name}'s agent resynced")
                assert resynced is not None
                (writes,) = resynced
                assert not any(writes.values()), (name, writes)
                assert member.state_of(f"vpp/interface/lo{name}") == "CONFIGURED"
                assert f"lo{name}" in member.vpp_interfaces()
        finally:
            writer.stop()
            writer.join(timeout=10)
        print(f"rolling upgrade: {log.acknowledged()} acknowledged writes, {writer.uncertain} "
              f"uncertain; caught up after its restart (s): {convergence}")
        assert log.acknowledged() > 200, log.acknowledged()
        bound = NODE_CONFIG["sync_interval_s"] + 2
        assert all(seconds <= bound for seconds in convergence.values()), convergence

        # Every acknowledged write is on every node (the chaos checker's rule), and the
        # digests agree.
        def converged() -> list[str]:
            expected = log.expectations()
            problems: list[str] = []
            digests = set()
            for name, member in members.items():
                now = monotonic_ms()
                with member.client() as client:
                    store = client.dump()
                    digests.add(client.node_info(refresh=True).digest)
                problems += check_store(name, store, expected, now, present_margin_ms=500,
                                        bound_ms=1000, foreign_prefixes=(
                                            "config/", "status/", "node/"))
            return problems + ([f"{len(digests)} digests"] if len(digests) > 1 else [])

        deadline = time.monotonic() + 30
        problems = converged()
        while problems and time.monotonic() < deadline:
            time.sleep(0.2)
            problems = converged()
        assert problems == [], problems[:20]
        for member in members.values():
            record = member.agent_record()
            assert record is not None and record.get("version") == __version__


# ------------------------------------------------------------------------ downgrade

def test_a_data_dir_of_today_opens_with_the_previous_release(
        tmp_path: Path, release_tree: Callable[[str], Path]) -> None:
    """Downgrade: today's store format is the previous release's (same schema), so the previous
    release opens a data directory today's code wrote and serves every key; and a store of a
    newer schema is refused by it with its own clear error, never misread."""
    member = Member("d1", tmp_path, tmp_path)
    spec = launch.NodeSpec("d1", member.cmd_url, member.pub_url, data_dir=member.data_dir)
    today = launch.start(spec, tmp_path / "today.log", cwd=tmp_path)
    try:
        today.wait_answering(member.cmd_url)
        with member.client() as client:
            client.set({f"k/{i}": make_value(b"v%d" % i, version=1, originator_id="t")
                        for i in range(500)})
            client.set_key("k/tombstone", b"")
            digest = client.node_info(refresh=True).digest
    finally:
        assert today.terminate() == 0
    env = release_launch_env(release_tree(PREVIOUS))
    previous = launch.start(spec, tmp_path / "previous.log", env=env, cwd=tmp_path)
    try:
        previous.wait_answering(member.cmd_url)
        info = member.info()
        assert info.version is None  # the previous release's code
        assert (info.num_keys, info.store_state, info.digest) == (501, "RESTORED", digest)
    finally:
        assert previous.terminate() == 0
    # A future schema (a migration bumps PRAGMA user_version): refused, with the reason.
    with sqlite3.connect(member.data_dir / DB_FILE) as conn:
        conn.execute("PRAGMA user_version=99")
    refused = launch.start(spec, tmp_path / "refused.log", env=env, cwd=tmp_path)
    code = refused.wait_or_kill(30)
    assert code != 0
    assert "schema version 99, this kvmesh reads 1" in refused.log(), refused.log()


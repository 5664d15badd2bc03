"""CurveZMQ and authorisation with real node processes (secured `secure_mesh`, docs/security.md).

Every test drives real `kvmesh node run --key-file --authorized-keys` processes over loopback
TCP with real clients; the keys are made per test in its tmp dir."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import zmq

from kvmesh.cluster import node_answers
from kvstore import wire
from kvstore.client import (
    KvStoreAuthError,
    KvStoreClient,
    KvStoreRequestError,
    KvStoreTimeout,
    make_value,
)
from kvstore.curve import ClientCurve, load_key_pair
from kvstore.gen.kvstore_thrift.ttypes import Command, KeySetParams, Request
from kvstore.hashing import value_hash
from tests.kvstore.conftest import REPO, Mesh, free_port, wait_for_value
from tests.util import wait_until


def counter(mesh: Mesh, node: str, name: str) -> int:
    with mesh.nodes[node].client() as client:
        return client.counters().get(name, 0)


def test_plaintext_client_is_refused_with_a_clear_error(secure_mesh: Mesh) -> None:
    node = secure_mesh.start(secure_mesh.allocate("a"))
    started = time.monotonic()
    with pytest.raises(KvStoreAuthError, match="no key: set KVMESH_KEY_FILE"), \
            KvStoreClient(node.cmd_url, timeout_s=10, curve=None) as client:
        client.node_info()
    assert time.monotonic() - started < 5, "refused at the handshake, not after the timeout"
    wait_until(lambda: counter(secure_mesh, "a", "kvstore.auth.refused.handshake") >= 1,
               timeout=10, message="the node counted the plaintext connection")
    assert "CurveZMQ handshake failed" in node.log()


def test_unknown_key_is_refused_with_its_fingerprint(secure_mesh: Mesh) -> None:
    node = secure_mesh.start(secure_mesh.allocate("a"))
    keyring = secure_mesh.keyring
    assert keyring is not None
    stranger = keyring.curve("stranger", "a")  # a pair that is in no authorized directory
    with pytest.raises(KvStoreAuthError) as refused, \
            KvStoreClient(node.cmd_url, timeout_s=10, curve=stranger) as client:
        client.get(["k"])
    assert f"authentication refused by {node.cmd_url}" in str(refused.value)
    assert stranger.fingerprint in str(refused.value)
    wait_until(lambda: counter(secure_mesh, "a", "kvstore.auth.refused.unknown_key") >= 1,
               timeout=10, message="refusal counted")
    assert stranger.fingerprint in node.log()


def test_wrong_server_key_times_out_with_a_hint_never_hangs(secure_mesh: Mesh) -> None:
    secure_mesh.start(secure_mesh.allocate("a"))
    b = secure_mesh.allocate("b")  # never started: its key is not a's
    keyring = secure_mesh.keyring
    assert keyring is not None
    wrong = keyring.curve("op", "b")
    started = time.monotonic()
    with pytest.raises((KvStoreAuthError, KvStoreTimeout), match="KVMESH_SERVER_KEY"), \
            KvStoreClient(secure_mesh.nodes["a"].cmd_url, timeout_s=1.5, curve=wrong) as client:
        client.node_info()
    assert time.monotonic() - started < 3
    assert b.proc is None


def test_a_request_after_the_handshake_was_refused_fails_never_hangs(
        secure_mesh: Mesh) -> None:
    """The node refuses the handshake before the client sends anything: the refusal takes the
    DEALER's only connection away, and a send then waited for ever (a test hung 3 min so in a
    parallel run). Now the refusal, at once; and the next request starts a new connection."""
    node = secure_mesh.start(secure_mesh.allocate("a"))
    keyring = secure_mesh.keyring
    assert keyring is not None
    stranger = keyring.curve("stranger", "a")
    client = KvStoreClient(node.cmd_url, timeout_s=1, curve=stranger)
    sock = client._socket()  # connect, and let the handshake fail before any send
    wait_until(lambda: not int(sock.getsockopt(zmq.EVENTS)) & zmq.POLLOUT, timeout=30,
               message="the refused connection is gone (nothing to send on)")
    outcome: list[BaseException] = []

    def request() -> None:
        try:
            client.node_info()
        except BaseException as exc:  # handed to the test's thread
            outcome.append(exc)

    caller = threading.Thread(target=request, daemon=True)
    caller.start()
    caller.join(timeout=30)  # a hang guard, not a speed check
    assert not caller.is_alive(), "the request hung"
    assert len(outcome) == 1 and isinstance(outcome[0], KvStoreAuthError), outcome
    client.close()

    from kvstore.aioclient import AsyncKvStoreClient

    async def async_request() -> None:
        async with AsyncKvStoreClient(node.cmd_url, timeout_s=1, curve=stranger) as aclient:
            asock = aclient._socket()
            while int(asock.getsockopt(zmq.EVENTS)) & zmq.POLLOUT:  # the outer wait_for bounds it
                await asyncio.sleep(0.02)
            with pytest.raises(KvStoreAuthError):
                await aclient.node_info()

    asyncio.run(asyncio.wait_for(async_request(), 30))


def test_reader_reads_but_cannot_write(secure_mesh: Mesh) -> None:
    node = secure_mesh.start(secure_mesh.allocate("a"))
    keyring = secure_mesh.keyring
    assert keyring is not None
    keyring.authorize("viewer", "reader")
    with node.client() as op:
        op.set({"k": make_value(b"v1", version=1, originator_id="a")})
    wait_until(lambda: node_answers(node.cmd_url, keyring.curve("viewer", "a")), timeout=10,
               message="reader key loaded")
    with KvStoreClient(node.cmd_url, curve=keyring.curve("viewer", "a")) as reader:
        assert reader.get(["k"])["k"].value == b"v1"
        with pytest.raises(KvStoreRequestError) as refused:
            reader.set({"k": make_value(b"evil", version=9, originator_id="a")})
        assert refused.value.code == "UNAUTHORIZED" and "reader" in refused.value.message
        with pytest.raises(KvStoreRequestError, match="UNAUTHORIZED"):
            reader.add_peer("x", "tcp://127.0.0.1:1")
        reader.send_oneway({"k": make_value(b"evil", version=10, originator_id="a")})
        wait_until(lambda: reader.counters().get("kvstore.auth.refused.reader_write", 0) >= 3,
                   timeout=10, message="every write refusal counted, one-way included")
        assert reader.get(["k"])["k"].value == b"v1"
        assert "x" not in reader.peers()


def test_status_keys_only_from_the_nodes_own_agent(secure_mesh: Mesh) -> None:
    a, b = secure_mesh.chain(["a", "b"])
    keyring = secure_mesh.keyring
    assert keyring is not None
    keyring.authorize("agent-b", "operator", node="b")
    wait_until(lambda: node_answers(a.cmd_url, keyring.curve("agent-b", "a")), timeout=10,
               message="bound key loaded")
    with a.client() as op:  # an operator, not bound to any node
        with pytest.raises(KvStoreRequestError, match="foreign_node_key"):
            op.set({"status/b/x": make_value(b"forged", version=1, originator_id="b")})
        with pytest.raises(KvStoreRequestError, match="foreign_node_key"):
            op.set({"node/b/agent": make_value(b"forged", version=1, originator_id="b")})
        op.set({"config/b/x": make_value(b"desired", version=1, originator_id="a")})
    with KvStoreClient(a.cmd_url, curve=keyring.curve("agent-b", "a")) as agent_b:
        agent_b.set({"status/b/x": make_value(b"real", version=1, originator_id="b")})
        with pytest.raises(KvStoreRequestError, match="foreign_node_key"):
            agent_b.set({"status/a/x": make_value(b"forged", version=1, originator_id="a")})
    wait_for_value([a, b], "status/b/x", lambda v: v is not None and v.value == b"real")
    with a.client() as op:
        assert op.get(["node/b/agent", "status/a/x"]) == {}
        assert op.counters()["kvstore.auth.refused.foreign_node_key"] == 3


def test_forged_flood_path_and_hash_from_a_client_are_ignored(secure_mesh: Mesh) -> None:
    """An operator sets node_ids=[b] (which would stop the flood to b) and a forged hash: b gets
    the key anyway, and the stored hash is the one the node computes."""
    a, b = secure_mesh.chain(["a", "b"])
    forged = make_value(b"AAAA", version=1, originator_id="a")
    forged.hash = value_hash(1, "a", b"BBBB")
    request = Request(cmd=Command.KEY_SET, key_set=KeySetParams(
        key_vals={"div/k1": forged}, solicit_response=True, node_ids=["b"], sender_id="b"))
    with a.client() as op:
        op.request(request)
        assert op.counters()["kvstore.auth.ignored_flood_path"] == 1
    wait_for_value([a, b], "div/k1", lambda v: v is not None and v.value == b"AAAA", timeout=10)
    for node in (a, b):
        with node.client() as client:
            assert client.hash_dump()["div/k1"].hash == value_hash(1, "a", b"AAAA")


def test_a_peer_flood_path_is_trusted(secure_mesh: Mesh) -> None:
    """The same message from b's own key (an authenticated peer) is loop-detected: a's name is
    on its path, so a drops it as a looped publication."""
    a = secure_mesh.allocate("a")
    secure_mesh.allocate("b")  # its key is a peer key in a's directory; b itself never runs
    secure_mesh.start(a)
    keyring = secure_mesh.keyring
    assert keyring is not None
    as_peer_b = ClientCurve(load_key_pair(keyring.secret("b")), keyring.curve("op", "a").server_key)
    request = Request(cmd=Command.KEY_SET, key_set=KeySetParams(
        key_vals={"p/k": make_value(b"v", version=1, originator_id="b")},
        solicit_response=True, node_ids=["a"]))
    with KvStoreClient(a.cmd_url, curve=as_peer_b) as peer:
        peer.request(request)
    with a.client() as op:
        counters = op.counters()
        assert counters.get("kvstore.looped_publications") == 1
        assert op.get(["p/k"]) == {}


def test_key_rotation_without_restart(secure_mesh: Mesh) -> None:
    node = secure_mesh.start(secure_mesh.allocate("a"))
    keyring = secure_mesh.keyring
    assert keyring is not None
    new = keyring.curve("op2", "a")
    pid = node.proc.pid if node.proc else None
    assert not node_answers(node.cmd_url, new)
    keyring.authorize("op2", "operator")
    wait_until(lambda: node_answers(node.cmd_url, new), timeout=10, message="new key accepted")
    with KvStoreClient(node.cmd_url, curve=new) as client:
        client.set({"r": make_value(b"1", version=1, originator_id="a")})
        keyring.revoke("op2")
        # The established connection loses its rights too: each message is looked up again,
        # and the node shuts the connection (its reconnection is refused at the handshake).

        def refused() -> bool:
            try:
                client.get(["r"])
            except KvStoreRequestError as exc:
                return "unknown_key" in str(exc)
            except KvStoreAuthError:
                return True
            return False

        wait_until(refused, timeout=10, message="revoked key refused on its open connection")
    assert not node_answers(node.cmd_url, new)
    assert node.proc is not None and node.proc.pid == pid and node.alive()
    assert counter(secure_mesh, "a", "kvstore.auth.key_reloads") >= 3


def test_peer_key_rotation_reconnects_the_peer(secure_mesh: Mesh) -> None:
    """b gets a new key pair: a picks it up from the directory and syncs with the new b."""
    a, b = secure_mesh.chain(["a", "b"])
    keyring = secure_mesh.keyring
    assert keyring is not None
    b.stop()
    for suffix in (".key", ".key_secret"):
        (keyring.keys / f"b{suffix}").unlink()
    keyring.authorize("b", "peer", node="b")  # a new pair, replacing the old public key
    secure_mesh.start(b)
    secure_mesh.wait_ready(b)
    # a floods to b over its own connection, which needs b's new public key as server key (b's
    # initial sync already pulled what a had).
    with a.client() as client:
        client.set({"after": make_value(b"1", version=1, originator_id="a")})
    wait_for_value([b], "after", lambda v: v is not None, timeout=20)
    assert counter(secure_mesh, "a", "kvstore.auth.peer_key_changes") >= 1


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    import os

    base = {k: v for k, v in os.environ.items() if not k.startswith("KVMESH_")}
    return subprocess.run([sys.executable, "-m", "kvmesh", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=60, env={**base, **(env or {})})


def test_node_without_security_options_refuses_to_start() -> None:
    result = run_cli("node", "run", "--name", "n")
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "--key-file" in result.stderr
    assert "--insecure" in result.stderr


def test_insecure_only_on_loopback(tmp_path: Path) -> None:
    result = run_cli("node", "run", "--name", "n", "--insecure", "--cmd-url",
                     f"tcp://0.0.0.0:{free_port()}")
    assert result.returncode == 2 and "loopback" in result.stderr
    result = run_cli("node", "run", "--name", "n", "--insecure", "--peer",
                     "m=tcp://192.0.2.1:60002")
    assert result.returncode == 2 and "192.0.2.1" in result.stderr
    # The CLI's own warning on stderr (the launcher has no --insecure-any-address): typed as a
    # user would, not through kvmesh.launch.
    proc = subprocess.Popen(
        [sys.executable, "-m", "kvmesh", "node", "run", "--name", "n", "--insecure-any-address",
         "--cmd-url", f"tcp://0.0.0.0:{free_port()}", "--pub-url",
         f"tcp://127.0.0.1:{free_port()}"],
        cwd=REPO, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    try:
        assert proc.stderr is not None
        assert "PLAINTEXT" in proc.stderr.readline()
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_cli_errors_name_the_missing_key(secure_mesh: Mesh) -> None:
    node = secure_mesh.start(secure_mesh.allocate("a"))
    keyring = secure_mesh.keyring
    assert keyring is not None
    result = run_cli("--url", node.cmd_url, "key", "get", "k")
    assert result.returncode == 1
    assert result.stderr.strip().endswith("no key: set KVMESH_KEY_FILE and KVMESH_SERVER_KEY")
    result = run_cli("--url", node.cmd_url, "key", "get", "k",
                     env={"KVMESH_SERVER_KEY": str(keyring.public("a"))})
    assert result.returncode == 1 and "no key: set KVMESH_KEY_FILE" in result.stderr
    result = run_cli("--url", node.cmd_url, "--key-file", str(keyring.secret("op")),
                     "--server-key", str(keyring.public("a")), "key", "set", "k", "v")
    assert result.returncode == 0, result.stderr
    result = run_cli("--url", node.cmd_url, "key", "get", "k",
                     env={"KVMESH_KEY_FILE": str(keyring.secret("op")),
                          "KVMESH_SERVER_KEY": str(keyring.public("a"))})
    assert result.returncode == 0 and "k" in result.stdout


def test_refused_request_gets_no_reply_on_one_way_and_node_keeps_serving(
    secure_mesh: Mesh,
) -> None:
    """A refused one-way KEY_SET is answered by nothing (as any one-way set), only counted."""
    node = secure_mesh.start(secure_mesh.allocate("a"))
    keyring = secure_mesh.keyring
    assert keyring is not None
    keyring.authorize("viewer", "reader")
    wait_until(lambda: node_answers(node.cmd_url, keyring.curve("viewer", "a")), timeout=10)
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()
    sock = ctx.socket(zmq.DEALER)
    curve = keyring.curve("viewer", "a")
    sock.curve_secretkey, sock.curve_publickey = curve.key_pair.secret, curve.key_pair.public
    sock.curve_serverkey = curve.server_key
    sock.linger = 0
    sock.connect(node.cmd_url)
    try:
        payload = wire.encode(Request(cmd=Command.KEY_SET, key_set=KeySetParams(
            key_vals={"k": make_value(b"v", version=1, originator_id="a")},
            solicit_response=False)))
        sock.send_multipart([b"", payload])
        wait_until(lambda: counter(secure_mesh, "a", "kvstore.auth.refused.reader_write") == 1,
                   timeout=10)
        assert not sock.poll(200)
    finally:
        sock.close()
    assert node.answers()


def test_asyncio_client_and_subscription_on_a_secured_node(secure_mesh: Mesh) -> None:
    import asyncio

    from kvstore.aioclient import AsyncKvStoreClient

    node = secure_mesh.start(secure_mesh.allocate("a"))
    keyring = secure_mesh.keyring
    assert keyring is not None

    async def scenario() -> None:
        async with AsyncKvStoreClient(node.cmd_url, curve=keyring.curve("op", "a")) as client:
            stream = await client.subscribe(prefix="as/")
            try:
                # Until the subscription is attached (it takes a handshake), sets may be missed.
                for version in range(1, 100):
                    await client.set({"as/k": make_value(b"v", version=version,
                                                         originator_id="a")})
                    try:
                        publication = await asyncio.wait_for(stream.recv(), 0.2)
                        break
                    except TimeoutError:
                        continue
                assert "as/k" in (publication.key_vals or {})
                assert (await client.get(["as/k"]))["as/k"].value == b"v"
            finally:
                stream.close()
        started = time.monotonic()
        async with AsyncKvStoreClient(node.cmd_url, curve=None, timeout_s=10) as plain:
            with pytest.raises(KvStoreAuthError, match="no key"):
                await plain.node_info()
        assert time.monotonic() - started < 5

    asyncio.run(scenario())

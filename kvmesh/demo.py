"""`kvmesh demo`: a local 3-node KvStore mesh, shown working end to end.

Steps (each printed as it happens):
1. start three real node processes on loopback, peered in a chain (a - b - c), secured with
   CurveZMQ keys made for the run (the demo talks to them as an operator);
2. set a key on node a and read it back from all three nodes;
3. snoop node c's publication stream while another key is set on node a;
4. print a few counters of every node;
5. stop every node with SIGTERM (also on Ctrl-C or any error) and check they exit cleanly.

The cluster handling (`DemoCluster`) is separate from the script (`run_demo`) so later parts of the
demo (e.g. the agent) can reuse it.
"""

from __future__ import annotations

import shutil
import signal
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import click

from kvmesh import launch
from kvmesh.cli import kv_format as fmt
from kvmesh.cluster import OPERATOR_KEY, make_keys
from kvstore import (
    ClientCurve,
    KvStoreClient,
    KvStoreError,
    Publication,
    Subscription,
    free_tcp_port,
    load_key_pair,
    load_public_key,
    make_value,
    safefs,
    stats,
)

NODE_NAMES = ("a", "b", "c")
SHOWN_COUNTERS = (
    stats.NUM_KEYS,
    stats.RECEIVED_PUBLICATIONS,
    stats.SENT_PUBLICATIONS,
    stats.FULL_SYNC_SUCCESS,
    stats.LOOPED_PUBLICATIONS,
    stats.MALFORMED_REQUESTS,
)


def free_port() -> int:
    return free_tcp_port()


@dataclass
class DemoNode:
    name: str
    cmd_url: str
    pub_url: str
    log_path: Path
    proc: launch.Launched | None = None
    curve: ClientCurve | None = None

    def client(self) -> KvStoreClient:
        return KvStoreClient(self.cmd_url, timeout_s=2.0, curve=self.curve)


class DemoCluster:
    """Real `kvmesh node run` processes on loopback, always stopped on exit."""

    def __init__(self, names: tuple[str, ...] = NODE_NAMES, workdir: Path | None = None) -> None:
        self.workdir = safefs.private_dir(workdir) if workdir else \
            Path(tempfile.mkdtemp(prefix="kvmesh-demo-"))
        self.nodes = [
            DemoNode(
                name,
                f"tcp://127.0.0.1:{free_port()}",
                f"tcp://127.0.0.1:{free_port()}",
                self.workdir / f"{name}.log",
            )
            for name in names
        ]

    def __enter__(self) -> DemoCluster:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start_chain(self) -> None:
        auth, secrets = make_keys(self.workdir, [n.name for n in self.nodes])
        operator = load_key_pair(secrets[OPERATOR_KEY])
        for i, node in enumerate(self.nodes):
            node.curve = ClientCurve(
                operator, load_public_key(str(secrets[node.name].with_suffix(".key")))
            )
            neighbours = [self.nodes[j] for j in (i - 1, i + 1) if 0 <= j < len(self.nodes)]
            spec = launch.NodeSpec(
                node.name, node.cmd_url, node.pub_url,
                peers={peer.name: f"{peer.cmd_url},{peer.pub_url}" for peer in neighbours},
                data_dir=self.workdir / "data" / node.name,
                key_file=secrets[node.name], authorized_keys=auth)
            node.proc = launch.start(spec, node.log_path)  # 0600, no symlink followed

    def wait_ready(self, timeout_s: float = 30.0) -> None:
        """Until every node answers and has finished its initial sync."""
        deadline = time.monotonic() + timeout_s
        for node in self.nodes:
            assert node.proc is not None, "start_chain first"
            try:
                node.proc.wait_answering(node.cmd_url, node.curve, initial_sync=True,
                                         timeout=max(0.0, deadline - time.monotonic()))
            except launch.LaunchError as exc:
                raise RuntimeError(f"node {node.name} not ready (log {node.log_path}): "
                                   f"{exc}") from None

    def stop(self) -> dict[str, int | None]:
        """SIGTERM every node, wait (kill after 10 s); returns the exit codes."""
        codes: dict[str, int | None] = {}
        for node in self.nodes:
            if node.proc is not None and node.proc.alive():
                node.proc.send_signal(signal.SIGTERM)
        for node in self.nodes:
            if node.proc is not None:
                codes[node.name] = node.proc.wait_or_kill(timeout=10)
        return codes


def step(title: str) -> None:
    click.secho(f"\n== {title}", bold=True)


def wait_everywhere(cluster: DemoCluster, key: str, version: int, timeout_s: float = 10) -> None:
    deadline = time.monotonic() + timeout_s
    for node in cluster.nodes:
        with node.client() as client:
            while (v := client.get([key]).get(key)) is None or v.version < version:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{key} did not reach node {node.name}")
                time.sleep(0.02)


def snoop_until(subscription: Subscription, key: str, timeout_s: float) -> list[Publication]:
    """Publications received until one carries `key` (or the timeout)."""
    seen: list[Publication] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        publication = subscription.recv(timeout_s=0.1)
        if publication is None:
            continue
        seen.append(publication)
        if key in (publication.key_vals or {}):
            break
    return seen


def run_demo(keep: bool = False) -> int:
    cluster = DemoCluster()
    a, c = cluster.nodes[0], cluster.nodes[-1]
    try:
        step("1. start 3 nodes on loopback, peered in a chain a - b - c")
        cluster.start_chain()
        cluster.wait_ready()
        for node in cluster.nodes:
            click.echo(f"node {node.name}: cmd {node.cmd_url}  pub {node.pub_url}")
        click.echo(f"(logs in {cluster.workdir})")

        step("2. key set demo/greeting on node a, key get on every node")
        with a.client() as client:
            sent, _ = client.set_key("demo/greeting", b"hello, mesh")
        wait_everywhere(cluster, "demo/greeting", sent.version)
        for node in cluster.nodes:
            with node.client() as client:
                click.echo(f"-- node {node.name}")
                click.echo(fmt.key_vals_table(client.get(["demo/greeting"])))

        step("3. snoop node c while demo/counter is set on node a (two hops away)")
        with c.client() as client_c, client_c.subscribe(prefix="demo/") as subscription:
            seen: list[Publication] = []
            deadline = time.monotonic() + 10
            version = 0
            # A new subscription takes a moment to attach: write until c's stream shows it.
            with a.client() as client_a:
                while not seen and time.monotonic() < deadline:
                    version += 1
                    client_a.set(
                        {"demo/counter": make_value(b"%d" % version, version=version,
                                                    originator_id="a")}
                    )
                    seen = snoop_until(subscription, "demo/counter", timeout_s=0.3)
            for publication in seen:
                for line in fmt.publication_lines(publication):
                    click.echo(line)
            if not seen:
                raise RuntimeError("no publication seen on node c")

        step("4. counters")
        rows = []
        for name in SHOWN_COUNTERS:
            row: list[str] = [name]
            for node in cluster.nodes:
                with node.client() as client:
                    row.append(str(client.counters().get(name, 0)))
            rows.append(row)
        click.echo(fmt.table(["Counter", *(f"node {n.name}" for n in cluster.nodes)], rows))

        if keep:
            step("nodes left running: Ctrl-C to stop them")
            click.echo(f"try: kvmesh --url {a.cmd_url} key dump")
            while all(n.proc is not None and n.proc.alive() for n in cluster.nodes):
                time.sleep(0.5)
    except KeyboardInterrupt:
        click.echo("\ninterrupted")
    except (RuntimeError, KvStoreError) as exc:
        click.echo(f"error: {exc}", err=True)
        cluster.stop()
        return 1
    finally:
        step("5. stop every node (SIGTERM)")
        codes = cluster.stop()
        click.echo(", ".join(f"node {name} exit {code}" for name, code in codes.items()))
    clean = all(code == 0 for code in codes.values())
    if clean:
        shutil.rmtree(cluster.workdir, ignore_errors=True)
    else:
        click.echo(f"node logs kept in {cluster.workdir}", err=True)
    return 0 if clean else 1

"""`kvmesh cluster up|status|down`: a local cluster of real processes (see kvmesh/cluster.py);
`kvmesh cluster health`: any cluster's health, read from the mesh (kvmesh/agent/health.py)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import TYPE_CHECKING

import click

from kvmesh import cluster, netlab
from kvmesh.cli.common import KvGroup, cli_context, fail
from kvstore import KvStoreClient, Value

if TYPE_CHECKING:
    from kvmesh.agent.health import NodeHealth

run_dir_option = click.option(
    "--run-dir", type=click.Path(file_okay=False, path_type=Path),
    default=cluster.DEFAULT_RUN_DIR, show_default=True, envvar="KVMESH_RUN_DIR",
    help="Where the cluster keeps its state, logs and keys: a directory of the invoking user "
    "that nobody else can write to (refused otherwise).")


@click.group("cluster", cls=KvGroup)
def cluster_group() -> None:
    """A local cluster of real kvmesh processes (on loopback, or isolated in namespaces)."""


@cluster_group.command("up")
@click.option("--nodes", type=click.IntRange(1, 64), default=3, show_default=True)
@click.option("--topology", type=click.Choice(cluster.TOPOLOGIES), default="chain",
              show_default=True)
@click.option("--vpp-emulator", is_flag=True, help="Give each node a VPP emulator.")
@click.option("--no-netns", is_flag=True, help="Do not make a namespace per node (the Linux "
              "southbound is then off).")
@click.option("--isolated", is_flag=True, help="Every node in its own network namespace, "
              "linked to a bridge over veth (addresses from 198.18.0.0/15; needs root).")
@click.option("--degree", type=click.IntRange(2, 63), default=3, show_default=True,
              help="Peers per node at least, for --topology random.")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Seed of --topology random (same seed, same graph).")
@click.option("--core", type=int, default=None, metavar="N",
              help="The first N nodes are full nodes and form the --topology; every other node "
              "is a KvStore leaf (`node run --leaf --agent`: it holds only what its agent "
              "needs) peered with one core node, round-robin over the core. [all full]")
@run_dir_option
def cluster_up(nodes: int, topology: str, vpp_emulator: bool, no_netns: bool,
               isolated: bool, degree: int, seed: int, core: int | None,
               run_dir: Path) -> None:
    """Start the cluster; returns once every node and agent is ready."""
    if isolated and no_netns:
        fail("--isolated and --no-netns exclude each other", code=2)
    try:
        state = cluster.up(nodes, topology, vpp_emulator, run_dir,
                           namespaces=False if no_netns else None,
                           progress=lambda msg: click.echo(f"  {msg}", err=True),
                           isolated=isolated, degree=degree, seed=seed, core=core)
    except (cluster.ClusterError, netlab.LabError, OSError) as exc:
        fail(str(exc))
    leaves = sum(info.leaf for info in state.nodes.values())
    shape = f"{topology}" if not leaves else \
        f"a {topology} core of {len(state.nodes) - leaves}, {leaves} leaves"
    click.echo(f"cluster of {len(state.nodes)} nodes ({shape}) is up; state in {run_dir}")


@cluster_group.command("status")
@run_dir_option
def cluster_status(run_dir: Path) -> None:
    """Where every node listens, the version it runs (asked of the node: "0.4.0?" for one that
    does not say, "?" for one that does not answer) and whether its processes are alive."""
    try:
        data = cluster.status(run_dir)
    except OSError as exc:  # an unsafe run dir (kvstore/safefs.py)
        fail(str(exc))
    if cli_context().as_json:
        click.echo(json.dumps(data, indent=2, sort_keys=True))
        return
    if not data["nodes"]:
        click.echo(f"no cluster in {run_dir}")
        return
    click.echo(f"{'NODE':<6} {'ROLE':<5} {'VERSION':<12} {'CMD URL':<24} {'REST':<26} "
               f"{'NETNS':<12} PROCESSES")
    for name, info in data["nodes"].items():  # type: ignore[attr-defined]
        procs = " ".join(f"{role}:{p['pid']}{'' if p['alive'] else '(dead)'}"
                         for role, p in info["processes"].items())
        role = "leaf" if info["leaf"] else "full"
        click.echo(f"{name:<6} {role:<5} {info['version']:<12} {info['cmd_url']:<24} "
                   f"{info['rest_url'] or '-':<26} "
                   f"{info['netns'] or '-':<12} {procs}")


@cluster_group.command("health")
def cluster_health() -> None:
    """One line per node, read from the mesh (any non-leaf node: --url): its agent up or down,
    devices, values per state, the oldest FAILED value with its error, its version. Exit 1
    when a node is down, has no agent, a device FAILED or DISCONNECTED, or a value FAILED or
    INVALID; 0 when all is well (docs/operator.md, "Cluster health")."""
    import sys
    import time

    from kvmesh.agent.health import MEMBER, cluster_health
    from kvmesh.agent.keys import NODE, STATUS
    from kvmesh.cli.common import run_client

    def action(client: KvStoreClient) -> dict[str, Value]:
        info = client.node_info()
        if info.leaf_filters is not None:
            fail(f"{info.name} is a leaf node: it holds only its own share of the mesh; ask a "
                 "non-leaf node (--url)", 2)
        kvs: dict[str, Value] = {}
        for prefix in (NODE, STATUS, MEMBER):
            kvs.update(client.dump(prefix=prefix))
        return kvs

    nodes = cluster_health(run_client(action), time.time())
    if cli_context().as_json:
        click.echo(json.dumps({"healthy": all(n.healthy for n in nodes),
                               "nodes": [n.as_json() for n in nodes]}, indent=2))
    elif not nodes:
        click.echo("no node found in the mesh (no node/, status/ or member/ keys)")
    else:
        click.echo(health_table(nodes))
    sys.exit(0 if nodes and all(n.healthy for n in nodes) else 1)


def health_table(nodes: list[NodeHealth]) -> str:
    import time

    from kvmesh.agent.liveness import format_age

    now = time.time()
    rows = [("NODE", "AGENT", "DEVICES", "VALUES", "OLDEST FAILED", "VERSION")]
    for n in nodes:
        devices = " ".join(f"{d}:{s}" for d, s in sorted(n.devices.items())) or "-"
        values = " ".join(f"{s}:{c}" for s, c in sorted(n.values.items())) or "-"
        failed = "-"
        if n.oldest_failed is not None:
            key, record = n.oldest_failed
            since = record.get("time")
            age = f" ({format_age(now - since)} ago)" if isinstance(since, int | float) else ""
            failed = f"{key}{age}: {record.get('error') or 'no error message'}"
        agent = n.agent.describe(now)
        if n.agent.known and not n.agent.up and n.values:
            values += " (stale)"
        rows.append((n.name, agent, devices, values, failed, n.version))
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    return "\n".join("  ".join([*(c.ljust(w) for c, w in zip(row[:5], widths, strict=True)),
                                row[5]]) for row in rows)


@cluster_group.command("down")
@run_dir_option
@click.option("--purge", is_flag=True,
              help="Also delete the nodes' data directories (their stored configuration).")
def cluster_down(run_dir: Path, purge: bool) -> None:
    """Stop every process and remove every namespace the cluster made. The nodes' data
    directories stay, so the next `cluster up` from RUN_DIR restores the configuration."""
    try:
        stopped = cluster.down(run_dir, progress=lambda msg: click.echo(f"  {msg}", err=True),
                               purge=purge)
    except OSError as exc:  # an unsafe run dir (kvstore/safefs.py)
        fail(str(exc))
    click.echo(f"cluster down ({stopped} processes stopped"
               f"{', data removed' if purge else ''})")


@cluster_group.command("env")
@click.option("--node", default="n1", show_default=True, help="The node to talk to.")
@run_dir_option
def cluster_env(node: str, run_dir: Path) -> None:
    """Shell `export` lines for the cluster's operator: eval "$(kvmesh cluster env)"."""
    try:
        env = cluster.client_env(run_dir, node)
    except (cluster.ClusterError, OSError) as exc:
        fail(str(exc))
    for name, value in env.items():
        click.echo(f"export {name}={shlex.quote(value)}")


def register(group: click.Group) -> None:
    group.add_command(cluster_group)

"""`kvmesh node init`: a new node's files, and the command an operator runs to admit it
(kvmesh.node_init; docs/deploy.md)."""

from __future__ import annotations

from pathlib import Path

import click

from kvmesh.cli.common import emit, fail


@click.command("init")
@click.argument("name")
@click.option("--dir", "directory", required=True, type=click.Path(path_type=Path),
              help="Where to write NAME.toml, keys/, authorized-keys/ and the REST certificate "
              "(must hold no node yet).")
@click.option("--cmd-url", default=None, help="The node's command socket, reachable from its "
              "peers [tcp://127.0.0.1:60002].")
@click.option("--pub-url", default=None, help="Its publication socket [the command socket's "
              "host, port 60001].")
@click.option("--http", default=None, metavar="ADDR:PORT",
              help="The agent's REST address [the command socket's host, port 8080].")
@click.option("--data-dir", default=None, type=click.Path(file_okay=False),
              help="The node's durable store [/var/lib/kvmesh/NAME].")
@click.option("--operator-key", default=None, type=click.Path(dir_okay=False, path_type=Path),
              help="The operator's public key (OP.key): authorized as an operator.")
@click.option("--join", default=None, metavar="PEER=CMD_URL[,PUB_URL]",
              help="An existing node to peer with.")
@click.option("--join-key", default=None, type=click.Path(dir_okay=False, path_type=Path),
              help="That peer's public key (PEER.key).")
@click.option("--linux", is_flag=True,
              help="The agent configures this host's Linux networking ([agent] linux).")
@click.option("--vpp-socket", default=None, metavar="PATH",
              help="The agent configures the VPP at this API socket ([agent] vpp_socket).")
def node_init(name: str, directory: Path, cmd_url: str | None, pub_url: str | None,
              http: str | None, data_dir: str | None, operator_key: Path | None,
              join: str | None, join_key: Path | None, linux: bool,
              vpp_socket: str | None) -> None:
    """Write a new node's configuration, key pair, authorized keys and REST certificate into
    DIR, and print the `kvmesh member add` command that admits it."""
    from kvmesh.node_init import InitRequest, NodeInitError, init_node

    try:
        result = init_node(InitRequest(name, directory, cmd_url, pub_url, http, data_dir,
                                       operator_key, join, join_key, linux, vpp_socket))
    except NodeInitError as exc:
        fail(str(exc), code=2)
    emit({"config": str(result.config), "public_key": str(result.public_key),
          "secret_key": str(result.secret_key), "rest_cert": str(result.rest_cert),
          "rest_url": result.rest_url, "admit": result.admit},
         f"node {name}: {result.config}\n"
         f"start it:  kvmesh node run --config {result.config}\n"
         f"admit it (an operator, on any node):\n  {result.admit_command}")


def register(group: click.Group) -> None:
    node_group = group.commands["node"]
    assert isinstance(node_group, click.Group)
    node_group.add_command(node_init)

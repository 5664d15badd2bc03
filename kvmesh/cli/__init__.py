"""The `kvmesh` command line.

Each subsystem owns one module of commands (`kvstore_cmds`, `vpp_cmds`, ...) and exposes a
`register(group)` function; this module only builds the top-level group and its global options.
"""

from __future__ import annotations

import os

import click

from kvmesh.cli import agent_cmds, cluster_cmds, keys_cmds, kvstore_cmds, vpp_cmds
from kvmesh.cli.agent_cmds import HTTP_CA_ENV, HTTP_TOKEN_ENV
from kvmesh.cli.context import DEFAULT_URL, CliContext
from kvstore.curve import KEY_FILE_ENV, SERVER_KEY_ENV


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--url",
    envvar="KVMESH_URL",
    default=DEFAULT_URL,
    show_default=True,
    help="Command URL of the KvStore node to talk to.",
)
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
@click.option("--key-file", envvar=KEY_FILE_ENV, default=None,
              help=f"Your CurveZMQ secret key file (NAME.key_secret) [env {KEY_FILE_ENV}].")
@click.option("--server-key", envvar=SERVER_KEY_ENV, default=None,
              help=f"The node's public key: its .key file or z85 text [env {SERVER_KEY_ENV}].")
@click.option("--http-token-file", envvar=HTTP_TOKEN_ENV, default=None,
              help=f"Bearer token for agents' REST APIs [env {HTTP_TOKEN_ENV}].")
@click.option("--http-ca", envvar=HTTP_CA_ENV, default=None,
              help=f"Certificate verifying agents' REST TLS [env {HTTP_CA_ENV}].")
@click.pass_context
def main(ctx: click.Context, url: str, as_json: bool, key_file: str | None,
         server_key: str | None, http_token_file: str | None, http_ca: str | None) -> None:
    """kvmesh: replicated KvStore mesh and network-configuration agent."""
    # Through the environment, every client this command makes (and the processes it starts)
    # uses the same keys.
    for env, given in ((KEY_FILE_ENV, key_file), (SERVER_KEY_ENV, server_key),
                       (HTTP_TOKEN_ENV, http_token_file), (HTTP_CA_ENV, http_ca)):
        if given:
            os.environ[env] = given
    ctx.obj = CliContext(url=url, as_json=as_json)


for _module in (kvstore_cmds, vpp_cmds, agent_cmds, cluster_cmds, keys_cmds):
    _module.register(main)

"""The `kvmesh` command line.

Each subsystem owns one module of commands (`kvstore_cmds`, `vpp_cmds`, ...) and exposes a
`register(group)` function; this module only builds the top-level group and its global options
(accepted before the subcommand and, through `accept_global_options`, after it too).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterator
from typing import Any

import click

from kvmesh.agent.http_server import HTTP_CA_ENV, HTTP_TOKEN_ENV
from kvmesh.cli import agent_cmds, cluster_cmds, keys_cmds, kvstore_cmds, ops_cmds, vpp_cmds
from kvmesh.cli.context import DEFAULT_URL, CliContext
from kvstore import KEY_FILE_ENV, SERVER_KEY_ENV

URL_HELP = "Command URL of the KvStore node to talk to."
JSON_HELP = "Print machine-readable JSON."


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--url",
    envvar="KVMESH_URL",
    default=DEFAULT_URL,
    show_default=True,
    help=URL_HELP,
)
@click.option("--json", "as_json", is_flag=True, help=JSON_HELP)
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


for _module in (kvstore_cmds, vpp_cmds, agent_cmds, cluster_cmds, keys_cmds, ops_cmds):
    _module.register(main)


def _set_global(name: str) -> Callable[[click.Context, click.Parameter, object], None]:
    """Callback of a global option given after the subcommand: overrides the root's value
    (the root group's callback has run by then: click invokes a group before parsing its
    subcommand's arguments)."""

    def callback(ctx: click.Context, _param: click.Parameter, value: object) -> None:
        if value is None or value is False:
            return
        root = ctx.find_root()
        if isinstance(root.obj, CliContext):
            changes: dict[str, Any] = {name: value}
            root.obj = dataclasses.replace(root.obj, **changes)

    return callback


def _commands(group: click.Group) -> Iterator[click.Command]:
    for command in group.commands.values():
        yield command
        if isinstance(command, click.Group):
            yield from _commands(command)


def accept_global_options(group: click.Group) -> None:
    """Give every subcommand (and subgroup) `--url` and `--json` too, so `kvmesh cluster status
    --json` works as `kvmesh --json cluster status` does."""
    for command in _commands(group):
        command.params.append(click.Option(["--url"], default=None, expose_value=False,
                                           callback=_set_global("url"), help=URL_HELP))
        command.params.append(click.Option(["--json"], is_flag=True, default=None,
                                           expose_value=False, callback=_set_global("as_json"),
                                           help=JSON_HELP))


accept_global_options(main)

"""The `kvmesh` command line.

Each subsystem owns one module of commands (`kvstore_cmds`, `vpp_cmds`, ...) and exposes a
`register(group)` function; this module only builds the top-level group and its global options
(accepted before the subcommand and, added to each command as it loads, after it too).

A command's module is imported when the command runs (or when help lists it), not before: a
`kvmesh key get` loads the KvStore client, not the REST server, the models or the scheduler.
`COMMAND_MODULES` says which module registers which top-level commands (a test checks it
against what the modules really register).
"""

from __future__ import annotations

import dataclasses
import importlib
import os
from collections.abc import Callable, Iterator
from typing import Any

import click

from kvmesh.cli.context import DEFAULT_URL, CliContext
from kvmesh.envnames import HTTP_CA_ENV, HTTP_TOKEN_ENV
from kvstore import KEY_FILE_ENV, SERVER_KEY_ENV

URL_HELP = "Command URL of the KvStore node to talk to."
JSON_HELP = "Print machine-readable JSON."


COMMAND_MODULES: dict[str, tuple[str, ...]] = {
    "kvmesh.cli.kvstore_cmds": ("compare", "counters", "demo", "key", "node", "peer",
                                "signature", "snoop"),
    "kvmesh.cli.vpp_cmds": ("vpp-emulator",),
    "kvmesh.cli.agent_run_cmds": ("agent",),
    "kvmesh.cli.agent_cmds": ("config", "graph", "history", "recon", "report", "resync", "status",
                              "values"),
    "kvmesh.cli.cluster_cmds": ("cluster",),
    "kvmesh.cli.keys_cmds": ("keys",),
    "kvmesh.cli.member_cmds": ("member",),
    "kvmesh.cli.ops_cmds": ("apply", "completion", "confirm", "model", "plan"),
}
# ops_cmds adds `config export` and `config history` to agent_cmds' `config` group;
# node_init_cmds adds `node init` to kvstore_cmds' `node` group.
ALSO_LOADS: dict[str, tuple[str, ...]] = {"kvmesh.cli.agent_cmds": ("kvmesh.cli.ops_cmds",),
                                          "kvmesh.cli.kvstore_cmds": ("kvmesh.cli.node_init_cmds",)}
_loaded: set[str] = set()
_MODULE_OF = {command: module for module, commands in COMMAND_MODULES.items()
              for command in commands}


class LazyGroup(click.Group):
    """The top-level group: loads a command's module the first time the command is needed."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(self.commands) | set(_MODULE_OF))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in _MODULE_OF:
            load_module(self, _MODULE_OF[cmd_name])
        return self.commands.get(cmd_name)


def load_module(group: click.Group, module_name: str) -> None:
    """Import one command module, register its commands (and the modules it adds subcommands
    to) and give every new command the global options."""
    before = {id(c) for top in group.commands.values() for c in _commands(top)}
    for name in (module_name, *ALSO_LOADS.get(module_name, ())):
        if name not in _loaded:
            _loaded.add(name)
            importlib.import_module(name).register(group)
    for top in group.commands.values():
        for command in _commands(top):
            if id(command) not in before:
                _add_global_options(command)


def load_all(group: click.Group) -> None:
    """Every command module (for tools that walk the whole command tree: tests, docs)."""
    for module_name in COMMAND_MODULES:
        load_module(group, module_name)


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    from kvstore import version  # the one place it is written

    click.echo(f"kvmesh {version.__version__}")
    ctx.exit()


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--version", is_flag=True, expose_value=False, is_eager=True,
              callback=_print_version, help="Print kvmesh's version and exit.")
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


def _commands(command: click.Command) -> Iterator[click.Command]:
    yield command
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            yield from _commands(sub)


def _add_global_options(command: click.Command) -> None:
    """`--url` and `--json` after the subcommand too, so `kvmesh cluster status --json` works
    as `kvmesh --json cluster status` does."""
    command.params.append(click.Option(["--url"], default=None, expose_value=False,
                                       callback=_set_global("url"), help=URL_HELP))
    command.params.append(click.Option(["--json"], is_flag=True, default=None,
                                       expose_value=False, callback=_set_global("as_json"),
                                       help=JSON_HELP))

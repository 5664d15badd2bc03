"""The `kvmesh` command line.

Each subsystem owns one module of commands (`kvstore_cmds`, `vpp_cmds`, ...) and exposes a
`register(group)` function; this module only builds the top-level group and its global options.
"""

from __future__ import annotations

import click

from kvmesh.cli import agent_cmds, cluster_cmds, kvstore_cmds, ops_cmds, vpp_cmds
from kvmesh.cli.context import DEFAULT_URL, CliContext


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--url",
    envvar="KVMESH_URL",
    default=DEFAULT_URL,
    show_default=True,
    help="Command URL of the KvStore node to talk to.",
)
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
@click.pass_context
def main(ctx: click.Context, url: str, as_json: bool) -> None:
    """kvmesh: replicated KvStore mesh and network-configuration agent."""
    ctx.obj = CliContext(url=url, as_json=as_json)


for _module in (kvstore_cmds, vpp_cmds, agent_cmds, cluster_cmds, ops_cmds):
    _module.register(main)

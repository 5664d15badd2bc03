"""`kvmesh ui`: a login link to an agent's console (docs/console.md)."""

from __future__ import annotations

import click

from kvmesh.cli.agent_cmds import agent_rest, http_json, node_option
from kvmesh.cli.common import KvCommand, cli_context, emit


@click.command("ui", cls=KvCommand)
@node_option
@click.option("--open", "open_browser", is_flag=True, help="Also open it in a browser.")
def ui(node: str | None, open_browser: bool) -> None:
    """Print a login link to NODE's console (one use, valid 60 s); the console then keeps its
    own session. The link carries the role of your token: a reader's sees, an operator's acts."""
    rest = agent_rest(node)
    answer = http_json(rest, "/ui/ticket", method="POST")
    link = f"{rest.address.url}{answer['path']}"
    if cli_context().as_json:
        emit({"url": link, "role": answer.get("role"),
              "expires_in_s": answer.get("expires_in_s")}, "")
    else:
        click.echo(link)
        click.echo(f"(one login as {answer.get('role')}, within "
                   f"{answer.get('expires_in_s', 60)} s)", err=True)
    if open_browser:
        import webbrowser

        if not webbrowser.open(link):
            click.echo("no browser found: open the link above by hand", err=True)


def register(group: click.Group) -> None:
    group.add_command(ui)

"""VPP commands: the binary-API emulator."""

from __future__ import annotations

import asyncio
import logging

import click


def register(group: click.Group) -> None:
    """Attach the VPP commands to the top-level group."""
    group.add_command(vpp_emulator)


@click.command("vpp-emulator")
@click.option(
    "--socket",
    "socket_path",
    default="/run/vpp/api.sock",
    show_default=True,
    help="Unix socket path of the emulated VPP binary API.",
)
@click.option(
    "--control",
    "control_path",
    default=None,
    help="Unix socket of the JSON control channel (fault injection). [default: SOCKET.ctl]",
)
@click.option(
    "--host-check/--no-host-check",
    default=True,
    show_default=True,
    help="af_packet create fails unless the host interface exists in this network namespace.",
)
@click.option("--log-level", default="WARNING", show_default=True, help="Python logging level.")
def vpp_emulator(
    socket_path: str, control_path: str | None, host_check: bool, log_level: str
) -> None:
    """Run the VPP binary-API emulator (speaks VPP's socket transport; SIGTERM stops it)."""
    from kvmesh.vppemu.server import run

    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(name)s %(message)s")
    try:
        asyncio.run(run(socket_path, control_path, host_check))
    except OSError as exc:
        raise click.ClickException(f"cannot serve on {socket_path}: {exc}") from exc

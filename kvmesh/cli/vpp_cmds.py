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
@click.option(
    "--api-dir",
    type=click.Path(exists=True, file_okay=False),
    default=None,
    help="Serve every message of the VPP API files in DIR (laid out as VPP installs them, "
    "/usr/share/vpp/api): unimplemented ones answer as VPP with none configured. "
    "[default: the emulator's own subset]",
)
@click.option("--log-level", default="WARNING", show_default=True, help="Python logging level.")
def vpp_emulator(
    socket_path: str, control_path: str | None, host_check: bool, api_dir: str | None,
    log_level: str,
) -> None:
    """Run the VPP binary-API emulator (speaks VPP's socket transport; SIGTERM stops it)."""
    from kvmesh.vppemu.server import run

    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(name)s %(message)s")
    try:
        asyncio.run(run(socket_path, control_path, host_check, api_dir))
    except OSError as exc:
        raise click.ClickException(f"cannot serve on {socket_path}: {exc}") from exc
    except ValueError as exc:  # an --api-dir that vpp_papi cannot load
        raise click.ClickException(f"--api-dir: {exc}") from exc

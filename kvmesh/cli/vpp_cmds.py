"""VPP commands: the binary-API emulator."""

from __future__ import annotations

import click


def register(group: click.Group) -> None:
    """Attach the VPP commands to the top-level group."""

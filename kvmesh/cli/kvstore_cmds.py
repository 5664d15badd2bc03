"""KvStore commands: node run, key, peer, snoop, compare, signature, counters."""

from __future__ import annotations

import click


def register(group: click.Group) -> None:
    """Attach the KvStore commands to the top-level group."""

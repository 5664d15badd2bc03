"""State shared by every CLI command: the global options."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_URL = "tcp://127.0.0.1:60002"


@dataclass(frozen=True)
class CliContext:
    url: str
    as_json: bool

"""`kvmesh member add`'s REST options (issue 25), for the `member` command to wire in:

    @member_group.command("add")
    ...
    @rest_options
    def member_add(..., rest_url, rest_cert, token_file):
        record.update(rest_fields(rest_url, rest_cert, token_file))  # exits 2 when unusable

`--rest-url URL --rest-cert CERT.pem` store `rest_url` and `rest_cert_sha256` (the pin every
CLI checks the node's agent against); `--token-file FILE` stores `token_sha256`, the hash of a
member's REST bearer token, which every agent then accepts for the member's role (operator or
reader) until the member is removed (kvmesh.rest_pin, docs/security.md "Trust chain").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from kvmesh.cli.common import fail

F = TypeVar("F", bound=Callable[..., Any])


def rest_options(command: F) -> F:
    for option in reversed((
        click.option("--rest-url", default=None, metavar="https://HOST:PORT",
                     help="The node's agent REST address (with --rest-cert)."),
        click.option("--rest-cert", default=None, type=click.Path(dir_okay=False),
                     help="The agent's REST certificate (PEM, `node init` made it): clients "
                     "pin its SHA-256."),
        click.option("--token-file", default=None, type=click.Path(dir_okay=False),
                     help="The member's REST bearer token (`kvmesh keys token`): its SHA-256 "
                     "is stored, and every agent accepts the token for the member's role."),
    )):
        command = option(command)
    return command


def rest_fields(rest_url: str | None, rest_cert: str | None,
                token_file: str | None) -> dict[str, Any]:
    """The member record's REST fields; exit 2 with one line when an option is unusable."""
    from kvmesh.rest_pin import PinError, rest_record_fields

    try:
        return rest_record_fields(rest_url, rest_cert, token_file)
    except PinError as exc:
        fail(str(exc), code=2)

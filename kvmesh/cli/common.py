"""Helpers shared by every command module: one-line errors, the global options, the client.

Errors print one line on stderr and exit non-zero: 1 for runtime failures (node unreachable,
request refused), 2 for invalid arguments or configuration.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable
from typing import Any, NoReturn

import click

from kvmesh.agent.liveness import HEARTBEAT_MS, HEARTBEAT_MS_RANGE
from kvmesh.cli import kv_format as fmt
from kvmesh.cli.context import CliContext
from kvstore import DEFAULT_TIMEOUT_S, KvStoreClient, KvStoreError


class OneLineUsageError(click.ClickException):
    """A usage error printed as a single line (click's default adds usage and hint lines)."""

    exit_code = 2


class KvCommand(click.Command):
    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as exc:
            raise OneLineUsageError(f"{ctx.command_path}: {exc.format_message()}") from exc


class KvGroup(click.Group):
    command_class = KvCommand


def fail(message: str, code: int = 1) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


def cli_context() -> CliContext:
    obj = click.get_current_context().find_root().obj
    assert isinstance(obj, CliContext)
    return obj


TIMEOUT_ENV = "KVMESH_TIMEOUT"


def request_timeout_s() -> float:
    """Each request's deadline: `KVMESH_TIMEOUT` seconds (default 5); anything but a positive
    number is a one-line configuration error (exit 2), not a traceback."""
    given = os.environ.get(TIMEOUT_ENV, "").strip()
    if not given:
        return DEFAULT_TIMEOUT_S
    try:
        seconds = float(given)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        fail(f"{TIMEOUT_ENV} must be a positive number of seconds, got {given!r}", code=2)
    return seconds


def client_for(url: str | None = None) -> KvStoreClient:
    return KvStoreClient(url or cli_context().url, timeout_s=request_timeout_s())


def run_client(action: Callable[[KvStoreClient], Any], url: str | None = None) -> Any:
    """Run `action` with a client; client errors become one line on stderr, exit 1."""
    try:
        with client_for(url) as client:
            return action(client)
    except KvStoreError as exc:
        fail(str(exc))


def emit(as_json_obj: Any, text: str) -> None:
    if cli_context().as_json:
        click.echo(fmt.dumps(as_json_obj))
    else:
        click.echo(text)


def parse_http(text: str | None) -> tuple[str, int] | None:
    if text is None:
        return None
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise click.BadParameter(f"expected ADDR:PORT, got {text!r}", param_hint="--http")
    return host or "127.0.0.1", int(port)


def http_security_args(http: str | None, cert: str | None, key: str | None,
                       token_file: str | None, read_token_file: str | None = None,
                       public_reads: bool = False) -> list[str]:
    """Check the REST API's TLS/token options (exit 2 with one line when unusable: a bad file,
    or a non-loopback --http without TLS); the agent's arguments for them."""
    from kvmesh.agent.http_security import HttpConfigError

    try:
        return check_http_security(parse_http(http), cert, key, token_file, read_token_file,
                                   public_reads)
    except HttpConfigError as exc:
        fail(str(exc), code=2)


def check_http_security(address: tuple[str, int] | None, cert: str | None, key: str | None,
                        token_file: str | None, read_token_file: str | None = None,
                        public_reads: bool = False) -> list[str]:
    """`http_security_args` raising HttpConfigError instead of exiting (`address`: the
    parsed --http)."""
    from kvmesh.agent.http_security import (
        HttpConfigError,
        check_bind,
        check_in_child,
        load_security,
    )
    from kvmesh.entry import openssl_left_out

    if address is None and (cert or key or token_file or read_token_file or public_reads):
        raise HttpConfigError("--http-cert/--http-key/--http-token-file/"
                              "--http-read-token-file/--http-public-reads need --http")
    if cert is not None and openssl_left_out():
        # This process (a KvStore node) has no ssl: the certificate is loaded elsewhere.
        check_in_child(cert, key, token_file, read_token_file, public_reads,
                       address[0] if address is not None else None)
    else:
        security = load_security(cert, key, token_file, read_token_file, public_reads)
        if address is not None:
            check_bind(address[0], security)
    args: list[str] = []
    for flag, given in (("--http-cert", cert), ("--http-key", key),
                        ("--http-token-file", token_file),
                        ("--http-read-token-file", read_token_file)):
        if given is not None:
            args += [flag, given]
    if public_reads:
        args.append("--http-public-reads")
    return args


def agent_options(fn: Any) -> Any:
    """The agent's options, shared by `agent run` and `node run --agent`."""
    for option in reversed((
        click.option("--linux-netns", default=None, help="Enable the Linux southbound in NS."),
        click.option("--linux", is_flag=True, help="Enable the Linux southbound in the agent's "
                     "own namespace."),
        click.option("--linux-state-dir", default=None, type=click.Path(file_okay=False),
                     help="Where the Linux southbound keeps what must survive the agent (the "
                     "sysctls' original values) [/var/lib/kvmesh/linux; node run: "
                     "DATA_DIR/agent]."),
        click.option("--vpp-socket", default=None, help="Enable the VPP southbound on PATH."),
        click.option("--http", default=None, help="Serve the REST API on ADDR:PORT (loopback "
                     "unless --http-cert and --http-key are given); every request needs a "
                     "bearer token: the agent's, or a member's whose hash is in the mesh "
                     "(docs/security.md)."),
        click.option("--http-cert", default=None, type=click.Path(dir_okay=False),
                     help="TLS certificate (PEM) of the REST API."),
        click.option("--http-key", default=None, type=click.Path(dir_okay=False),
                     help="TLS private key (PEM) of the REST API."),
        click.option("--http-token-file", "http_token_file", default=None,
                     type=click.Path(dir_okay=False),
                     help="The operator's bearer token (a file, one word) [a token made at "
                     "start, in /run/kvmesh/agents/ for root]."),
        click.option("--http-read-token-file", "http_read_token_file", default=None,
                     type=click.Path(dir_okay=False),
                     help="A reader's bearer token: reads only."),
        click.option("--http-public-reads", is_flag=True,
                     help="Reads need no token (writes always do)."),
        click.option("--http-max-streams", type=click.IntRange(min=1), default=32,
                     show_default=True, help="GET /stream clients (and console pages) at once."),
        click.option("--downstream-resync-s", type=click.FloatRange(min=1), default=300.0,
                     show_default=True, help="Period of the drift-repairing resync."),
        click.option("--heartbeat-ms", type=click.IntRange(*HEARTBEAT_MS_RANGE),
                     default=HEARTBEAT_MS, show_default=True,
                     help="How often the agent refreshes its record node/NAME/agent; readers "
                     "take it for down after three missed refreshes."),
        click.option("--assume-current", is_flag=True,
                     help="Treat the KvStore as current even before a peer sync completed: "
                     "the agent may delete what it does not find there (docs/agent.md)."),
    )):
        fn = option(fn)
    return fn

"""The `kvmesh` program's entry point: the installed script and `python -m kvmesh` both run here.

One decision is made before any command module loads: a `kvmesh node run` process leaves
OpenSSL out. A KvStore node never speaks TLS — its mesh is secured by CurveZMQ — yet asyncio
imports `ssl` whenever it can, and `hashlib` binds OpenSSL's `_hashlib`: together 5 MiB of an
idle node's 35 MiB (issue 21; BENCHMARKS.md "Footprint"). Marked absent, asyncio runs without
TLS support (its documented behaviour when Python has no ssl module) and hashlib uses Python's
built-in SHA-256 (the same digests: key fingerprints and store signatures do not change).

With `--http-cert`, `node run --agent` still refuses an unusable certificate for its agent's REST
API before starting anything: the certificate is loaded in a short-lived child process
(`kvmesh.agent.http_security.check_in_child`). Never left out of a process that runs other
commands (`kvmesh status` may talk HTTPS to an agent), nor of an agent: pyroute2 imports `ssl`
(its netlink probe messages), so the Linux southbound needs it. Tests that call
`kvmesh.cli.main` in their own process are not affected: only this entry point decides.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

OPENSSL_MODULES = ("ssl", "_ssl", "_hashlib")


def needs_no_openssl(args: Sequence[str]) -> bool:
    """`node run` (after any global options)."""
    return command_words(args) == ("node", "run")


def command_words(args: Sequence[str]) -> tuple[str, ...]:
    """The first two words of the command line past the top-level options (`--url URL`,
    `--json`, ...: the values of those that take one are skipped)."""
    import click

    from kvmesh.cli import main

    takes_value = {name for param in main.params if isinstance(param, click.Option)
                   and not param.is_flag for name in param.opts}
    index = 0
    while index < len(args) and args[index].startswith("-"):
        index += 2 if args[index] in takes_value else 1
    return tuple(args[index:index + 2])


def leave_out_openssl() -> None:
    """Make `import ssl` / `import _hashlib` fail from here on (unless already imported)."""
    for name in OPENSSL_MODULES:
        sys.modules.setdefault(name, None)  # type: ignore[arg-type]  # None: "not available"


def openssl_left_out() -> bool:
    """Did this process leave OpenSSL out (`leave_out_openssl`)?"""
    return "ssl" in sys.modules and sys.modules["ssl"] is None


def run() -> None:
    if needs_no_openssl(sys.argv[1:]):
        leave_out_openssl()
    from kvmesh.cli import main

    # The same program name (and completion variable, _KVMESH_COMPLETE) for both ways in.
    main(prog_name="kvmesh")

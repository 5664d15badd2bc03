"""The `kvmesh` program's entry point: the installed script and `python -m kvmesh` both run here.

One decision is made before any command module loads: a plain `kvmesh node run` process leaves
OpenSSL out. A KvStore node never speaks TLS — its mesh is secured by CurveZMQ — yet asyncio
imports `ssl` whenever it can, and `hashlib` binds OpenSSL's `_hashlib`: together 5 MiB of an
idle node's 35 MiB (issue 21; BENCHMARKS.md "Footprint"). Marked absent, asyncio runs without
TLS support (its documented behaviour when Python has no ssl module) and hashlib uses Python's
built-in SHA-256 (the same digests: key fingerprints and store signatures do not change).

Not left out when the node must read TLS files itself (`--http-cert`: `node run --agent`
checks the agent's REST certificate before starting anything), and never in a process that
runs other commands (`kvmesh status` may talk HTTPS to an agent). Tests that call
`kvmesh.cli.main` in their own process are not affected: only this entry point decides.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

OPENSSL_MODULES = ("ssl", "_ssl", "_hashlib")


def needs_no_openssl(args: Sequence[str]) -> bool:
    """`node run` (as the launcher and the docs spell it: the first two words), without TLS
    options for its agent's REST API."""
    return (tuple(args[:2]) == ("node", "run")
            and not any(a == "--http-cert" or a.startswith("--http-cert=") for a in args))


def leave_out_openssl() -> None:
    """Make `import ssl` / `import _hashlib` fail from here on (unless already imported)."""
    for name in OPENSSL_MODULES:
        sys.modules.setdefault(name, None)  # type: ignore[arg-type]  # None: "not available"


def run() -> None:
    if needs_no_openssl(sys.argv[1:]):
        leave_out_openssl()
    from kvmesh.cli import main

    # The same program name (and completion variable, _KVMESH_COMPLETE) for both ways in.
    main(prog_name="kvmesh")

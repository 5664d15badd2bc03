"""`kvmesh ARGS` run inside the test's own process, answered as `subprocess.run` would answer it.

Why: a `kvmesh` process spends ~0.3-0.5 s of CPU importing (click, pyzmq, pydantic and every
configuration model) before it sends its first byte, and the suite runs hundreds of client
commands against its clusters: started as processes they were a fifth of the suite's CPU. In the
test process the modules are imported once; each command still reaches the nodes and agents,
which are real processes, through real ZeroMQ and HTTP sockets.

What a process gave the command, this gives it too, for the duration of the call: exactly the
environment asked for (variables not in `env` are absent; whatever the command sets, such as
`--key-file` exported for its own clients, is undone), the working directory, standard streams
of its own, and its exit status (an uncaught exception: status 1 and its traceback on stderr,
as Python would print it). One command runs at a time (the environment and the standard streams
are the process's), so tests that run commands side by side, or need a fresh interpreter (the
entry point, what a command imports, signals, old releases), start `python -m kvmesh` instead.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
import traceback
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from click.testing import CliRunner

_one_at_a_time = threading.Lock()


def kvmesh(args: Sequence[str], *, env: Mapping[str, str] | None = None,
           cwd: str | Path | None = None, input: str | None = None,
           ) -> subprocess.CompletedProcess[str]:
    """Run `kvmesh *args` here; `returncode`, `stdout` and `stderr` as from `subprocess.run`."""
    from kvmesh.cli import main

    argv = [str(arg) for arg in args]
    with _one_at_a_time, _environment(env), _directory(cwd):
        result = CliRunner().invoke(main, argv, input=input, prog_name="kvmesh",
                                    catch_exceptions=True)
    stderr = result.stderr
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        stderr += "".join(traceback.format_exception(result.exception))
    return subprocess.CompletedProcess(["kvmesh", *argv], result.exit_code, result.stdout, stderr)


@contextlib.contextmanager
def _environment(env: Mapping[str, str] | None) -> Iterator[None]:
    saved = dict(os.environ)
    if env is not None:
        os.environ.clear()
        os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


@contextlib.contextmanager
def _directory(cwd: str | Path | None) -> Iterator[None]:
    if cwd is None:
        yield
        return
    saved = os.getcwd()
    os.chdir(cwd)
    try:
        yield
    finally:
        os.chdir(saved)

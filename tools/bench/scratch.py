"""One private scratch directory per benchmark run, removed however the run ends.

``private_tempdir("kvbench")`` makes ``$TMPDIR/kvbench-run-<pid>-XXXX`` (mode 0700), points
``tempfile`` and the ``TMPDIR`` of every child process at it, and removes it at exit: a normal
return, an exception, Ctrl-C (KeyboardInterrupt) or SIGTERM/SIGHUP (turned into SystemExit so
the ``finally`` blocks and exit handlers run). A SIGKILL leaves it behind: nothing can clean
up after that, which is why the directory name carries the pid.

A failed run keeps what explains the failure: ``keep(path)`` moves ``path`` (logs, a cluster's
run dir) out of the scratch directory into the temp dir the process started with, as
``kvbench-failed-<pid>-XXXX``, and returns where it now is: the place to name in the error
message (naming a path inside the scratch directory would name one removed at exit).
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import tempfile
from pathlib import Path
from types import FrameType

_owner: int | None = None  # the process that made the scratch directory
_outer_tempdir: str | None = None  # the temp dir before private_tempdir replaced it


def _exit_on_signal(signum: int, _frame: FrameType | None) -> None:
    if os.getpid() != _owner:
        # A forked child (pyroute2 forks helpers and stops them with SIGTERM) inherits this
        # handler: a SystemExit there would run the parent's `finally` blocks in the child
        # (linux_bench's `ip netns del` under its own feet). Die as the signal says instead.
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return
    raise SystemExit(128 + signum)


def private_tempdir(prefix: str) -> Path:
    """Make this process's scratch directory the default temp dir; return it."""
    global _owner, _outer_tempdir
    _outer_tempdir = tempfile.gettempdir()
    root = Path(tempfile.mkdtemp(prefix=f"{prefix}-run-{os.getpid()}-"))
    owner = _owner = os.getpid()

    def remove() -> None:
        if os.getpid() == owner:  # not in a forked child that inherited the handler
            shutil.rmtree(root, ignore_errors=True)

    atexit.register(remove)
    for signum in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(signum) in (signal.SIG_DFL, None):
            signal.signal(signum, _exit_on_signal)
    tempfile.tempdir = str(root)
    os.environ["TMPDIR"] = str(root)
    return root


def keep(path: Path) -> Path:
    """Move `path` out of the scratch directory (it would be removed at exit) into the temp dir
    the process started with; return its new place. Without a scratch directory: `path`."""
    if _outer_tempdir is None or not path.exists():
        return path
    kept = Path(tempfile.mkdtemp(prefix=f"kvbench-failed-{os.getpid()}-", dir=_outer_tempdir))
    target = kept / path.name
    shutil.move(str(path), target)
    return target

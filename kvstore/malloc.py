"""Large buffers go back to the operating system when they are freed.

glibc serves an allocation of 128 KiB or more with its own mmap, returned to the system on
free, but its threshold is dynamic: freeing such a block raises the threshold to that block's
size (up to 32 MiB), so after the first 1 MiB value has come and gone the next ones come from
the heap, where freeing them seldom lowers the process's memory. Measured: a node stayed 41 MiB
above its baseline after a stalled subscriber's 32 MiB queue of 1 MiB publications was freed
(tests/kvstore/test_node_exhaustion.py), where it should come back. A fixed threshold keeps
every large buffer (values, publications, sync replies, ZeroMQ frames) in a mapping of its own.
"""

from __future__ import annotations

import logging
import sys

log = logging.getLogger("kvstore.node")

M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter (malloc.h)
LARGE_BUFFER_BYTES = 256 * 1024


def return_large_buffers() -> bool:
    """Fix the mmap threshold at LARGE_BUFFER_BYTES (glibc); False where that is not possible."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes  # loaded here: only the node process sets this, once

    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)
    if mallopt is None:
        return False
    done = bool(mallopt(M_MMAP_THRESHOLD, LARGE_BUFFER_BYTES))
    if not done:
        log.warning("cannot fix malloc's mmap threshold: freed large buffers may stay resident")
    return done

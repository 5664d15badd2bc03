"""Pausing Python's cyclic garbage collector during CPU-bound bulk phases.

A transaction of many values allocates many long-lived objects (nodes, records, revisions);
each full collection then walks the whole heap again, which made a 100 k-value transaction
~35 % slower. Reference counting still frees everything that is not in a cycle while paused.
The pause covers planning and bookkeeping only, never the southbound calls, and is skipped when
the application already disabled the collector.
"""

from __future__ import annotations

import gc


class GcPause:
    def __init__(self, active: bool) -> None:
        self._active = active
        self._paused = False

    def pause(self) -> None:
        if self._active and not self._paused and gc.isenabled():
            gc.disable()
            self._paused = True

    def resume(self) -> None:
        if self._paused:
            gc.enable()
            self._paused = False

    def __enter__(self) -> GcPause:
        self.pause()
        return self

    def __exit__(self, *exc: object) -> None:
        self.resume()

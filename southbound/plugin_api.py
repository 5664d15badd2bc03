"""What every southbound plugin offers the agent (``SouthboundPlugin``), and the
reconciliation stages its descriptors are declared in.

A plugin is registered on a scheduler by its plane's ``register()`` and is then one *device*
of the agent: the agent reconciles it when it (re)connects, stage by stage
(``ReconciliationStage``: interfaces before what sits on them, routes late), asks it to
reconnect after a failed reconciliation, and repairs what it reports as drift. Each plugin says
which stage each of its descriptors belongs to (``descriptor_stages``): nothing is guessed from
descriptor names.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from typing import Any, Protocol


class ReconciliationStage(enum.Enum):
    """A group of descriptors reconciled together; ``order``: stages run in ascending order."""

    INTERFACES = ("interfaces", 10)
    L2_DOMAINS = ("l2-domains", 20)
    ROUTES = ("routes", 30)
    OTHER = ("other", 40)  # what needs the earlier stages in place

    def __init__(self, label: str, order: int) -> None:
        self.label = label
        self.order = order


class SouthboundPlugin(Protocol):
    """A southbound as the agent uses it (``southbound.linux.LinuxPlugin``,
    ``southbound.vpp.VppPlugin``)."""

    @property
    def connected(self) -> bool:
        """Can the device be read and written now? (A lost connection during a reconciliation
        stage means the stage read nothing trustworthy.)"""
        ...

    def descriptor_stages(self) -> Mapping[str, ReconciliationStage]:
        """Every descriptor this plugin registered, by name, with its reconciliation stage."""
        ...

    def on_connect(self, callback: Callable[[], None]) -> None:
        """`callback` runs after every (re)connection: the device wants a reconciliation."""
        ...

    def on_disconnect(self, callback: Callable[[], None]) -> None:
        """`callback` runs when the device is lost."""
        ...

    def on_drift(self, callback: Callable[[], None]) -> None:
        """`callback` runs when the device changed behind kvmesh's back in a way the scheduler
        does not hear of by itself (a downstream resync repairs it)."""
        ...

    def reconnect(self, hold_off: float) -> None:
        """Drop the device and reconnect after `hold_off` seconds (a failed reconciliation's
        DISCONNECT): ``on_disconnect`` then ``on_connect`` callbacks run."""
        ...

    def stats(self) -> Mapping[str, Any]:
        """Counters for monitoring."""
        ...

    def close(self) -> None:
        """Stop for good (idempotent); no callback runs after it."""
        ...

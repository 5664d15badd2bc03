"""What the agent's parts tell the status publisher (``kvmesh.agent.status_loop``): typed
events, published under `status/<node>/` and `node/<node>/` in the order they were posted."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvmesh.agent.recon import DeviceState
from scheduler import ValueStatus


@dataclass(frozen=True)
class ValueStatusChanged:
    """The scheduler's status of a value changed."""

    status: ValueStatus


@dataclass(frozen=True)
class ValueRefused:
    """A desired value was refused before the scheduler (undecodable); reason None: it no
    longer is (its INVALID status is withdrawn)."""

    model_key: str
    reason: str | None


@dataclass(frozen=True)
class DeviceStateChanged:
    """A device's reconciliation state, with why it is held out of KNOWN (if it is)."""

    device: str
    state: DeviceState
    time: float
    reason: str | None = None

    def record(self) -> dict[str, Any]:
        payload: dict[str, Any] = {"device": self.device, "state": self.state.value,
                                   "time": round(self.time, 3)}
        if self.reason is not None and self.state is not DeviceState.KNOWN:
            payload["reason"] = self.reason
        return payload


@dataclass(frozen=True)
class AgentAnnounced:
    """The agent's own record (`node/<node>/agent`: where its REST API listens)."""

    record: dict[str, Any]


StatusEvent = ValueStatusChanged | ValueRefused | DeviceStateChanged | AgentAnnounced

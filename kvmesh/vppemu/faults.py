"""Fault injection rules: fail, delay or drop the next calls of a message.

Rules are consulted in the order they were added; the first rule that matches a message is used
and its remaining count decremented (a rule with `count=None` never runs out).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

ANY_MESSAGE = "*"
ACTIONS = ("fail", "delay", "drop")


@dataclass
class FaultRule:
    action: str  # "fail" | "delay" | "drop"
    message: str  # a message name or "*"
    count: int | None = 1
    retval: int = -1  # for "fail"
    seconds: float = 0.0  # for "delay"

    def matches(self, message: str) -> bool:
        return self.message in (message, ANY_MESSAGE) and (self.count is None or self.count > 0)

    def to_dict(self) -> dict[str, Any]:
        return {
            "action": self.action,
            "message": self.message,
            "count": self.count,
            "retval": self.retval,
            "seconds": self.seconds,
        }


def rule_from_request(request: dict[str, Any]) -> FaultRule:
    """Build a rule from a control request, raising ValueError with a field-level message."""
    action = request.get("op")
    if action not in ACTIONS:
        raise ValueError(f"field 'op': must be one of {', '.join(ACTIONS)}")
    message = request.get("message", ANY_MESSAGE)
    if not isinstance(message, str) or not message:
        raise ValueError("field 'message': must be a message name or '*'")
    count = request.get("count", 1)
    if count is not None and (not isinstance(count, int) or isinstance(count, bool) or count < 1):
        raise ValueError("field 'count': must be a positive integer or null (forever)")
    retval = request.get("retval", -1)
    if action == "fail" and (
        not isinstance(retval, int) or isinstance(retval, bool) or retval >= 0
    ):
        raise ValueError("field 'retval': must be a negative integer (a VPP error code)")
    seconds = request.get("seconds", 0.0)
    if action == "delay" and (
        not isinstance(seconds, int | float) or isinstance(seconds, bool) or not 0 < seconds <= 60
    ):
        raise ValueError("field 'seconds': must be a number in (0, 60]")
    return FaultRule(action, message, count, int(retval), float(seconds))


class FaultPlan:
    def __init__(self) -> None:
        self.rules: list[FaultRule] = []

    def add(self, rule: FaultRule) -> None:
        self.rules.append(rule)

    def clear(self) -> None:
        self.rules.clear()

    def take(self, message: str) -> FaultRule | None:
        """The rule that applies to this call of `message`, consuming one use of it."""
        for rule in self.rules:
            if rule.matches(message):
                if rule.count is not None:
                    rule.count -= 1
                self.rules = [r for r in self.rules if r.count is None or r.count > 0]
                return rule
        return None

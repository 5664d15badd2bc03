"""What the stores must hold, computed from the write log alone (never by asking a store).

Every write the workload attempts is logged with the times it was sent and answered. A write
is *acknowledged* when the node answered the solicited KEY_SET; one that timed out or failed is
*uncertain*: the node may or may not have applied it. The expectations, per key:

- The winner is the best acknowledged write by the store's own merge rule
  (`kvstore.db.compare_values`). A node must hold a value at least as good as the winner, and
  that value must be the winner itself or an uncertain write that beats it: anything else is a
  lost write (older) or an invented one.
- A finite-TTL key (written once, then refreshed TTL-only with higher ttl_versions) must be gone
  everywhere once the latest moment any of its writes could still be alive has passed: the end of
  the attempt (acknowledged or not) plus its TTL, plus `bound_ms` (the documented clock bound
  plus measurement slack). While the write with the highest ttl_version (whose TTL the merge
  keeps), if acknowledged, still has more than `present_margin_ms` to live, the key must be
  present everywhere (after convergence).

The same model checks the real cluster (`kvmesh.chaos.run`) and the simulation (`kvmesh.chaos.sim`).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from kvstore.db import compare_values
from kvstore.value import TTL_INFINITY, Value

__all__ = ["KeyExpectation", "Write", "WriteLog", "check_store", "ttl_overrun_ms"]


@dataclass(frozen=True, slots=True)
class Write:
    key: str
    value: Value  # as sent: version, originator, value (None: TTL-only refresh), ttl, ttl_version
    sent_ms: int  # the harness's monotonic clock, before sending
    done_ms: int  # after the answer (or the failure)
    acked: bool


@dataclass(slots=True)
class KeyExpectation:
    winner: Value | None = None  # best acknowledged full write
    better_uncertain: list[Value] = field(default_factory=list)  # uncertain writes beating it
    finite: bool = False
    alive_until_ms: int | None = None  # latest time any write of this finite key may live
    present_until_ms: int | None = None  # the latest acked write lives at least until then


def _same(a: Value, b: Value) -> bool:
    return (a.version, a.originator_id, a.value) == (b.version, b.originator_id, b.value)


def _better(a: Value, b: Value) -> bool:
    return compare_values(a, b) == 1


class WriteLog:
    """The writes of a run (thread-safe append) and the expectations derived from them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.writes: list[Write] = []
        # Writes sent and not answered yet, as uncertain writes ending at their deadline: a
        # store may already hold them while their outcome is unknown.
        self._in_flight: dict[int, list[Write]] = {}
        # Finite-TTL keys are not durable (docs/kvstore.md): after every node restarted at
        # once, those written before are legitimately gone.
        self.volatile_lost_ms: int | None = None

    def add(self, write: Write) -> None:
        with self._lock:
            self.writes.append(write)

    def begin(self, token: int, writes: Iterable[Write]) -> None:
        with self._lock:
            self._in_flight[token] = list(writes)

    def extend(self, writes: Iterable[Write], token: int | None = None) -> None:
        with self._lock:
            self.writes.extend(writes)
            if token is not None:
                self._in_flight.pop(token, None)

    def all_restarted(self, now_ms: int) -> None:
        """Every node restarted at `now_ms`: finite-TTL writes before it need not survive."""
        self.volatile_lost_ms = now_ms

    def snapshot(self) -> list[Write]:
        with self._lock:
            return self.writes + [w for ws in self._in_flight.values() for w in ws]

    def acknowledged(self) -> int:
        return sum(w.acked for w in self.snapshot())

    def expectations(self) -> dict[str, KeyExpectation]:
        out: dict[str, KeyExpectation] = {}
        uncertain: dict[str, list[Value]] = {}
        top_ttl_version: dict[str, int] = {}
        for write in self.snapshot():
            exp = out.setdefault(write.key, KeyExpectation())
            value = write.value
            if value.ttl_ms != TTL_INFINITY:
                exp.finite = True
                until = write.done_ms + value.ttl_ms
                exp.alive_until_ms = max(exp.alive_until_ms or until, until)
                # The TTL that stays is the one of the highest ttl_version (the merge rule),
                # not the longest: only an acknowledged top write makes presence certain.
                if write.value.ttl_version >= top_ttl_version.get(write.key, -1):
                    top_ttl_version[write.key] = write.value.ttl_version
                    lost = self.volatile_lost_ms is not None and (
                        write.sent_ms <= self.volatile_lost_ms)
                    exp.present_until_ms = (write.sent_ms + value.ttl_ms
                                            if write.acked and not lost else None)
            if value.value is None:
                continue  # a TTL-only refresh: it changes no winner
            if write.acked:
                if exp.winner is None or _better(value, exp.winner):
                    exp.winner = value
            else:
                uncertain.setdefault(write.key, []).append(value)
        for key, values in uncertain.items():
            exp = out[key]
            exp.better_uncertain = [v for v in values
                                    if exp.winner is None or _better(v, exp.winner)]
        return out


def ttl_overrun_ms(exp: KeyExpectation, asked_ms: int, remaining_ms: int) -> int:
    """How far past its latest legitimate expiry a key seen at `asked_ms` with `remaining_ms`
    left will live (<= 0: within its TTL). A node answers at or after `asked_ms`, so
    `asked_ms + remaining_ms` is the earliest it can expire there."""
    if not exp.finite or exp.alive_until_ms is None or remaining_ms == TTL_INFINITY:
        return 0
    return asked_ms + max(0, remaining_ms) - exp.alive_until_ms


def check_store(
    name: str,
    store: Mapping[str, Value],
    expected: Mapping[str, KeyExpectation],
    now_ms: int,
    *,
    present_margin_ms: int,
    bound_ms: int,
    foreign_prefixes: tuple[str, ...] = (),
) -> list[str]:
    """Problems with one node's dump (taken at `now_ms`) against the expectations. Keys under
    `foreign_prefixes` belong to someone else (agents' statuses) and are not judged."""
    problems: list[str] = []
    for key, exp in expected.items():
        held = store.get(key)
        if exp.finite:
            if held is not None:
                overrun = ttl_overrun_ms(exp, now_ms, held.ttl_ms)
                if overrun > bound_ms:
                    problems.append(f"{name}: {key} outlives its TTL by {overrun} ms")
            elif (exp.present_until_ms is not None and exp.winner is not None
                  and now_ms + present_margin_ms < exp.present_until_ms):
                problems.append(f"{name}: {key} missing ({exp.present_until_ms - now_ms} ms "
                                "of TTL left)")
            continue
        if exp.winner is None:
            if held is not None and not any(_same(held, v) for v in exp.better_uncertain):
                problems.append(f"{name}: {key} holds a value never written")
            continue
        if held is None:
            problems.append(f"{name}: {key} lost (acknowledged v{exp.winner.version} "
                            f"by {exp.winner.originator_id})")
        elif not _same(held, exp.winner) and not any(
                _same(held, v) for v in exp.better_uncertain):
            problems.append(
                f"{name}: {key} holds v{held.version}/{held.originator_id}, expected the "
                f"winner v{exp.winner.version}/{exp.winner.originator_id}")
    for key in store:
        if key not in expected and not key.startswith(foreign_prefixes):
            problems.append(f"{name}: {key} was never written")
    return problems

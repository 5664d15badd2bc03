"""A mock southbound and descriptor factory for scheduler tests.

``MockSB`` keeps what "exists" per key, records every CRUD call, and can be told to fail the
next operation on a key (optionally with a side effect simulating a partial change).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from scheduler import Dependency, Descriptor, ValueOrigin


class PlannedFailure(Exception):
    """Error injected by MockSB.fail_next."""


@dataclass
class Call:
    op: str
    key: str
    value: Any = None


@dataclass
class MockSB:
    values: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)
    origins: dict[str, ValueOrigin] = field(default_factory=dict)
    calls: list[Call] = field(default_factory=list)
    _failures: dict[str, list[tuple[BaseException, Callable[[], None] | None]]] = field(
        default_factory=dict
    )
    _next_index: int = 1
    lock: threading.Lock = field(default_factory=threading.Lock)

    def fail_next(
        self,
        key: str,
        exc: BaseException | None = None,
        side_effect: Callable[[], None] | None = None,
    ) -> None:
        self._failures.setdefault(key, []).append(
            (exc or PlannedFailure(f"planned failure of {key}"), side_effect)
        )

    def seed(self, key: str, value: Any, origin: ValueOrigin = ValueOrigin.FROM_NB) -> None:
        self.values[key] = value
        self.origins[key] = origin

    def pop_calls(self) -> list[tuple[str, str]]:
        with self.lock:
            out = [(c.op, c.key) for c in self.calls]
            self.calls.clear()
        return out

    def _maybe_fail(self, key: str) -> None:
        planned = self._failures.get(key)
        if planned:
            exc, side_effect = planned.pop(0)
            if not planned:
                del self._failures[key]
            if side_effect is not None:
                side_effect()
            raise exc

    def create(self, key: str, value: Any) -> int:
        with self.lock:
            self.calls.append(Call("create", key, value))
        self._maybe_fail(key)
        if key in self.values:
            raise FileExistsError(f"{key} already exists")
        self.values[key] = value
        index = self._next_index
        self._next_index += 1
        self.metadata[key] = index
        return index

    def update(self, key: str, old: Any, new: Any, metadata: Any) -> Any:
        with self.lock:
            self.calls.append(Call("update", key, new))
        self._maybe_fail(key)
        if key not in self.values:
            raise LookupError(f"{key} does not exist")
        self.values[key] = new
        return metadata

    def delete(self, key: str, value: Any, metadata: Any) -> None:
        with self.lock:
            self.calls.append(Call("delete", key, value))
        self._maybe_fail(key)
        if key not in self.values:
            raise LookupError(f"{key} does not exist")
        del self.values[key]
        self.metadata.pop(key, None)

    def retrieve_for(
        self, selector: Callable[[str], bool]
    ) -> Callable[[list[tuple[str, Any, Any]]], list[tuple[str, Any, Any, ValueOrigin]]]:
        def retrieve(
            correlate: list[tuple[str, Any, Any]],
        ) -> list[tuple[str, Any, Any, ValueOrigin]]:
            with self.lock:
                self.calls.append(Call("retrieve", ",".join(sorted(k for k, _, _ in correlate))))
            return [
                (k, v, self.metadata.get(k), self.origins.get(k, ValueOrigin.UNKNOWN))
                for k, v in sorted(self.values.items())
                if selector(k)
            ]

        return retrieve


def prefix_descriptor(
    sb: MockSB,
    name: str,
    prefix: str,
    *,
    deps: Callable[[str, Any], Sequence[Dependency]] | None = None,
    derived: Callable[[str, Any], Sequence[tuple[str, Any]]] | None = None,
    with_update: bool = True,
    recreate: Callable[[str, Any, Any, Any], bool] | None = None,
    with_retrieve: bool = True,
    with_metadata: bool = True,
    validate: Callable[[str, Any], None] | None = None,
    retrieve_dependencies: Sequence[str] = (),
    is_retriable: Callable[[BaseException], bool] | None = None,
    crud: bool = True,
) -> Descriptor:
    """A descriptor for keys under ``prefix`` backed by ``sb``."""

    def selector(key: str) -> bool:
        return key.startswith(prefix)

    return Descriptor(
        name=name,
        key_selector=selector,
        key_label=lambda key: key[len(prefix) :],
        validate=validate,
        create=sb.create if crud else None,
        delete=sb.delete if crud else None,
        update=sb.update if (with_update and crud) else None,
        update_with_recreate=recreate,
        retrieve=sb.retrieve_for(selector) if with_retrieve else None,
        derived_values=derived,
        dependencies=deps,
        with_metadata=with_metadata,
        retrieve_dependencies=tuple(retrieve_dependencies),
        is_retriable_failure=is_retriable,
    )

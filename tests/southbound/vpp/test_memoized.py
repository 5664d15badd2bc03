"""`southbound.vpp.models.memoized`: a value is normalised once, whether the scheduler hands
the same object again (no repr) or an equal one; a changed value is normalised anew, and a
refusal is remembered like a result."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler import InvalidValueError
from southbound.vpp.models import memoized


def counting() -> tuple[list[Any], Any]:
    seen: list[Any] = []

    @memoized
    def normalize(key: str, value: Any) -> dict[str, Any]:
        seen.append(value)
        if value.get("bad"):
            raise InvalidValueError(f"{key}: bad")
        return {"n": value.get("n", 0)}

    return seen, normalize


class NoRepr(dict[str, Any]):
    """A value whose repr must not be needed once it was normalised."""

    reprs = 0

    def __repr__(self) -> str:
        NoRepr.reprs += 1
        return super().__repr__()


def test_the_same_object_is_normalised_once_without_its_repr() -> None:
    seen, normalize = counting()
    value = NoRepr(n=1)
    assert normalize("k", value) == {"n": 1}
    reprs = NoRepr.reprs
    for _ in range(3):
        assert normalize("k", value) == {"n": 1}
    assert len(seen) == 1 and NoRepr.reprs == reprs


def test_equal_values_hit_changed_values_miss() -> None:
    seen, normalize = counting()
    assert normalize("k", {"n": 1}) is normalize("k", {"n": 1})
    assert normalize("k", {"n": 2}) == {"n": 2}
    assert normalize("other", {"n": 1}) == {"n": 1}  # the key is part of it
    assert len(seen) == 3


def test_a_refusal_is_remembered_for_the_object_and_for_equal_values() -> None:
    seen, normalize = counting()
    bad = {"bad": True}
    for value in (bad, bad, {"bad": True}):
        with pytest.raises(InvalidValueError, match="k: bad"):
            normalize("k", value)
    assert len(seen) == 1

"""The order in which `pytest -n ... --dist loadgroup` hands tests to its workers.

The whole suite's wall time is set by its longest tests: one that starts last on a worker ends
the run minutes after the other worker went idle. So the workers get the longest work first, by
the seconds each test took in the last recording (`tests/tiers.json`, "seconds"):

* a *unit* is what one worker must run by itself: the tests of one `xdist_group`, or one test;
* the tests of a module- (or class-, package-) scoped fixture, which would otherwise be set up
  once in each worker that draws one of them, are put in a group of their own module
  (`module_group`), unless they name a group themselves;
* units go out longest first (the sum of their tests' seconds); a unit keeps its tests in file
  order (a shared fixture's tests may rely on it as a serial run would).

A test not recorded yet counts as UNKNOWN_SECONDS: new tests are often end-to-end ones, and
starting a short test early costs nothing while starting a long one late costs its length.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest

UNKNOWN_SECONDS = 10.0
SHARED_SCOPES = frozenset({"module", "class", "package"})


def group_of(item: pytest.Item) -> str | None:
    """The `xdist_group` the test names (as xdist joins several), if any."""
    names = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                    for m in item.iter_markers("xdist_group")})
    return "_".join(names) or None


def uses_shared_fixture(item: pytest.Item) -> bool:
    """Whether the test uses a fixture set up once for several tests of its module."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    for definitions in info.name2fixturedefs.values():
        if definitions and str(definitions[-1].scope) in SHARED_SCOPES:
            return True
    return False


def module_group(item: pytest.Item) -> str:
    return "module:" + item.nodeid.split("::", 1)[0]


def add_module_groups(items: Sequence[pytest.Item]) -> None:
    """Puts the tests of a shared fixture that name no group in their module's group."""
    for item in items:
        if group_of(item) is None and uses_shared_fixture(item):
            item.add_marker(pytest.mark.xdist_group(module_group(item)))


def seconds_key(nodeid: str) -> str:
    """The id a test's seconds are recorded under: without the `@group` xdist appends."""
    return nodeid.split("@", 1)[0]


def longest_first(items: Sequence[pytest.Item], seconds: Mapping[str, float]) -> list[pytest.Item]:
    """The items, units longest first (ties in file order), each unit's tests in file order."""
    units: dict[str, list[pytest.Item]] = {}
    for item in items:
        units.setdefault(group_of(item) or item.nodeid, []).append(item)

    def cost(unit: list[pytest.Item]) -> float:
        return sum(seconds.get(seconds_key(i.nodeid), UNKNOWN_SECONDS) for i in unit)

    ordered = sorted(units.values(), key=cost, reverse=True)  # stable: ties keep file order
    return [item for unit in ordered for item in unit]


def arrange(items: list[pytest.Item], seconds: Mapping[str, float], *, worker: bool) -> None:
    """What tests/conftest.py does to the collection: groups for shared fixtures; in an xdist
    worker (whose order is the order the tests are handed out in), longest first. A serial run
    keeps the file order."""
    add_module_groups(items)
    if worker:
        items[:] = longest_first(items, seconds)

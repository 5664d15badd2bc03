"""When a PENDING value waits for something that is coming: the one rule of `kvmesh plan`/`apply`
(would the value stay PENDING?) and of `kvmesh apply --wait` (is its PENDING final?).

A value of one plane can make something that another plane reports: a Linux-CP pair
(`vpp/lcp/...`) makes a Linux link that the node's Linux southbound then finds
(``ModelSpec.provides``, listed by ``kvmesh.agent.models.provided_by``). A Linux value on that
link waits (PENDING) until it is found: not for something missing, but for its provider.

The rule, for the PENDING values of one node, each with what it waits for by key (for each
missing dependency the keys any one of which would satisfy it; the scheduler's
``WaitedKeys``): a value waits for its providers when every one of its missing dependencies
accepts a key that is

* made by a value of the same node that is *live* (the caller says what that is: in a plan,
  desired and not refused; after a write, written and CONFIGURED or not reported on yet), or by
  a value that itself waits for its providers, or
* a value that itself waits for its providers (a route through a link that waits for its pair).

Nothing else is assumed: a value whose dependencies are not known by key (an older agent's
status) waits for nothing coming, and a dependency cycle never provides itself (the set grows
from what is live only).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

#: For each missing dependency of a value, the keys any one of which would satisfy it.
Waits = Sequence[Sequence[str]]
#: value -> for each missing dependency, (the key that is coming, the value that makes it, or
#: None when the key is itself a value that waits for its providers)
Coming = dict[str, tuple[tuple[str, str | None], ...]]


def waiting_for_providers(waiting: Mapping[str, Waits], provided: Mapping[str, str],
                          live: Callable[[str], bool]) -> Coming:
    """The values of `waiting` (PENDING values of one node, by key) that wait only for what
    live values of the node make (`provided`: made key -> the value that makes it), directly
    or through other such values; with, for each dependency, what it waits for."""
    coming: Coming = {}
    grown = True
    while grown:
        grown = False
        for key, waits in waiting.items():
            if key in coming or not waits:
                continue
            found = [_coming(keys, provided, live, coming) for keys in waits]
            if all(pair is not None for pair in found):
                coming[key] = tuple(pair for pair in found if pair is not None)
                grown = True
    return coming


def _coming(keys: Sequence[str], provided: Mapping[str, str], live: Callable[[str], bool],
            coming: Coming) -> tuple[str, str | None] | None:
    """What satisfies one dependency (any of `keys`) soon, or None: preferably what a value
    makes (the plainer answer), else a value that waits for its providers."""
    for key in keys:
        maker = provided.get(key)
        if maker is not None and (maker in coming or live(maker)):
            return key, maker
    for key in keys:
        if key in coming:
            return key, None
    return None


def describe_waits(waits: tuple[tuple[str, str | None], ...]) -> str:
    """"linux/interface/host/be0 (made by vpp/lcp/bond0)", one per dependency."""
    return ", ".join(f"{key} (made by {maker})" if maker is not None
                     else f"{key} (which waits for its provider)" for key, maker in waits)

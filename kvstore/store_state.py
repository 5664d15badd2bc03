"""How a node got its state, and when that state may be trusted as the whole truth.

A node reports one of three states (NODE_INFO `store_state`, counter `kvstore.store_state`):

- EMPTY: nothing was loaded from disk and no full sync with a peer has completed.
- RESTORED: key-values were loaded from the node's data directory; no peer sync completed yet.
- SYNCED: at least one full sync with a peer completed (this node asked, the peer answered every
  step). A peer that failed or never answered does not count. Latched: a node stays SYNCED.

Whoever acts on the store's *absence* of a key (the agent deleting what is no longer desired)
must first know the store is current: `store_is_current` is that rule, kept here in one place.
"""

from __future__ import annotations

from enum import StrEnum


class StoreState(StrEnum):
    EMPTY = "EMPTY"
    RESTORED = "RESTORED"
    SYNCED = "SYNCED"

    @property
    def code(self) -> int:
        """The state as a number for counters: 0 EMPTY, 1 RESTORED, 2 SYNCED."""
        return _CODES[self]

    @classmethod
    def from_code(cls, code: int) -> StoreState:
        return _STATES[code]


_CODES = {StoreState.EMPTY: 0, StoreState.RESTORED: 1, StoreState.SYNCED: 2}
_STATES = {code: state for state, code in _CODES.items()}


def initial_state(restored_keys: int) -> StoreState:
    """The state at start: RESTORED when the data directory held key-values, else EMPTY."""
    return StoreState.RESTORED if restored_keys > 0 else StoreState.EMPTY


def store_is_current(state: StoreState, num_peers: int, *, forced: bool = False) -> bool:
    """May the absence of a key in this store be taken to mean "not desired"?

    Yes once SYNCED; yes when RESTORED on a node with no peers (its disk is then the only copy);
    never when EMPTY on its own (an empty store is what a lost data directory looks like too),
    and never on a timeout. `forced`: an operator said this store is the truth.
    """
    if forced or state is StoreState.SYNCED:
        return True
    return state is StoreState.RESTORED and num_peers == 0


def why_not_current(state: StoreState, num_peers: int) -> str:
    """A one-line reason for operators, when `store_is_current` says no."""
    if state is StoreState.EMPTY:
        where = f"none of its {num_peers} peer(s) synced yet" if num_peers else "it has no peers"
        return f"KvStore is EMPTY (nothing on disk) and {where}"
    return f"KvStore is RESTORED from disk and none of its {num_peers} peer(s) synced yet"

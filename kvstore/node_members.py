"""The node's membership shell: feeds the `member/` records it holds to its key table and its
peerings, as they merge (the decisions are `kvstore.membership`'s).

- After every merge that changed a `member/` key (and once at start, from the data directory),
  the records are decoded (`MemberView`) and handed to the security layer: active members' keys
  are accepted, removed members' keys refused; connections whose key is no longer accepted are
  shut (command and publication sockets), so a removed member loses its subscription too.
- The peerings are reconciled against the records (`plan_peers`), like the agent reconciles the
  kernel: peers the records name are added (no restart, no file edited), those they put there
  and no longer name are removed, and a peer whose record says "removed" is dropped whoever
  added it. Peers come back on restart because the records are in the durable store.
- A node not admitted yet is refused by its peers at the handshake, and a refused handshake
  leaves its sync request stuck until the sync timeout: when its own record becomes active, and
  at most once a second when a key it does not know knocks (a member it has not heard of yet,
  e.g. one whose record names it), it dials its unsynced peers again at once.
- Configured peers the node could not add at start (no key yet, e.g. known only by a member
  record a peer will send) are retried after every change; a configured peer whose record says
  "removed" is skipped with a warning: the node starts anyway.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Mapping

import zmq

from kvstore import stats
from kvstore.authz import MEMBER_PREFIX
from kvstore.config import NodeConfig, PeerAddress
from kvstore.curve import CurveError, NodeSecurity
from kvstore.db import KvStoreDb
from kvstore.membership import Address, MemberView, plan_peers
from kvstore.node_conns import ConnectionLimiter
from kvstore.node_peers import Peering
from kvstore.shell import monotonic_ms

log = logging.getLogger("kvstore.node")

# A sync without a reply for this long is taken as stuck when the membership changed.
REDIAL_QUIET_MS = 300
# At most one redial per this much time on account of unknown keys knocking.
KNOCK_INTERVAL_MS = 1000


def touches_members(keys: Iterable[str]) -> bool:
    return any(key.startswith(MEMBER_PREFIX) for key in keys)


class Membership:
    """One node's view of the membership and what it does about it (see the module doc)."""

    def __init__(self, config: NodeConfig, db: KvStoreDb, counters: Counter[str],
                 security: NodeSecurity | None) -> None:
        self.name = config.name
        self.config = config
        self.db = db
        self.counters = counters
        self.security = security
        self.view = MemberView({})
        self.peering: Peering | None = None
        self.limiters: list[ConnectionLimiter] = []
        self._managed: set[str] = set()  # peers the records put there
        self._unkeyed: dict[str, Address] = {}  # configured peers not added yet (no key)
        self._redialed_ms = 0

    def start(self, peering: Peering, limiters: list[ConnectionLimiter],
              configured: Mapping[str, PeerAddress]) -> None:
        """Read the stored records, then add the configured peers (the records may hold their
        keys or say they were removed), then those the records name."""
        self.peering = peering
        self.limiters = limiters
        self.refresh(reconcile=False)
        removed = self.view.removed_names()
        for name, address in configured.items():
            if name in removed:
                log.warning("node %s: configured peer %r was removed from the mesh (its member "
                            "record says so): not peering with it", self.name, name)
                continue
            try:
                peering.add(name, address.cmd_url, address.pub_url)
            except CurveError as exc:
                log.warning("node %s: %s; starting without it (added once its key is known)",
                            self.name, exc)
                self._unkeyed[name] = (address.cmd_url, address.pub_url)
        self.reconcile()

    def refresh(self, reconcile: bool = True) -> None:
        """Take the records as the store holds them now."""
        values = self.db.dump(monotonic_ms(), MEMBER_PREFIX)
        view = MemberView.from_values((key, value.value) for key, value in values.items())
        for problem in sorted(set(view.invalid) - set(self.view.invalid)):
            log.warning("member record ignored: %s", problem)
        own, before = view.members.get(self.name), self.view.members.get(self.name)
        if own is not None and not own.active and self.name not in self.view.removed_names():
            log.warning("node %s: this node's member record says removed: the other nodes "
                        "refuse its key", self.name)
        admitted = own is not None and own.active and (
            before is None or not before.active or before.key != own.key)
        self.view = view
        if self.security is not None and self.security.set_members(view):
            self.keys_changed()
        if reconcile:
            self.reconcile()
        if admitted:
            log.info("node %s: admitted to the mesh (member/%s active)", self.name, self.name)
            self._redial(monotonic_ms())

    def tick(self, now: int) -> None:
        """A key this node does not know knocked: it may have been admitted (see the doc)."""
        if (self.security is not None and now - self._redialed_ms >= KNOCK_INTERVAL_MS
                and self.security.take_stranger()):
            self._redial(now)

    def _redial(self, now: int) -> None:
        self._redialed_ms = now
        if self.peering is not None:
            names = self.peering.redial_unsynced(REDIAL_QUIET_MS)
            if names:
                log.info("node %s: dialing unsynced peer(s) %s again", self.name,
                         ", ".join(names))

    def keys_changed(self) -> None:
        """The key table changed: shut the connections of keys no longer accepted, and
        reconnect to peers whose key changed."""
        security = self.security
        if security is None:
            return
        dropped = sum(limiter.shut_keys(security.authorized) for limiter in self.limiters)
        if dropped:
            self.counters[stats.AUTH_CONNECTIONS_SHUT] += dropped
            log.warning("node %s: %d connection(s) shut: their key is no longer accepted",
                        self.name, dropped)

    def named_peers(self) -> set[str]:
        """The peers the records give this node (active members naming it or named by it)."""
        return set(self.view.peerings(self.name))

    def adopt(self, names: Iterable[str]) -> None:
        """Peers the configuration file gave up that the records name: the records' from now on
        (removed when they stop naming them, re-added at their address if it changes)."""
        self._managed.update(names)

    def reconcile(self) -> None:
        """Bring the peerings in line with the records (after a change of them, or of the
        configured peers: SIGHUP)."""
        peering = self.peering
        if peering is None:
            return
        current = {name: (link.cmd_url, link.pub_url) for name, link in peering.links.items()}
        plan = plan_peers(self.name, self.view, current, self._managed)
        for name in plan.remove:
            peering.remove(name)
            self._managed.discard(name)
            self.counters[stats.MEMBER_PEER_CHANGES] += 1
            log.info("node %s: peer %s removed (member records)", self.name, name)
        for name, (cmd_url, pub_url) in plan.add.items():
            if self._add(name, cmd_url, pub_url, "member records"):
                self._managed.add(name)
        removed = self.view.removed_names()
        for name, (cmd_url, pub_url) in list(self._unkeyed.items()):
            if (name in peering.links or name in removed
                    or self._add(name, cmd_url, pub_url, "its key is known now", quiet=True)):
                del self._unkeyed[name]
        if self.security is not None:
            peering.refresh_keys()

    def _add(self, name: str, cmd_url: str, pub_url: str, why: str, quiet: bool = False) -> bool:
        peering = self.peering
        assert peering is not None
        links = peering.links
        if name not in links and (len(links) >= self.config.max_peers
                                  or (self.config.leaf and links)):
            log.warning("node %s: not peering with %s (%s): at max_peers, or a leaf with its "
                        "peer", self.name, name, why)
            return False
        try:
            peering.add(name, cmd_url, pub_url)
        except (CurveError, zmq.ZMQError) as exc:
            if not quiet:
                log.warning("node %s: cannot peer with %s (%s): %s", self.name, name, why, exc)
            return False
        self.counters[stats.MEMBER_PEER_CHANGES] += 1
        log.info("node %s: peer %s added (%s)", self.name, name, why)
        return True

    def gauges(self) -> dict[str, int]:
        members = self.view.members.values()
        return {
            stats.MEMBERS_ACTIVE: sum(1 for m in members if m.active),
            stats.MEMBERS_REMOVED: sum(1 for m in members if not m.active),
            stats.MEMBERS_INVALID: len(self.view.invalid),
        }

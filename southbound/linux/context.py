"""State shared by the descriptors of one plugin: ownership rules and the name -> ifindex cache.

Ownership: kvmesh marks every link it creates with a link *group* (``KVMESH_LINK_GROUP``, set
atomically in the creating netlink request), every route with a route *protocol*
(``KVMESH_ROUTE_PROTO``) and every address it adds with the same number as address protocol
(``IFA_PROTO``). Retrieve reports only marked links and routes as kvmesh values; every other link
(``lo``, physical NICs, links made by hand or by other software) is a *host* link, reported as an
OBTAINED ``linux/interface/host/<name>`` value and never deleted (a host link named by a
``"type": "existing"`` value is configured, and loses only the addresses kvmesh marked). The
markers survive an agent restart, so kvmesh recognises its own objects after a crash.
"""

from __future__ import annotations

import errno
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from southbound.linux.errors import NetlinkOperationError
from southbound.linux.records import Link

if TYPE_CHECKING:  # pyroute2 is loaded when a client is made, not by validating a model
    from southbound.linux.netlink import NetlinkClient

KVMESH_LINK_GROUP = 0x6B766D  # "kvm"
KVMESH_ROUTE_PROTO = 107  # unassigned in iproute2's rt_protos
T = TypeVar("T")


class Ownership:
    """Decides which links kvmesh owns.

    A name is *claimed* while kvmesh creates it: tap devices are created by ioctl and only get
    their group in a second request, so the watcher must not mistake them for host links in
    between."""

    def __init__(self, link_group: int = KVMESH_LINK_GROUP,
                 route_proto: int = KVMESH_ROUTE_PROTO) -> None:
        self.link_group = link_group
        self.route_proto = route_proto
        self.address_proto = route_proto & 0xFF  # IFA_PROTO is one byte
        self._claimed: set[str] = set()
        self._lock = threading.Lock()

    def owns(self, link: Link) -> bool:
        return link.group == self.link_group or self.is_claimed(link.name)

    def is_claimed(self, name: str) -> bool:
        with self._lock:
            return name in self._claimed

    def claim(self, name: str) -> None:
        with self._lock:
            self._claimed.add(name)

    def release(self, name: str) -> None:
        with self._lock:
            self._claimed.discard(name)


class LinkIndex:
    """Cache of ifindex by link name, so descriptor operations need no lookup request.

    Entries come from kernel echoes (create), dumps (retrieve) and lookups. A stale entry (a link
    re-created behind kvmesh's back) is detected by ENODEV and refreshed by ``with_index``."""

    def __init__(self, client: NetlinkClient) -> None:
        self._client = client
        self._by_name: dict[str, int] = {}
        self._lock = threading.Lock()

    def remember(self, name: str, index: int) -> None:
        with self._lock:
            self._by_name[name] = index

    def forget(self, name: str) -> None:
        with self._lock:
            self._by_name.pop(name, None)

    def replace_all(self, links: dict[str, int]) -> None:
        with self._lock:
            self._by_name = dict(links)

    def cached(self, name: str) -> int | None:
        with self._lock:
            return self._by_name.get(name)

    def lookup(self, name: str) -> int | None:
        """The ifindex of ``name`` (cache first, then the kernel); None when there is no link."""
        index = self.cached(name)
        if index is not None:
            return index
        link = self._client.get_link(name)
        if link is None:
            return None
        self.remember(name, link.index)
        return link.index

    def require(self, name: str, purpose: str) -> int:
        index = self.lookup(name)
        if index is None:
            raise NetlinkOperationError(purpose, errno.ENODEV, f"link {name!r} does not exist")
        return index

    def with_index(self, name: str, purpose: str, operation: Callable[[int], T]) -> T:
        """Run ``operation(ifindex)``; on ENODEV with a cached index, refresh it once and retry."""
        index = self.require(name, purpose)
        try:
            return operation(index)
        except NetlinkOperationError as exc:
            if exc.code != errno.ENODEV:
                raise
            self.forget(name)
            fresh = self.require(name, purpose)
            if fresh == index:
                raise
            return operation(fresh)


@dataclass(frozen=True)
class Snapshot:
    """Links and addresses of the namespace, read together."""

    links: list[Link]
    addresses: dict[int, list[str]]  # by ifindex
    marked: frozenset[tuple[int, str]]  # (ifindex, cidr) of the addresses kvmesh added
    names: dict[int, str]  # ifindex -> name
    generation: int
    taken: float


class PluginContext:
    """What every descriptor of one plugin shares."""

    # A refresh calls the Retrieve of the host-link descriptor first (retrieve dependencies),
    # then interfaces and routes: those two reuse the dump the first one took, if kvmesh changed
    # nothing since and it is this fresh. That is the same as all three dumping at once.
    SNAPSHOT_REUSE_SECONDS = 1.0

    def __init__(self, client: NetlinkClient, ownership: Ownership,
                 state_dir: str | None = None) -> None:
        self.client = client
        self.ownership = ownership
        # Where models keep what must survive the agent (the sysctls' originals); None: their
        # default.
        self.state_dir = state_dir
        self.links = LinkIndex(client)
        self._snapshot: Snapshot | None = None
        self._snapshot_lock = threading.Lock()

    def snapshot(self, fresh: bool = False) -> Snapshot:
        """Links and addresses: a new dump if ``fresh`` (the first Retrieve of a refresh), else
        the last one while it is current (see SNAPSHOT_REUSE_SECONDS)."""
        with self._snapshot_lock:
            current = self._snapshot
            if (not fresh and current is not None
                    and current.generation == self.client.generation
                    and time.monotonic() - current.taken < self.SNAPSHOT_REUSE_SECONDS):
                return current
            generation = self.client.generation
            links = self.client.dump_links()
            addresses: dict[int, list[str]] = {}
            marked = set()
            for address in self.client.dump_addresses():
                addresses.setdefault(address.index, []).append(address.cidr)
                if address.proto == self.ownership.address_proto:
                    marked.add((address.index, address.cidr))
            current = Snapshot(links, addresses, frozenset(marked),
                               {link.index: link.name for link in links},
                               generation, time.monotonic())
            self._snapshot = current
            self.links.replace_all({link.name: link.index for link in links})
            return current

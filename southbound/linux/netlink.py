"""Netlink operations in one network namespace: links, addresses and routes.

``NetlinkClient`` is the only module that talks to the kernel for configuration. Changes go
through one pyroute2 ``IPRoute`` handle; reads (dumps, lookups) go through a second, raw socket
decoded by ``rtnl`` (much faster than pyroute2's full decode, which matters for Retrieve). Both
are guarded by one lock: the scheduler may call descriptors from any thread. Kernel errors are
mapped onto ``southbound.linux.errors`` and operations are idempotent:

* adding an address that exists, or a route identical to an existing kvmesh route: success;
* deleting a link, address or route that is already gone (ENODEV, ESRCH, EADDRNOTAVAIL): success.

The namespace is opened without ``O_CREAT``: a missing namespace raises
``NamespaceNotFoundError`` instead of being silently created (pyroute2's default).
"""

from __future__ import annotations

import errno
import ipaddress
import socket
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from southbound.linux.errors import (
    ABSENT_ERRNOS,
    NamespaceNotFoundError,
    NetlinkOperationError,
    OwnershipError,
    UnsupportedLinkTypeError,
)
from southbound.linux.netns import require_netns
from southbound.linux.pyroute2_lean import IPRoute, IPRSocket, NetlinkError
from southbound.linux.records import Address, CreatedLink, Link, Neighbor, Route, Rule
from southbound.linux.rtnl import RtnlReader

IFA_F_NODAD = 0x02
RT_SCOPE_NOWHERE = 255
READ_SOCKET_BUFFER = 8 << 20
T = TypeVar("T")


def open_raw_socket(netns: str | None, groups: int = 0, rcvbuf: int = READ_SOCKET_BUFFER) -> Any:
    """A raw rtnetlink socket in ``netns`` (pyroute2 ``IPRSocket``: it knows how to open a
    socket inside a named namespace), bound to the multicast ``groups``."""
    if netns:
        require_netns(netns)
    try:
        sock = (IPRSocket(netns=netns, flags=0, groups=groups, rcvbuf=rcvbuf) if netns
                else IPRSocket(groups=groups, rcvbuf=rcvbuf))
        sock.bind(groups=groups)
    except FileNotFoundError as exc:
        raise NamespaceNotFoundError(netns or "") from exc
    return sock


class NetlinkClient:
    """Rtnetlink in one namespace (None: the caller's own), safe to share between threads."""

    def __init__(self, netns: str | None = None) -> None:
        self.netns = netns
        self._lock = threading.Lock()
        self.calls = 0
        self.errors = 0
        # Bumped by every change request: lets readers tell whether a snapshot is still current.
        self.generation = 0
        if netns:
            require_netns(netns)
        try:
            # O_CREAT is pyroute2's default: flags=0 makes a missing namespace an error.
            # nlm_echo: the kernel echoes a created link, which carries its ifindex (and the
            # veth peer's) without an extra lookup.
            # ext_ack: the kernel's own explanation ("Nexthop has invalid gateway") in errors.
            options: dict[str, Any] = {"nlm_echo": True, "ext_ack": True}
            self._ipr = IPRoute(netns=netns, flags=0, **options) if netns else IPRoute(**options)
        except FileNotFoundError as exc:
            raise NamespaceNotFoundError(netns or "") from exc
        try:
            self._read_socket = open_raw_socket(netns)
        except BaseException:
            self._ipr.close()
            raise
        self._reader = RtnlReader(self._read_socket.socket)
        # The per-thread loops pyroute2 made for threads other than its creator (see
        # _keep_thread_event_loop): its close() only closes the calling thread's.
        self._thread_loops: set[Any] = set()

    def close(self) -> None:
        with self._lock:
            self._ipr.close()
            self._read_socket.close()
            for loop in self._thread_loops:
                # Left open, each is closed by the garbage collector at interpreter exit, after
                # its self-pipe socket may already be gone: "Exception ignored in
                # BaseEventLoop.__del__" on the agent's way out (seen in a chaos run's log).
                if not loop.is_closed() and not loop.is_running():
                    loop.close()
            self._thread_loops.clear()

    # -- plumbing -----------------------------------------------------------------------------

    def _call(self, operation: str, function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """A change request (counted in ``generation``)."""
        return self._request(operation, True, function, *args, **kwargs)

    def _query(self, operation: str, function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """A read through pyroute2 (a dump or get): changes nothing, so no ``generation``."""
        return self._request(operation, False, function, *args, **kwargs)

    def _request(self, operation: str, change: bool, function: Callable[..., T], *args: Any,
                 **kwargs: Any) -> T:
        with self._lock:
            self._keep_thread_event_loop()
            self.calls += 1
            if change:
                self.generation += 1
            try:
                return function(*args, **kwargs)
            except NetlinkError as exc:
                self.errors += 1
                raise NetlinkOperationError(operation, exc.code, _netlink_detail(exc)) from exc
            except OSError as exc:
                self.errors += 1
                code = exc.errno or errno.EIO
                raise NetlinkOperationError(operation, code, str(exc)) from exc
            finally:
                self._remember_thread_loop()

    def _keep_thread_event_loop(self) -> None:
        """Make calls from this thread as cheap as from the creating thread.

        pyroute2's sync ``IPRoute`` runs each request on a per-thread asyncio loop. In a thread
        other than its creator (the scheduler's worker) it builds that loop and tears it down
        again around *every* request (+~45% per call) unless the thread-local flag
        ``keep_event_loop`` is set, as pyroute2 itself does for the creating thread. Requests
        are serialised by ``_lock``, so only one loop ever reads the socket at a time."""
        local = self._thread_state()
        if local is not None and not getattr(local, "keep_event_loop", False):
            local.keep_event_loop = True

    def _remember_thread_loop(self) -> None:
        """Note the calling thread's pyroute2 loop (made by its first request), for close()."""
        loop = getattr(self._thread_state(), "event_loop", None)
        if loop is not None:
            self._thread_loops.add(loop)

    def _thread_state(self) -> Any:
        """pyroute2's thread-local state of the calling thread (None if its layout changed)."""
        return getattr(getattr(self._ipr, "asyncore", None), "local", None)

    @staticmethod
    def _absent_ok(exc: NetlinkOperationError) -> bool:
        return exc.code in ABSENT_ERRNOS

    # -- links --------------------------------------------------------------------------------

    def _read(self, operation: str, function: Callable[[], T]) -> T:
        with self._lock:
            self.calls += 1
            try:
                return function()
            except NetlinkOperationError:
                self.errors += 1
                raise
            except OSError as exc:
                self.errors += 1
                raise NetlinkOperationError(operation, exc.errno or errno.EIO, str(exc)) from exc

    def dump_links(self) -> list[Link]:
        return self._read("dump links", self._reader.links)

    def get_link(self, name: str) -> Link | None:
        return self._read(f"get link {name}", lambda: self._reader.link(name=name))

    def get_link_by_index(self, index: int) -> Link | None:
        return self._read(f"get link #{index}", lambda: self._reader.link(index=index))

    def create_link(self, name: str, kind: str, **attributes: Any) -> CreatedLink | None:
        """Create a link; return its ifindex as echoed by the kernel (None if not echoed).

        Raises ``UnsupportedLinkTypeError`` when the kernel has no driver for ``kind`` and
        ``NetlinkOperationError`` with code EEXIST when the name is taken."""
        operation = f"create {kind} link {name}"
        try:
            echoed = self._call(operation, self._ipr.link, "add", ifname=name, kind=kind,
                                **attributes)
        except NetlinkOperationError as exc:
            if exc.code in (errno.EOPNOTSUPP, errno.EAFNOSUPPORT) or (
                exc.code == errno.EINVAL and "Unknown device type" in str(exc)
            ):
                raise UnsupportedLinkTypeError(operation, kind, exc.code) from exc
            raise
        for message in echoed or ():
            if message.get("event") == "RTM_NEWLINK":
                return CreatedLink(message["index"], message.get("link") or None)
        return None

    def set_link(self, index: int, description: str, **attributes: Any) -> None:
        """Change attributes of a link in place (state, mtu, address, master, group...)."""
        self._call(description, self._ipr.link, "set", index=index, **attributes)

    def delete_link(self, index: int, description: str) -> bool:
        """Delete a link; False when it was already gone."""
        try:
            self._call(description, self._ipr.link, "del", index=index)
        except NetlinkOperationError as exc:
            if self._absent_ok(exc):
                return False
            raise
        return True

    def delete_link_group(self, group: int) -> None:
        """Delete every link of a group in one request (fast bulk cleanup)."""
        try:
            self._call(f"delete link group {group}", self._ipr.link, "del", group=group)
        except NetlinkOperationError as exc:
            if not self._absent_ok(exc):
                raise

    # -- addresses ----------------------------------------------------------------------------

    def dump_addresses(self) -> list[Address]:
        return self._read("dump addresses", self._reader.addresses)

    def add_address(self, index: int, cidr: str, description: str, proto: int = 0) -> bool:
        """Add an address (marked with address protocol ``proto`` if given); False when it
        already existed (idempotent: an address someone else added keeps its marker)."""
        interface = ipaddress.ip_interface(cidr)
        extra: dict[str, Any] = {"proto": proto} if proto else {}
        if interface.version == 6:
            # No duplicate address detection: the address is usable at once (and routes via it
            # can be added immediately) instead of staying "tentative" for a second or more.
            extra["flags"] = IFA_F_NODAD
        try:
            self._call(description, self._ipr.addr, "add", index=index,
                       address=str(interface.ip), prefixlen=interface.network.prefixlen, **extra)
        except NetlinkOperationError as exc:
            if exc.code == errno.EEXIST:
                return False
            raise
        return True

    def delete_address(self, index: int, cidr: str, description: str) -> bool:
        """Delete an address; False when it (or its link) was already gone."""
        interface = ipaddress.ip_interface(cidr)
        try:
            self._call(description, self._ipr.addr, "del", index=index,
                       address=str(interface.ip), prefixlen=interface.network.prefixlen)
        except NetlinkOperationError as exc:
            if self._absent_ok(exc):
                return False
            raise
        return True

    # -- routes -------------------------------------------------------------------------------

    def dump_routes(self, proto: int | None = None) -> list[Route]:
        """Routes of the modelled types of every table (only those of protocol ``proto`` if
        given)."""
        return self._read("dump routes", lambda: self._reader.routes(proto))

    def _route_arguments(self, route: Route) -> dict[str, Any]:
        network = ipaddress.ip_network(route.dst)
        arguments: dict[str, Any] = {
            "dst": str(network.network_address),
            "dst_len": network.prefixlen,
            "family": route.family,
            "table": route.table,
            "priority": route.metric,
            "proto": route.proto,
            "scope": route.scope,
            "type": route.type,
        }
        if route.oif is not None:
            arguments["oif"] = route.oif
        if route.gateway is not None:
            arguments["gateway"] = route.gateway
        if route.src is not None:
            arguments["prefsrc"] = route.src
        if route.nexthops:
            arguments["multipath"] = [
                {"oif": hop.oif, "hops": hop.weight - 1,
                 **({"gateway": hop.gateway} if hop.gateway is not None else {})}
                for hop in route.nexthops]
        return arguments

    def add_route(self, route: Route, description: str) -> bool:
        """Add a route; False when an identical route already exists.

        A different route with the same identity (table, dst, metric) raises ``OwnershipError``."""
        try:
            self._call(description, self._ipr.route, "add", **self._route_arguments(route))
        except NetlinkOperationError as exc:
            if exc.code != errno.EEXIST:
                raise
            existing = self.find_routes(route.table, route.dst, route.metric)
            if route in existing:
                return False
            raise OwnershipError(
                description,
                f"a different route to {route.dst} (table {route.table}, metric {route.metric}) "
                f"already exists: {', '.join(_describe_route(r) for r in existing) or 'unknown'}",
            ) from exc
        return True

    def replace_route(self, route: Route, description: str) -> None:
        """Change a route in place (same table, destination and metric): gateway, scope, type,
        preferred source, next hops."""
        self._call(description, self._ipr.route, "replace", **self._route_arguments(route))

    def delete_route(self, route: Route, description: str) -> bool:
        """Delete a route (matched on table, dst, metric, type, protocol and oif if it has one);
        False if absent."""
        arguments = self._route_arguments(route)
        for detail in ("gateway", "prefsrc", "multipath"):
            # Matched on identity (and type, protocol, device) only, as `ip route del` does.
            arguments.pop(detail, None)
        arguments["scope"] = RT_SCOPE_NOWHERE  # "any scope", as `ip route del` does
        try:
            self._call(description, self._ipr.route, "del", **arguments)
        except NetlinkOperationError as exc:
            if self._absent_ok(exc):
                return False
            raise
        return True

    def find_routes(self, table: int, dst: str, metric: int) -> list[Route]:
        return [r for r in self.dump_routes() if (r.table, r.dst, r.metric) == (table, dst, metric)]

    # -- neighbors (appended for linux/neighbor) ----------------------------------------------

    def dump_neighbors(self) -> list[Neighbor]:
        """Every IPv4 and IPv6 neighbor entry of the namespace (any state, any owner)."""
        messages = self._query("dump neighbors", self._ipr.neigh, "dump")
        return [n for n in (_neighbor(message) for message in messages) if n is not None]

    def get_neighbor(self, index: int, ip: str) -> Neighbor | None:
        """The neighbor entry of ``ip`` on link ``index``, or None."""
        try:
            messages = self._query(f"get neighbor {ip}", self._ipr.neigh, "get", dst=ip,
                                  ifindex=index, family=_family(ip))
        except NetlinkOperationError as exc:
            if self._absent_ok(exc):
                return None
            raise
        for message in messages:
            found = _neighbor(message)
            if found is not None:
                return found
        return None

    def set_neighbor(self, neighbor: Neighbor, description: str, *, replace: bool) -> None:
        """Add (``replace`` False: EEXIST when the entry exists) or add-or-replace a neighbor."""
        self._call(description, self._ipr.neigh, "replace" if replace else "add",
                   dst=neighbor.ip, lladdr=neighbor.mac, ifindex=neighbor.index,
                   state=neighbor.state, family=neighbor.family, NDA_PROTOCOL=neighbor.proto)

    def delete_neighbor(self, index: int, ip: str, description: str) -> bool:
        """Delete a neighbor entry; False when it (or its link) was already gone."""
        try:
            self._call(description, self._ipr.neigh, "del", dst=ip, ifindex=index,
                       family=_family(ip))
        except NetlinkOperationError as exc:
            if self._absent_ok(exc):
                return False
            raise
        return True

    # -- policy routing rules (appended for linux/rule) ---------------------------------------

    def dump_rules(self, proto: int | None = None) -> list[Rule]:
        """IPv4 and IPv6 rules (only those of protocol ``proto`` if given)."""
        messages = self._query("dump rules", self._ipr.rule, "dump")
        rules = [r for r in (_rule(message) for message in messages) if r is not None]
        return [r for r in rules if proto is None or r.proto == proto]

    def add_rule(self, rule: Rule, description: str) -> bool:
        """Add a rule; False when an identical rule already exists."""
        try:
            self._call(description, self._ipr.rule, "add", **_rule_arguments(rule))
        except NetlinkOperationError as exc:
            if exc.code != errno.EEXIST:
                raise
            if rule in self.dump_rules(rule.proto):
                return False
            raise OwnershipError(description, "an identical rule of another owner exists "
                                              f"at priority {rule.priority}") from exc
        return True

    def delete_rule(self, rule: Rule, description: str) -> bool:
        """Delete the rule matching every attribute of ``rule`` (protocol included, so only
        kvmesh's own); False when there is none."""
        try:
            self._call(description, self._ipr.rule, "del", **_rule_arguments(rule))
        except NetlinkOperationError as exc:
            if self._absent_ok(exc):
                return False
            raise
        return True


# -- message conversion ---------------------------------------------------------------------


def _netlink_detail(exc: NetlinkError) -> str:
    text = str(exc.args[1]) if len(exc.args) > 1 else str(exc)
    return text


def _describe_route(route: Route) -> str:
    via = f" via {route.gateway}" if route.gateway else ""
    hops = "".join(f" nexthop via {hop.gateway} oif #{hop.oif}" for hop in route.nexthops)
    return f"type {route.type} {route.dst}{via} oif #{route.oif}{hops} proto {route.proto}"


def _family(ip: str) -> int:
    return socket.AF_INET6 if ":" in ip else socket.AF_INET


def _neighbor(message: Any) -> Neighbor | None:
    if message.get("event") != "RTM_NEWNEIGH" or message.get("family") not in (
            socket.AF_INET, socket.AF_INET6):
        return None
    dst = message.get_attr("NDA_DST")
    if dst is None:
        return None
    mac = message.get_attr("NDA_LLADDR")
    return Neighbor(index=message["ifindex"], ip=str(ipaddress.ip_address(dst)),
                    mac=mac.lower() if isinstance(mac, str) else None,
                    state=message["state"], proto=message.get_attr("NDA_PROTOCOL") or 0)


def _prefix(address: Any, length: int) -> str | None:
    if address is None:
        return None
    return str(ipaddress.ip_network(f"{address}/{length}", strict=False))


def _rule(message: Any) -> Rule | None:
    if message.get("event") != "RTM_NEWRULE" or message.get("family") not in (
            socket.AF_INET, socket.AF_INET6):
        return None
    fwmark = message.get_attr("FRA_FWMARK")
    return Rule(
        family=message["family"], priority=message.get_attr("FRA_PRIORITY") or 0,
        src=_prefix(message.get_attr("FRA_SRC"), message["src_len"]),
        dst=_prefix(message.get_attr("FRA_DST"), message["dst_len"]),
        iif=message.get_attr("FRA_IIFNAME"), oif=message.get_attr("FRA_OIFNAME"),
        fwmark=fwmark, fwmask=message.get_attr("FRA_FWMASK") if fwmark is not None else None,
        table=message.get_attr("FRA_TABLE") or message["table"], action=message["action"],
        proto=message.get_attr("FRA_PROTOCOL") or 0)


def _rule_arguments(rule: Rule) -> dict[str, Any]:
    arguments: dict[str, Any] = {"family": rule.family, "priority": rule.priority,
                                 "action": rule.action, "FRA_PROTOCOL": rule.proto}
    if rule.table:
        arguments["table"] = rule.table
    for name, network in (("src", rule.src), ("dst", rule.dst)):
        if network is not None:
            parsed = ipaddress.ip_network(network)
            arguments[name] = str(parsed.network_address)
            arguments[f"{name}_len"] = parsed.prefixlen
    if rule.iif is not None:
        arguments["iifname"] = rule.iif
    if rule.oif is not None:
        arguments["oifname"] = rule.oif
    if rule.fwmark is not None:
        arguments["fwmark"] = rule.fwmark
        arguments["fwmask"] = rule.fwmask if rule.fwmask is not None else 0xFFFFFFFF
    return arguments

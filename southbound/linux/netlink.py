"""Netlink operations in one network namespace: links, addresses and routes over pyroute2.

``NetlinkClient`` owns one pyroute2 ``IPRoute`` handle, guarded by a lock (the scheduler may call
descriptors from any thread). It is the only module that talks to the kernel for configuration;
it turns kernel messages into small immutable records, maps ``NetlinkError`` onto the errors of
``southbound.linux.errors`` and makes operations idempotent:

* adding an address that exists, or a route identical to an existing kvmesh route: success;
* deleting a link, address or route that is already gone (ENODEV, ESRCH, EADDRNOTAVAIL): success.

The namespace is opened without ``O_CREAT``: a missing namespace raises
``NamespaceNotFoundError`` instead of being silently created (pyroute2's default).
"""

from __future__ import annotations

import errno
import ipaddress
import os
import socket
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from southbound.linux.errors import (
    ABSENT_ERRNOS,
    NamespaceNotFoundError,
    NetlinkOperationError,
    OwnershipError,
    UnsupportedLinkTypeError,
)

NETNS_DIR = "/run/netns"  # where `ip netns` and pyroute2 keep named namespaces
IFF_UP = 0x1
IFA_F_NODAD = 0x02
RT_SCOPE_NOWHERE = 255
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class VxlanInfo:
    vni: int | None
    local: str | None
    remote: str | None
    port: int | None
    device_index: int | None


@dataclass(frozen=True, slots=True)
class Link:
    """A link as the kernel reports it."""

    index: int
    name: str
    kind: str | None  # "veth", "bridge", "tun", "vxlan", "macvlan"; None for physical / loopback
    group: int
    mtu: int
    mac: str | None
    up: bool
    master: int | None  # ifindex of the bridge it is enslaved to
    link: int | None  # veth peer / macvlan parent ifindex (IFLA_LINK)
    macvlan_mode: str | None = None
    vxlan: VxlanInfo | None = None
    tap: bool = False


@dataclass(frozen=True, slots=True)
class Address:
    index: int
    cidr: str  # "10.0.0.1/24", normalised
    scope: int


@dataclass(frozen=True, slots=True)
class Route:
    table: int
    dst: str  # network, normalised ("10.1.0.0/16")
    oif: int | None
    gateway: str | None
    metric: int
    scope: int
    proto: int

    @property
    def family(self) -> int:
        return socket.AF_INET6 if ":" in self.dst else socket.AF_INET


def require_netns(netns: str) -> None:
    """Fail clearly when a named namespace does not exist (pyroute2 would create it, or fail
    obscurely for the event socket)."""
    if not os.path.exists(os.path.join(NETNS_DIR, netns)):
        raise NamespaceNotFoundError(netns)


class NetlinkClient:
    """One rtnetlink handle in one namespace (None: the caller's own), safe to share by threads."""

    def __init__(self, netns: str | None = None) -> None:
        self.netns = netns
        self._lock = threading.Lock()
        self.calls = 0
        self.errors = 0
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

    def close(self) -> None:
        with self._lock:
            self._ipr.close()

    # -- plumbing -----------------------------------------------------------------------------

    def _call(self, operation: str, function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        with self._lock:
            self.calls += 1
            try:
                return function(*args, **kwargs)
            except NetlinkError as exc:
                self.errors += 1
                raise NetlinkOperationError(operation, exc.code, _netlink_detail(exc)) from exc
            except OSError as exc:
                self.errors += 1
                code = exc.errno or errno.EIO
                raise NetlinkOperationError(operation, code, str(exc)) from exc

    @staticmethod
    def _absent_ok(exc: NetlinkOperationError) -> bool:
        return exc.code in ABSENT_ERRNOS

    # -- links --------------------------------------------------------------------------------

    def dump_links(self) -> list[Link]:
        return [link_from_message(m) for m in self._call("dump links", self._ipr.link, "dump")]

    def get_link(self, name: str) -> Link | None:
        try:
            found = self._call(f"get link {name}", self._ipr.link, "get", ifname=name)
        except NetlinkOperationError as exc:
            if exc.code in (errno.ENODEV, errno.ENOENT):
                return None
            raise
        return link_from_message(found[0]) if found else None

    def get_link_by_index(self, index: int) -> Link | None:
        try:
            found = self._call(f"get link #{index}", self._ipr.link, "get", index=index)
        except NetlinkOperationError as exc:
            if exc.code in (errno.ENODEV, errno.ENOENT):
                return None
            raise
        return link_from_message(found[0]) if found else None

    def create_link(self, name: str, kind: str, **attributes: Any) -> Link | None:
        """Create a link; return it as echoed by the kernel (None when nothing was echoed).

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
                return link_from_message(message)
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
        result = []
        for message in self._call("dump addresses", self._ipr.addr, "dump"):
            address = address_from_message(message)
            if address is not None:
                result.append(address)
        return result

    def add_address(self, index: int, cidr: str, description: str) -> bool:
        """Add an address; False when it already existed (idempotent)."""
        interface = ipaddress.ip_interface(cidr)
        extra: dict[str, Any] = {}
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
        result = []
        for message in self._call("dump routes", self._ipr.route, "dump"):
            route = route_from_message(message)
            if route is not None and (proto is None or route.proto == proto):
                result.append(route)
        return result

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
        }
        if route.oif is not None:
            arguments["oif"] = route.oif
        if route.gateway is not None:
            arguments["gateway"] = route.gateway
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
        """Change gateway/scope of a route in place (same table, destination and metric)."""
        self._call(description, self._ipr.route, "replace", **self._route_arguments(route))

    def delete_route(self, route: Route, description: str) -> bool:
        """Delete a route (matched on table, dst, metric, oif and protocol); False if absent."""
        arguments = self._route_arguments(route)
        arguments.pop("gateway", None)
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


# -- message conversion ---------------------------------------------------------------------


def _netlink_detail(exc: NetlinkError) -> str:
    text = str(exc.args[1]) if len(exc.args) > 1 else str(exc)
    return text


def link_from_message(message: Any) -> Link:
    info = message.get("IFLA_LINKINFO")
    kind = info.get("IFLA_INFO_KIND") if info is not None else None
    data = info.get("IFLA_INFO_DATA") if info is not None else None
    vxlan = None
    macvlan_mode = None
    tap = False
    if kind == "vxlan" and data is not None:
        vxlan = VxlanInfo(
            vni=data.get("IFLA_VXLAN_ID"),
            local=data.get("IFLA_VXLAN_LOCAL") or data.get("IFLA_VXLAN_LOCAL6"),
            remote=data.get("IFLA_VXLAN_GROUP") or data.get("IFLA_VXLAN_GROUP6"),
            port=data.get("IFLA_VXLAN_PORT"),
            device_index=data.get("IFLA_VXLAN_LINK") or None,
        )
    elif kind == "macvlan" and data is not None:
        macvlan_mode = data.get("IFLA_MACVLAN_MODE")
    elif kind == "tun" and data is not None:
        tap = data.get("IFLA_TUN_TYPE") == 2  # IFF_TAP
    link = message.get("link")
    master = message.get("master")
    return Link(
        index=message["index"],
        name=message.get("ifname"),
        kind=kind,
        group=message.get("group") or 0,
        mtu=message.get("mtu") or 0,
        mac=(message.get("address") or None),
        up=bool(message.get("flags", 0) & IFF_UP),
        master=master or None,
        link=link or None,
        macvlan_mode=macvlan_mode,
        vxlan=vxlan,
        tap=tap,
    )


def address_from_message(message: Any) -> Address | None:
    address = message.get("address") or message.get("local")
    if address is None:
        return None
    local = message.get("local")
    if message.get("family") == socket.AF_INET and local:
        address = local  # for point-to-point links IFA_ADDRESS is the peer; IFA_LOCAL is ours
    cidr = str(ipaddress.ip_interface(f"{address}/{message.get('prefixlen')}"))
    return Address(index=message.get("index"), cidr=cidr, scope=message.get("scope") or 0)


def route_from_message(message: Any) -> Route | None:
    family = message.get("family")
    if family not in (socket.AF_INET, socket.AF_INET6) or message.get("type") != 1:
        return None  # not a unicast route (local, broadcast, multicast, ...)
    if message.get("RTA_MULTIPATH") is not None:
        return None
    dst = message.get("dst")
    if dst is None:
        dst = "0.0.0.0" if family == socket.AF_INET else "::"
    network = ipaddress.ip_network(f"{dst}/{message.get('dst_len')}", strict=False)
    table = message.get("RTA_TABLE") or message.get("table")
    return Route(
        table=table,
        dst=str(network),
        oif=message.get("oif"),
        gateway=message.get("gateway"),
        metric=message.get("priority") or 0,
        scope=message.get("scope") or 0,
        proto=message.get("proto") or 0,
    )


def _describe_route(route: Route) -> str:
    via = f" via {route.gateway}" if route.gateway else ""
    return f"{route.dst}{via} oif #{route.oif} proto {route.proto}"


def index_by_name(links: Iterable[Link]) -> dict[str, int]:
    return {link.name: link.index for link in links}

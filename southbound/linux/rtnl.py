"""Fast rtnetlink dumps: raw requests and a minimal decoder for links, addresses and routes.

Retrieve reads the whole namespace (every link, address and route) on each resync. pyroute2
decodes every attribute of every message into Python objects, which costs about 0.5 ms per link
(1 s for 2000 links). The records kvmesh needs use a handful of attributes, so this module sends
the dump requests itself and decodes only those (``struct`` over a ``memoryview``): a dump of
2000 links takes a few tens of milliseconds. It is also what the watcher uses to decode events.

Message layouts are the kernel's UAPI (``linux/rtnetlink.h``, ``linux/if_link.h``,
``linux/if_addr.h``).
"""

from __future__ import annotations

import errno
import ipaddress
import logging
import socket
import struct
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from southbound.linux.errors import NetlinkOperationError
from southbound.linux.records import Address, Link, NextHop, Route, VxlanInfo, sorted_nexthops

T = TypeVar("T")
log = logging.getLogger(__name__)

NLM_F_REQUEST = 0x1
NLM_F_MULTI = 0x2
NLM_F_DUMP = 0x300
NLM_F_DUMP_INTR = 0x10
NLMSG_ERROR = 2
NLMSG_DONE = 3
RTM_NEWLINK, RTM_DELLINK, RTM_GETLINK = 16, 17, 18
RTM_NEWADDR, RTM_DELADDR, RTM_GETADDR = 20, 21, 22
RTM_NEWROUTE, RTM_GETROUTE = 24, 26

NLMSGHDR = struct.Struct("=IHHII")  # length, type, flags, seq, pid
IFINFOMSG = struct.Struct("=BxHiII")  # family, type, index, flags, change
IFADDRMSG = struct.Struct("=BBBBI")  # family, prefixlen, flags, scope, index
# family, dst_len, src_len, tos, table, protocol, scope, type, flags
RTMSG = struct.Struct("=BBBBBBBBI")
RTATTR = struct.Struct("=HH")
U32 = struct.Struct("=I")
BE16 = struct.Struct("!H")

IFF_UP = 0x1
# if_link.h
IFLA_ADDRESS, IFLA_IFNAME, IFLA_MTU, IFLA_LINK, IFLA_MASTER = 1, 3, 4, 5, 10
IFLA_LINKINFO, IFLA_GROUP, IFLA_LINK_NETNSID = 18, 27, 37
IFLA_INFO_KIND, IFLA_INFO_DATA = 1, 2
IFLA_VXLAN_ID, IFLA_VXLAN_GROUP, IFLA_VXLAN_LINK, IFLA_VXLAN_LOCAL = 1, 2, 3, 4
IFLA_VXLAN_PORT, IFLA_VXLAN_GROUP6, IFLA_VXLAN_LOCAL6 = 15, 16, 17
IFLA_MACVLAN_MODE = 1
IFLA_TUN_TYPE = 3  # after IFLA_TUN_OWNER, IFLA_TUN_GROUP
IFF_TAP = 2
MACVLAN_MODES = {1: "private", 2: "vepa", 4: "bridge", 8: "passthru", 16: "source"}
# if_addr.h
IFA_ADDRESS, IFA_LOCAL, IFA_PROTO = 1, 2, 11
# rtnetlink.h
RTA_DST, RTA_OIF, RTA_GATEWAY, RTA_PRIORITY, RTA_PREFSRC = 1, 4, 5, 6, 7
RTA_MULTIPATH, RTA_TABLE = 9, 15
RTN_UNICAST, RTN_BLACKHOLE, RTN_UNREACHABLE, RTN_PROHIBIT = 1, 6, 7, 8
# The route types the route model covers; others (local, broadcast, anycast...) are the kernel's.
ROUTE_TYPES = frozenset({RTN_UNICAST, RTN_BLACKHOLE, RTN_UNREACHABLE, RTN_PROHIBIT})
RTNEXTHOP = struct.Struct("=HBBi")  # len, flags, hops, ifindex

# One datagram per read: the kernel sizes dump datagrams to the reader's buffer, 32 KiB at most
# (netlink's cap), and a single reply is one message of a few KiB. Twice the largest; a datagram
# that would not fit is an error (`_receive`), never a silently cut one. (It was 1 MiB, all of
# it resident in every agent: issue 21.)
RECEIVE_BUFFER = 64 << 10
DUMP_ATTEMPTS = 3


def _align(length: int) -> int:
    return (length + 3) & ~3


def messages(data: memoryview) -> Iterator[tuple[int, int, int, int, int]]:
    """(type, flags, seq, offset, length) of each netlink message in one datagram."""
    offset = 0
    size = len(data)
    while offset + NLMSGHDR.size <= size:
        length, kind, flags, seq, _pid = NLMSGHDR.unpack_from(data, offset)
        if length < NLMSGHDR.size or offset + length > size:
            return
        yield kind, flags, seq, offset, length
        offset += _align(length)


def attributes(data: memoryview, start: int, end: int) -> dict[int, tuple[int, int]]:
    """Attribute type -> (payload offset, payload length) for the attributes in [start, end)."""
    found: dict[int, tuple[int, int]] = {}
    position = start
    while position + 4 <= end:
        length, kind = RTATTR.unpack_from(data, position)
        if length < 4:
            break
        found[kind & 0x3FFF] = (position + 4, length - 4)
        position += _align(length)
    return found


def _u32(data: memoryview, where: tuple[int, int]) -> int:
    return int(U32.unpack_from(data, where[0])[0])


def _text(data: memoryview, where: tuple[int, int]) -> str:
    offset, length = where
    return bytes(data[offset : offset + length]).split(b"\0", 1)[0].decode(errors="replace")


def _ip(data: memoryview, where: tuple[int, int]) -> str:
    """Text of a raw IPv4/IPv6 address (inet_ntop: the same canonical text as ``ipaddress``)."""
    offset, length = where
    family = socket.AF_INET6 if length == 16 else socket.AF_INET
    return socket.inet_ntop(family, bytes(data[offset : offset + length]))


def _mac(data: memoryview, where: tuple[int, int]) -> str:
    offset, length = where
    return ":".join(f"{byte:02x}" for byte in bytes(data[offset : offset + length]))


def parse_link(data: memoryview, offset: int, length: int) -> Link:
    """Decode an RTM_NEWLINK message (as received in a dump or an event)."""
    _family, _type, index, flags, _change = IFINFOMSG.unpack_from(data, offset + 16)
    attrs = attributes(data, offset + 16 + IFINFOMSG.size, offset + length)
    kind = None
    vxlan = None
    macvlan_mode = None
    tap = False
    info = attrs.get(IFLA_LINKINFO)
    if info is not None:
        nested = attributes(data, info[0], info[0] + info[1])
        if IFLA_INFO_KIND in nested:
            kind = _text(data, nested[IFLA_INFO_KIND])
        if IFLA_INFO_DATA in nested:
            where = nested[IFLA_INFO_DATA]
            payload = attributes(data, where[0], where[0] + where[1])
            if kind == "vxlan":
                vxlan = _vxlan(data, payload)
            elif kind == "macvlan" and IFLA_MACVLAN_MODE in payload:
                macvlan_mode = MACVLAN_MODES.get(_u32(data, payload[IFLA_MACVLAN_MODE]))
            elif kind == "tun" and IFLA_TUN_TYPE in payload:
                tap = data[payload[IFLA_TUN_TYPE][0]] == IFF_TAP
    # IFLA_LINK of a veth whose peer lives in another namespace is an ifindex *there*.
    peer_elsewhere = IFLA_LINK_NETNSID in attrs
    link = _u32(data, attrs[IFLA_LINK]) if IFLA_LINK in attrs and not peer_elsewhere else 0
    master = _u32(data, attrs[IFLA_MASTER]) if IFLA_MASTER in attrs else 0
    return Link(
        index=index,
        name=_text(data, attrs[IFLA_IFNAME]) if IFLA_IFNAME in attrs else "",
        kind=kind,
        group=_u32(data, attrs[IFLA_GROUP]) if IFLA_GROUP in attrs else 0,
        mtu=_u32(data, attrs[IFLA_MTU]) if IFLA_MTU in attrs else 0,
        mac=_mac(data, attrs[IFLA_ADDRESS]) if IFLA_ADDRESS in attrs else None,
        up=bool(flags & IFF_UP),
        master=master or None,
        link=(link if link != index else None) or None,
        macvlan_mode=macvlan_mode,
        vxlan=vxlan,
        tap=tap,
    )


def _vxlan(data: memoryview, payload: dict[int, tuple[int, int]]) -> VxlanInfo:
    local = payload.get(IFLA_VXLAN_LOCAL) or payload.get(IFLA_VXLAN_LOCAL6)
    remote = payload.get(IFLA_VXLAN_GROUP) or payload.get(IFLA_VXLAN_GROUP6)
    port = payload.get(IFLA_VXLAN_PORT)
    device = _u32(data, payload[IFLA_VXLAN_LINK]) if IFLA_VXLAN_LINK in payload else 0
    return VxlanInfo(
        vni=_u32(data, payload[IFLA_VXLAN_ID]) if IFLA_VXLAN_ID in payload else None,
        local=_ip(data, local) if local else None,
        remote=_ip(data, remote) if remote else None,
        port=int(BE16.unpack_from(data, port[0])[0]) if port else None,
        device_index=device or None,
    )


def link_identity(data: memoryview, offset: int, length: int) -> tuple[int, int, str]:
    """(ifindex, group, name) of a link message: enough to skip kvmesh's own links cheaply.

    Stops scanning at the group attribute, which the kernel puts among the first few."""
    index = IFINFOMSG.unpack_from(data, offset + 16)[2]
    group = 0
    name = ""
    position = offset + 16 + IFINFOMSG.size
    end = offset + length
    while position + 4 <= end:
        attr_length, kind = RTATTR.unpack_from(data, position)
        if attr_length < 4:
            break
        kind &= 0x3FFF
        if kind == IFLA_IFNAME:
            name = _text(data, (position + 4, attr_length - 4))
        elif kind == IFLA_GROUP:
            group = int(U32.unpack_from(data, position + 4)[0])
            if name:
                break
        position += _align(attr_length)
    return index, group, name


def address_index(data: memoryview, offset: int) -> int:
    return int(IFADDRMSG.unpack_from(data, offset + 16)[4])


def parse_address(data: memoryview, offset: int, length: int) -> Address | None:
    """Decode an RTM_NEWADDR/RTM_DELADDR message."""
    family, prefixlen, _flags, scope, index = IFADDRMSG.unpack_from(data, offset + 16)
    attrs = attributes(data, offset + 16 + IFADDRMSG.size, offset + length)
    # IFA_LOCAL is the local address; IFA_ADDRESS is the peer on point-to-point links.
    where = attrs.get(IFA_LOCAL) if family == socket.AF_INET else None
    where = where or attrs.get(IFA_ADDRESS)
    if where is None:
        return None
    cidr = f"{_ip(data, where)}/{prefixlen}"
    proto = data[attrs[IFA_PROTO][0]] if IFA_PROTO in attrs else 0
    return Address(index=index, cidr=cidr, scope=scope, proto=proto)


def parse_route(data: memoryview, offset: int, length: int,
                proto: int | None = None) -> Route | None:
    """Decode an IPv4/IPv6 route of a modelled type (unicast, single or multipath; blackhole,
    unreachable, prohibit); None for other routes, or another protocol."""
    family, dst_len, _src, _tos, table, protocol, scope, kind, _flags = RTMSG.unpack_from(
        data, offset + 16)
    if proto is not None and protocol != proto:
        return None
    if family not in (socket.AF_INET, socket.AF_INET6) or kind not in ROUTE_TYPES:
        return None
    attrs = attributes(data, offset + 16 + RTMSG.size, offset + length)
    if RTA_DST in attrs:
        dst = _ip(data, attrs[RTA_DST])
    else:
        dst = "0.0.0.0" if family == socket.AF_INET else "::"
    if RTA_DST in attrs and dst_len < (32 if family == socket.AF_INET else 128):
        # The kernel keeps destinations network-aligned; normalise defensively all the same.
        dst = str(ipaddress.ip_network(f"{dst}/{dst_len}", strict=False).network_address)
    nexthops = _nexthops(data, attrs[RTA_MULTIPATH]) if RTA_MULTIPATH in attrs else ()
    single = kind == RTN_UNICAST and not nexthops
    return Route(
        table=_u32(data, attrs[RTA_TABLE]) if RTA_TABLE in attrs else table,
        dst=f"{dst}/{dst_len}",
        # A typed IPv6 route reports the loopback as its device: not part of the route.
        oif=_u32(data, attrs[RTA_OIF]) if single and RTA_OIF in attrs else None,
        gateway=_ip(data, attrs[RTA_GATEWAY]) if single and RTA_GATEWAY in attrs else None,
        metric=_u32(data, attrs[RTA_PRIORITY]) if RTA_PRIORITY in attrs else 0,
        scope=scope,
        proto=protocol,
        type=kind,
        src=_ip(data, attrs[RTA_PREFSRC]) if RTA_PREFSRC in attrs else None,
        nexthops=nexthops,
    )


def _nexthops(data: memoryview, where: tuple[int, int]) -> tuple[NextHop, ...]:
    """The ``struct rtnexthop`` entries of an RTA_MULTIPATH attribute."""
    found = []
    position, end = where[0], where[0] + where[1]
    while position + RTNEXTHOP.size <= end:
        size, _flags, hops, index = RTNEXTHOP.unpack_from(data, position)
        if size < RTNEXTHOP.size:
            break
        nested = attributes(data, position + RTNEXTHOP.size, position + size)
        gateway = _ip(data, nested[RTA_GATEWAY]) if RTA_GATEWAY in nested else None
        found.append(NextHop(oif=index, gateway=gateway, weight=hops + 1))
        position += _align(size)
    return sorted_nexthops(found)


class RtnlReader:
    """Sends read requests (dumps, single link lookups) on a raw rtnetlink socket and decodes
    the replies.

    ``sock`` is a connected AF_NETLINK/NETLINK_ROUTE socket object (with ``send`` and
    ``recv_into``) in the right namespace; the caller serialises use."""

    def __init__(self, sock: Any) -> None:
        self._sock = sock
        self._seq = 0
        self._buffer = bytearray(RECEIVE_BUFFER)

    def links(self) -> list[Link]:
        return self._dump("dump links", RTM_GETLINK, struct.pack("=BxHiII", 0, 0, 0, 0, 0),
                          RTM_NEWLINK, parse_link)

    def addresses(self) -> list[Address]:
        found = self._dump("dump addresses", RTM_GETADDR, struct.pack("=BBBBI", 0, 0, 0, 0, 0),
                           RTM_NEWADDR, parse_address)
        return [address for address in found if address is not None]

    def routes(self, proto: int | None = None) -> list[Route]:
        found = self._dump(
            "dump routes", RTM_GETROUTE, RTMSG.pack(0, 0, 0, 0, 0, 0, 0, 0, 0), RTM_NEWROUTE,
            lambda data, offset, length: parse_route(data, offset, length, proto))
        return [route for route in found if route is not None]

    def link(self, name: str | None = None, index: int | None = None) -> Link | None:
        """One link by name or ifindex (None when there is no such link)."""
        payload = IFINFOMSG.pack(0, 0, index or 0, 0, 0)
        if name is not None:
            encoded = name.encode() + b"\0"
            payload += RTATTR.pack(4 + len(encoded), IFLA_IFNAME) + encoded
            payload += b"\0" * (_align(len(payload)) - len(payload))
        operation = f"get link {name if name is not None else f'#{index}'}"
        seq = self._send(RTM_GETLINK, NLM_F_REQUEST, payload)
        view = memoryview(self._buffer)
        while True:
            size = self._receive(operation)
            for kind, _flags, reply_seq, offset, length in messages(view[:size]):
                if reply_seq != seq:
                    continue
                if kind == RTM_NEWLINK:
                    return parse_link(view, offset, length)
                if kind == NLMSG_ERROR:
                    code = -struct.unpack_from("=i", view, offset + 16)[0]
                    if code in (errno.ENODEV, errno.ENOENT):
                        return None
                    raise NetlinkOperationError(operation, code)

    def _receive(self, operation: str) -> int:
        """One datagram into the buffer; its size. MSG_TRUNC: netlink then returns the
        datagram's real length, so one larger than the buffer is seen, not parsed cut."""
        size: int = self._sock.recv_into(self._buffer, 0, socket.MSG_TRUNC)
        if size > len(self._buffer):
            raise NetlinkOperationError(operation, errno.EMSGSIZE,
                                        f"a {size}-byte reply does not fit {len(self._buffer)}")
        return size

    def _send(self, request: int, flags: int, payload: bytes) -> int:
        self._seq = (self._seq + 1) & 0xFFFFFFFF or 1
        self._sock.send(NLMSGHDR.pack(NLMSGHDR.size + len(payload), request, flags, self._seq, 0)
                        + payload)
        return self._seq

    def _dump(self, operation: str, request: int, payload: bytes, reply: int,
              parse: Callable[[memoryview, int, int], T]) -> list[T]:
        result: list[T] = []
        for _attempt in range(DUMP_ATTEMPTS):
            result, interrupted = self._dump_once(operation, request, payload, reply, parse)
            if not interrupted:
                return result
        # The namespace keeps changing (e.g. IPv6 autoconfiguration on thousands of new links).
        # An interrupted dump may miss or repeat an entry that changed meanwhile: at worst the
        # scheduler sees drift that is not there and re-applies a value, which is idempotent.
        log.debug("%s: still interrupted after %d attempts; using the last result",
                  operation, DUMP_ATTEMPTS)
        return result

    def _dump_once(self, operation: str, request: int, payload: bytes, reply: int,
                   parse: Callable[[memoryview, int, int], T]) -> tuple[list[T], bool]:
        seq = self._send(request, NLM_F_REQUEST | NLM_F_DUMP, payload)
        result: list[T] = []
        interrupted = False
        view = memoryview(self._buffer)
        while True:
            size = self._receive(operation)
            for kind, flags, reply_seq, offset, length in messages(view[:size]):
                if reply_seq != seq:
                    continue  # a late reply of an abandoned request
                if flags & NLM_F_DUMP_INTR:
                    interrupted = True
                if kind == NLMSG_DONE:
                    return result, interrupted
                if kind == NLMSG_ERROR:
                    code = -struct.unpack_from("=i", view, offset + 16)[0]
                    if code == 0:
                        continue
                    raise NetlinkOperationError(operation, code)
                if kind == reply:
                    result.append(parse(view, offset, length))

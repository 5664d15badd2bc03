"""Linux-CP interface pairs (the linux-cp plugin: lcp_interface.c, lcp_api.c), with the host
interface made for real.

`lcp_itf_pair_add_del_v2` pairs a VPP interface (the "phy") with a Linux interface: VPP makes a
tap (a VPP interface of its own, the pair's host_sw_if_index) whose Linux end is `host_if_name`
in network namespace `netns` (the emulator's own when empty), with the phy's MAC and L3 MTU. The
emulator makes that Linux end as a real tap device (`ip tuntap`), so the Linux southbound sees
it appear in the namespace as a real kernel would show it, and removes it with the pair, when
the phy is deleted, and when this emulated VPP goes away (its restart or stop): a real VPP's
taps go with its process.

A sub-interface gets no tap of its own: its Linux end is a VLAN (802.1Q, or 802.1ad for a dot1ad
outer tag) on its parent pair's Linux end - for an inner tag, on the outer tag's sub-interface's
pair - and its VPP end a sub-interface of the parent pair's tap with the same id and tags; a
Linux link of that name already there is taken as it is, as VPP does. Both go with the pair.

VPP's refusals: a phy already paired (VALUE_EXIST), an unknown phy or a pair to delete that does
not exist (INVALID_SW_IF_INDEX), a host name that is no Linux interface name and a tap for a
non-ethernet phy (INVALID_ARGUMENT). A host device that cannot be made (a missing namespace, a
name taken there) is SYSCALL_ERROR_1 and leaves nothing behind. For a sub-interface: its parent
without a pair (INVALID_SW_IF_INDEX); no exact match (no addresses on it), an inner tag whose outer
tag has no pair, or a VLAN Linux would not make (INVALID_ARGUMENT).
"""

from __future__ import annotations

import logging
import re
import subprocess
from dataclasses import dataclass
from typing import Any

from kvmesh.vppemu import errors as E
from kvmesh.vppemu.errors import ApiError
from kvmesh.vppemu.plane import ADMIN_UP, SUB_DOT1AD, SUB_EXACT_MATCH, Plane

log = logging.getLogger("kvmesh.vppemu.lcp")

HOST_TAP, HOST_TUN = 0, 1
# lcp_validate_if_name: what Linux takes as an interface name (IFNAMSIZ - 1, no '/', no space).
HOST_NAME_RE = re.compile(r"[^/\s:]{1,15}")
INVALID_INDEX = 0xFFFFFFFF


@dataclass(frozen=True)
class Pair:
    phy: int
    host_sw_if_index: int
    host_if_name: str
    host_type: int
    netns: str
    vif_index: int  # the Linux ifindex of the host end


def _ip(netns: str, *args: str) -> subprocess.CompletedProcess[str]:
    command = ["ip", *(("-n", netns) if netns else ()), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=10, check=False)


class LinuxCp:
    def __init__(self, dataplane: Plane) -> None:
        self._dp = dataplane
        self.pairs: dict[int, Pair] = {}  # phy sw_if_index -> pair

    def add(self, phy: int, host_if_name: str, host_type: int, netns: str) -> int:
        if phy in self.pairs:
            raise ApiError(E.VALUE_EXIST, f"sw_if_index {phy} is paired already")
        iface = self._dp.interface(phy)
        if not HOST_NAME_RE.fullmatch(host_if_name):
            raise ApiError(E.INVALID_ARGUMENT, f"invalid host-if-name {host_if_name!r}")
        ethernet = any(iface.mac) and iface.kind not in ("gre", "ipip", "local")
        if host_type == HOST_TAP and not ethernet:
            raise ApiError(E.INVALID_ARGUMENT, "no TAP for a non-ethernet interface; use tun")
        if iface.sub is not None:
            host, vif_index = self._add_sub(iface, host_if_name, netns)
        else:
            host, vif_index = self._add_tap(iface, host_if_name, host_type, netns)
        self.pairs[phy] = Pair(phy, host, host_if_name, host_type, netns, vif_index)
        self._dp.set_flags(host, ADMIN_UP)  # VPP keeps its end of the pair up
        return host

    def _add_tap(self, iface: Any, host_if_name: str, host_type: int,
                 netns: str) -> tuple[int, int]:
        """A pair's tap and its Linux end; (host sw_if_index, Linux ifindex)."""
        mtu = iface.sw_mtu[0] or 9216
        vif_index = self._make_host(host_if_name, host_type, netns, iface.mac, mtu)
        try:
            host = self._dp.create_tap(INVALID_INDEX, None, 256, 256, host_if_name, mtu,
                                       host_namespace=netns, host_mac=iface.mac)
        except ApiError:
            self._remove_host(host_if_name, netns)
            raise
        return host, vif_index

    def _add_sub(self, iface: Any, host_if_name: str, netns: str) -> tuple[int, int]:
        """A sub-interface's pair (lcp_itf_pair_create's sub-interface branch): the Linux VLAN
        and VPP's sub-interface of the parent pair's tap; (host sw_if_index, Linux ifindex)."""
        sub = iface.sub
        if not sub.flags & SUB_EXACT_MATCH:
            raise ApiError(E.INVALID_ARGUMENT, "no LCP for a sub-interface without exact-match")
        parent = self.pairs.get(sub.parent)
        if parent is None:
            raise ApiError(E.INVALID_SW_IF_INDEX, f"no LCP for the parent of {iface.name}")
        vif_index = self._ifindex(host_if_name, netns)
        if vif_index is None:
            link, vlan, proto = parent.host_if_name, sub.outer_vlan, "802.1Q"
            if sub.inner_vlan:
                outer = self._outer_pair(sub)
                if outer is None:
                    raise ApiError(E.INVALID_ARGUMENT, f"no LCP for outer VLAN {sub.outer_vlan}")
                link, vlan = outer.host_if_name, sub.inner_vlan
            elif sub.flags & SUB_DOT1AD:
                proto = "802.1ad"
            made = _ip(netns, "link", "add", "link", link, "name", host_if_name, "type", "vlan",
                       "protocol", proto, "id", str(vlan))
            vif_index = self._ifindex(host_if_name, netns)
            if made.returncode != 0 or vif_index is None:
                raise ApiError(E.INVALID_ARGUMENT, f"cannot make VLAN {host_if_name}: "
                                                   f"{made.stderr.strip()}")
        try:
            host = self._dp.create_subif(parent.host_sw_if_index, sub.sub_id, sub.flags,
                                         sub.outer_vlan, sub.inner_vlan)
        except ApiError as exc:
            raise ApiError(E.INVALID_ARGUMENT, f"cannot make the tap's sub-interface: {exc}") \
                from exc
        return host, vif_index

    def _outer_pair(self, sub: Any) -> Pair | None:
        """The pair of the one-tag exact-match sub-interface of the same parent and outer tag
        (lcp_itf_pair_find_by_outer_vlan)."""
        for pair in self.pairs.values():
            other = self._dp.interfaces[pair.phy].sub
            if (other is not None and other.parent == sub.parent and not other.inner_vlan
                    and other.outer_vlan == sub.outer_vlan
                    and other.flags & SUB_DOT1AD == sub.flags & SUB_DOT1AD):
                return pair
        return None

    @staticmethod
    def _ifindex(name: str, netns: str) -> int | None:
        shown = _ip(netns, "-o", "link", "show", "dev", name)
        return int(shown.stdout.split(":", 1)[0]) if shown.returncode == 0 else None

    def delete(self, phy: int) -> None:
        pair = self.pairs.get(phy)
        if pair is None:
            raise ApiError(E.INVALID_SW_IF_INDEX, f"sw_if_index {phy} has no pair")
        self._forget(pair)

    def forget_interface(self, sw_if_index: int) -> None:
        """A phy deleted takes its pair with it."""
        pair = self.pairs.get(sw_if_index)
        if pair is not None:
            self._forget(pair)

    def destroy_all(self) -> None:
        """This VPP is going away: its host devices go too (the dataplane itself is dropped)."""
        for pair in list(self.pairs.values()):
            self.pairs.pop(pair.phy, None)
            self._remove_host(pair.host_if_name, pair.netns)

    def _forget(self, pair: Pair) -> None:
        del self.pairs[pair.phy]
        self._remove_host(pair.host_if_name, pair.netns)
        host = self._dp.interfaces.get(pair.host_sw_if_index)
        if host is not None and host.sub is not None:
            self._dp.delete_subif(host.sw_if_index)
        elif host is not None:
            self._dp.delete_tap(host.sw_if_index)

    @staticmethod
    def _make_host(name: str, host_type: int, netns: str, mac: bytes, mtu: int) -> int:
        mode = "tap" if host_type == HOST_TAP else "tun"
        made = _ip(netns, "tuntap", "add", "dev", name, "mode", mode)
        if made.returncode != 0:
            raise ApiError(E.SYSCALL_ERROR_1, f"cannot make {name} in {netns or 'own'} "
                                              f"namespace: {made.stderr.strip()}")
        settings = ["mtu", str(mtu)]
        if host_type == HOST_TAP:
            settings = ["address", mac.hex(":"), *settings]
        configured = _ip(netns, "link", "set", "dev", name, *settings)
        vif_index = LinuxCp._ifindex(name, netns)
        if configured.returncode != 0 or vif_index is None:
            _ip(netns, "link", "del", "dev", name)
            raise ApiError(E.SYSCALL_ERROR_1, f"cannot set up {name}: "
                                              f"{configured.stderr.strip() or 'link gone'}")
        return vif_index

    @staticmethod
    def _remove_host(name: str, netns: str) -> None:
        removed = _ip(netns, "link", "del", "dev", name)
        if removed.returncode != 0:
            log.info("host interface %s (%s): %s", name, netns or "own namespace",
                     removed.stderr.strip())

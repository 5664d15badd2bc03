"""Linux-CP interface pairs (the linux-cp plugin: lcp_interface.c, lcp_api.c), with the host
interface made for real.

`lcp_itf_pair_add_del_v2` pairs a VPP interface (the "phy") with a Linux interface: VPP makes a
tap (a VPP interface of its own, the pair's host_sw_if_index) whose Linux end is `host_if_name`
in network namespace `netns` (the emulator's own when empty), with the phy's MAC and L3 MTU. The
emulator makes that Linux end as a real tap device (`ip tuntap`), so the Linux southbound sees
it appear in the namespace as a real kernel would show it, and removes it with the pair, when
the phy is deleted, and when this emulated VPP goes away (its restart or stop): a real VPP's
taps go with its process.

VPP's refusals: a phy already paired (VALUE_EXIST), an unknown phy or a pair to delete that does
not exist (INVALID_SW_IF_INDEX), a host name that is no Linux interface name and a tap for a
non-ethernet phy (INVALID_ARGUMENT). A host device that cannot be made (a missing namespace, a
name taken there) is SYSCALL_ERROR_1 and leaves nothing behind.
"""

from __future__ import annotations

import logging
import re
import subprocess
from dataclasses import dataclass

from kvmesh.vppemu import errors as E
from kvmesh.vppemu.errors import ApiError
from kvmesh.vppemu.plane import Plane

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
        mtu = iface.sw_mtu[0] or 9216
        vif_index = self._make_host(host_if_name, host_type, netns, iface.mac, mtu)
        try:
            host = self._dp.create_tap(INVALID_INDEX, None, 256, 256, host_if_name, mtu,
                                       host_namespace=netns, host_mac=iface.mac)
        except ApiError:
            self._remove_host(host_if_name, netns)
            raise
        self.pairs[phy] = Pair(phy, host, host_if_name, host_type, netns, vif_index)
        return host

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
        if pair.host_sw_if_index in self._dp.interfaces:
            self._dp.delete_tap(pair.host_sw_if_index)
        self._remove_host(pair.host_if_name, pair.netns)

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
        shown = _ip(netns, "-o", "link", "show", "dev", name)
        if configured.returncode != 0 or shown.returncode != 0:
            _ip(netns, "link", "del", "dev", name)
            raise ApiError(E.SYSCALL_ERROR_1, f"cannot set up {name}: "
                                              f"{(configured.stderr or shown.stderr).strip()}")
        return int(shown.stdout.split(":", 1)[0])

    @staticmethod
    def _remove_host(name: str, netns: str) -> None:
        removed = _ip(netns, "link", "del", "dev", name)
        if removed.returncode != 0:
            log.info("host interface %s (%s): %s", name, netns or "own namespace",
                     removed.stderr.strip())

"""The VPP calls of the proxy ARP, L3XC and IPv6 ND models (arp.api, l3xc.api, ip6_nd.api of
VPP 24.06, and ip.api's `sw_interface_ip6_enable_disable`), in the models' canonical form."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from southbound.vpp.binapi import RoutePath, fib_path, route_path
from southbound.vpp.errors import VALUE_EXIST, VppApiError

if TYPE_CHECKING:
    from southbound.vpp.connection import VppConnection

ANY = 0xFFFFFFFF
INFINITE = 0xFFFFFFFF


@dataclass(frozen=True)
class CrossConnect:
    sw_if_index: int
    is_ip6: bool  # from the paths: VPP leaves l3xc_details' is_ip6 unset
    paths: tuple[RoutePath, ...]


class L3Api:
    def __init__(self, conn: VppConnection) -> None:
        self.conn = conn

    # ------------------------------------------------------------------ proxy ARP
    def proxy_arp_range(self, table_id: int, low: str, high: str, is_add: bool) -> None:
        self.conn.call("proxy_arp_add_del", is_add=is_add,
                       proxy={"table_id": table_id, "low": low, "hi": high})

    def proxy_arp_ranges(self) -> list[tuple[int, str, str]]:
        """(table id, low, high) per range. VPP reports a range's FIB index, which no message
        maps to a table id: IPv4 tables are dumped in FIB-index order, so the n-th is taken as
        index n (exact unless a table was deleted after a later one was created); a range whose
        index has no table is left out."""
        tables = [d.table.table_id for d in self.conn.dump("ip_table_dump")
                  if not d.table.is_ip6]
        result = []
        for d in self.conn.dump("proxy_arp_dump"):
            fib_index = d.proxy.table_id
            if fib_index < len(tables):
                result.append((tables[fib_index], str(d.proxy.low), str(d.proxy.hi)))
        return result

    def proxy_arp_interface(self, sw_if_index: int, enable: bool) -> None:
        self.conn.call("proxy_arp_intfc_enable_disable", sw_if_index=sw_if_index, enable=enable)

    def proxy_arp_interfaces(self) -> set[int]:
        return {d.sw_if_index for d in self.conn.dump("proxy_arp_intfc_dump")}

    # ------------------------------------------------------------------ L3XC
    def l3xc_update(self, sw_if_index: int, is_ip6: bool, paths: list[dict[str, Any]]) -> None:
        """`paths`: each {"next_hop", "sw_if_index", "table", "weight", "preference"}."""
        encoded = [fib_path(p["next_hop"], p["sw_if_index"], p["table"], p["weight"],
                            p["preference"]) for p in paths]
        self.conn.call("l3xc_update", l3xc={"sw_if_index": sw_if_index, "is_ip6": is_ip6,
                                            "n_paths": len(encoded), "paths": encoded})

    def l3xc_del(self, sw_if_index: int, is_ip6: bool) -> None:
        self.conn.call("l3xc_del", sw_if_index=sw_if_index, is_ip6=is_ip6)

    def l3xcs(self) -> list[CrossConnect]:
        result = []
        for d in self.conn.dump("l3xc_dump", sw_if_index=ANY):
            paths = tuple(route_path(p) for p in d.l3xc.paths)
            is_ip6 = bool(paths) and ":" in paths[0].next_hop
            result.append(CrossConnect(d.l3xc.sw_if_index, is_ip6, paths))
        return result

    # ------------------------------------------------------------------ IPv6 ND
    def ip6_enable(self, sw_if_index: int, enable: bool) -> None:
        """Take (or release) one hold on the interface's IPv6: VPP counts them, and answers
        VALUE_EXIST when IPv6 was enabled already (an address, another hold) yet counts it."""
        try:
            self.conn.call("sw_interface_ip6_enable_disable", sw_if_index=sw_if_index,
                           enable=enable)
        except VppApiError as exc:
            if not (enable and exc.retval == VALUE_EXIST):
                raise

    def ra_config(self, sw_if_index: int, **flags: Any) -> None:
        self.conn.call("sw_interface_ip6nd_ra_config", sw_if_index=sw_if_index, **flags)

    def ra_prefix(self, sw_if_index: int, prefix: str, is_no: bool,
                  p: dict[str, Any] | None = None) -> None:
        p = p or {}
        self.conn.call("sw_interface_ip6nd_ra_prefix", sw_if_index=sw_if_index, prefix=prefix,
                       is_no=is_no, no_advertise=not p.get("advertise", True),
                       no_autoconfig=not p.get("autoconfig", True),
                       no_onlink=not p.get("onlink", True),
                       val_lifetime=p.get("valid_lifetime", 0),
                       pref_lifetime=p.get("preferred_lifetime", 0))

    def ra_states(self) -> dict[int, dict[str, Any]]:
        """The RA state of every interface with IPv6 enabled, by sw_if_index (VPP's walk may
        meet an interface more than once: the last answer is as good as the first)."""
        result = {}
        for d in self.conn.dump("sw_interface_ip6nd_ra_dump", sw_if_index=ANY):
            result[d.sw_if_index] = {
                "suppress": not d.send_radv, "managed": bool(d.adv_managed_flag),
                "other": bool(d.adv_other_flag),
                "link_layer_address": bool(d.adv_link_layer_address),
                "send_unicast": bool(d.send_unicast), "cease": bool(d.cease_radv),
                "max_interval": int(d.max_radv_interval),
                "min_interval": int(d.min_radv_interval),
                "lifetime": d.adv_router_lifetime,
                "initial_count": d.initial_adverts_count,
                "initial_interval": int(d.initial_adverts_interval),
                "prefixes": [{
                    "prefix": str(ipaddress.ip_network(str(p.prefix), strict=False)),
                    "valid_lifetime": p.val_lifetime, "preferred_lifetime": p.pref_lifetime,
                    "advertise": not p.no_advertise, "onlink": bool(p.onlink_flag),
                    "autoconfig": bool(p.autonomous_flag)} for p in d.prefixes]}
        return result

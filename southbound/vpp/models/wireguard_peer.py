"""`vpp/wireguard/peer/<name>`: a peer of a WireGuard interface (`vpp/interface` of type
wireguard).

    {"interface": "wg0", "public_key": "<base64>", "endpoint": "198.51.100.2", "port": 51820,
     "allowed_ips": ["10.1.0.0/16"], "persistent_keepalive": 25, "table": 0}

`wireguard_peer_add`; VPP cannot change a peer, so any change re-creates it
(`wireguard_peer_remove` + add). Depends on its interface (and on the endpoint's table when it is
not 0). VPP knows a peer by its public key, unique across all interfaces (two peers with one key
are INVALID together, as VPP refuses the second); kvmesh finds its peers by that key, and removes
only a peer with its key on its interface. Read back by `wireguard_peers_dump`: peers that match
no desired one by key are reported OBTAINED as `vpp/wireguard/peer/vpp-<peer index>` (names
starting `vpp-` are reserved) and never changed or deleted.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping, Sequence
from typing import Annotated, Any

from pydantic import AfterValidator, Field

from scheduler import Dependency, Descriptor, InvalidValueError, ValueOrigin
from southbound.modelspec import ModelSpec
from southbound.validation import KEY_FIELD, FieldProblems, StrictModel, validate
from southbound.vpp import keys
from southbound.vpp.context import INTERFACE_DESCRIPTOR, Context
from southbound.vpp.errors import MissingInterfaceError, VppError
from southbound.vpp.models import MAX_VRF, VppName, _ip, memoized, model_descriptor, name_problem
from southbound.vpp.models.vrf import vrf_dependencies
from southbound.vpp.wireguard_api import WireguardApi, WireguardKey

PREFIX = "vpp/wireguard/peer/"
DESCRIPTOR = "vpp-wireguard-peer"
FOREIGN = "vpp-"
MAX_ALLOWED_IPS = 255  # n_allowed_ips is a u8


def _network(text: str) -> str:
    try:
        return str(ipaddress.ip_network(text))
    except ValueError as exc:
        raise ValueError(f"must be a network like 10.1.0.0/16 (no host bits): {exc}") from None


def _allowed_ips(networks: list[str]) -> list[str]:
    if not networks:
        raise ValueError("at least one (VPP refuses a peer without allowed IPs)")
    if len(networks) > MAX_ALLOWED_IPS:
        raise ValueError(f"at most {MAX_ALLOWED_IPS}")
    seen: set[str] = set()
    for position, network in enumerate(networks):
        if network in seen:
            raise FieldProblems({f"[{position}]": f"{network} is listed twice"})
        seen.add(network)
    parsed = [ipaddress.ip_network(n) for n in networks]
    return [str(n) for n in sorted(parsed, key=lambda n: (n.version, n))]


Network = Annotated[str, AfterValidator(_network)]


class VppWireguardPeer(StrictModel):
    """`vpp/wireguard/peer/<name>`: a peer of a WireGuard interface: its public key, where it is
    (endpoint and port), the networks it may send from and is sent to (allowed IPs), and the
    keepalive interval (0: none)."""

    interface: VppName = Field(description="the vpp/interface (type wireguard) it belongs to")
    public_key: WireguardKey
    endpoint: Annotated[str, AfterValidator(_ip)] = Field(description="the peer's address")
    port: int = Field(ge=1, le=65535, description="the peer's UDP port")
    allowed_ips: Annotated[list[Network], AfterValidator(_allowed_ips)] = Field(
        description="networks routed to and accepted from the peer (1..255)")
    persistent_keepalive: int = Field(0, ge=0, le=65535,
                                      description="seconds between keepalives (0: none)")
    table: int = Field(0, ge=0, le=MAX_VRF, description="the endpoint's table")


def peer_name(key: str) -> str | None:
    if not key.startswith(PREFIX) or "/" in key[len(PREFIX):]:
        return None
    return key[len(PREFIX):] or None


@memoized
def check_peer(key: str, value: Any) -> dict[str, Any]:
    name = peer_name(key)
    problem = name_problem(name, "peer name") if name is not None else "malformed key"
    if problem is None and str(name).startswith(FOREIGN):
        problem = "names vpp-... are reserved for peers kvmesh did not create"
    return validate(VppWireguardPeer, key, value,
                    key_problems={KEY_FIELD: problem} if problem else {}).model_dump()


def peer_conflicts(values: Mapping[str, Any]) -> dict[str, str]:
    """Two peers with one public key: VPP refuses the second (ENTRY_ALREADY_EXISTS), the second
    in key order; values that do not validate are left to their own errors."""
    taken: dict[str, str] = {}
    found: dict[str, str] = {}
    for key in sorted(values):
        try:
            public_key = check_peer(key, values[key])["public_key"]
        except InvalidValueError:
            continue
        if public_key in taken:
            found[key] = f"its public key is {taken[public_key]}'s already: VPP refuses a " \
                         "second peer with one key (VNET_API_ERROR_ENTRY_ALREADY_EXISTS)"
        else:
            taken[public_key] = key
    return found


def descriptors(ctx: Context) -> list[Descriptor]:
    api = WireguardApi(ctx.api.conn)

    def create(key: str, value: Any) -> None:
        v = check_peer(key, value)
        sw_if_index = ctx.sw_if_index(v["interface"])
        kind = ctx.interfaces[v["interface"]].type
        if kind != "wireguard":  # VPP would answer INVALID_SW_IF_INDEX: say what is wrong
            raise VppError(f"interface {v['interface']} is of type {kind}, not wireguard")
        api.add_peer(sw_if_index, v)

    def delete(key: str, value: Any, metadata: Any) -> None:
        v = check_peer(key, value)
        try:
            sw_if_index = ctx.sw_if_index(v["interface"])
        except MissingInterfaceError:
            return  # its interface is gone, and the peer with it
        for index, on, found in api.peers():
            if on == sw_if_index and found["public_key"] == v["public_key"]:
                api.remove_peer(index)

    def dependencies(key: str, value: Any) -> Sequence[Dependency]:
        try:
            v = check_peer(key, value)
        except InvalidValueError:
            return ()
        deps = [Dependency(label=f"interface {v['interface']}",
                           key=keys.interface_key(v["interface"]))]
        deps += vrf_dependencies(v["table"], (":" in v["endpoint"],))
        return deps

    def retrieve(correlate: list[tuple[str, Any, Any]]) -> list[tuple[str, Any, Any, Any]]:
        names_by_key: dict[str, str] = {}
        for key, value, _ in correlate:
            try:
                names_by_key[check_peer(key, value)["public_key"]] = str(peer_name(key))
            except InvalidValueError:
                continue
        names = ctx.names_by_index  # refreshed: interfaces are retrieved first
        result = []
        for index, sw_if_index, fields in api.peers():
            value = {"interface": names.get(sw_if_index, f"sw_if_index-{sw_if_index}"),
                     **fields}
            name = names_by_key.get(fields["public_key"])
            if name is not None and sw_if_index in names:
                result.append((f"{PREFIX}{name}", value, None, ValueOrigin.FROM_NB))
            else:
                result.append((f"{PREFIX}{FOREIGN}{index}", value, None, ValueOrigin.FROM_SB))
        return result

    return [model_descriptor(
        DESCRIPTOR, check_peer, lambda key: peer_name(key) is not None,
        create=create,
        delete=delete,
        dependencies=dependencies,
        retrieve=retrieve,
        retrieve_dependencies=(INTERFACE_DESCRIPTOR,),
    )]


MODEL: ModelSpec[Context] = ModelSpec(
    "vpp/wireguard/peer", "vpp/wireguard/peer/<name>", re.compile(r"vpp/wireguard/peer/[^/]+"),
    VppWireguardPeer, check_peer, descriptors,
    examples=(("vpp/wireguard/peer/site-b", {
        "interface": "wg0", "public_key": "xTIBA5rboUvnH4htodjb6e697QjLERt1NAB4mZqp8Dg=",
        "endpoint": "198.51.100.2", "port": 51820, "allowed_ips": ["10.2.0.0/16"],
        "persistent_keepalive": 25}),),
    conflicts=peer_conflicts,
)

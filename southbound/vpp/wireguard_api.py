"""What the WireGuard models share (wireguard.api of VPP 24.06): WireGuard's key form, the calls,
and the redaction of private keys.

Keys are written as WireGuard writes them (`wg genkey`, `wg pubkey`): the base64 of 32 bytes,
44 characters ending in "=". An interface is `wireguard_interface_create` /
`wireguard_interface_delete`, read back by `wireguard_interface_dump` (its private key asked
back, so a changed key is seen); a peer is `wireguard_peer_add` / `wireguard_peer_remove` (VPP
cannot change a peer), read back by `wireguard_peers_dump`. A private key goes to VPP and comes
back from its dump, and nowhere else: nothing here logs a request or puts one in an error, and
`redact_private_key` hides it wherever the scheduler shows an interface.
"""

from __future__ import annotations

import base64
import binascii
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BeforeValidator, Field

from scheduler import REDACTED

if TYPE_CHECKING:
    from southbound.vpp.connection import VppConnection

KEY_BYTES = 32
KEY_CHARS = 44  # base64 of 32 bytes, with its one "=" of padding
ANY = 0xFFFFFFFF


def _wireguard_key(raw: Any) -> str:
    """A WireGuard key as `wg` accepts it; the errors never quote it."""
    problem = f"must be a WireGuard key: {KEY_CHARS} characters of base64 ({KEY_BYTES} bytes, " \
              "as `wg genkey` writes it; the value is not shown)"
    if not isinstance(raw, str) or len(raw) != KEY_CHARS or not raw.endswith("="):
        raise ValueError(problem)
    try:
        data = base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(problem) from None
    if len(data) != KEY_BYTES or base64.b64encode(data).decode() != raw:
        raise ValueError(problem)  # not canonical: bits beyond the 32 bytes set
    return raw


WireguardKey = Annotated[str, BeforeValidator(_wireguard_key), Field(
    description="a WireGuard key: base64 of 32 bytes (44 characters)")]


def key_bytes(text: str) -> bytes:
    return base64.b64decode(text)


def key_text(data: Any) -> str:
    return base64.b64encode(bytes(data)[:KEY_BYTES]).decode()


def redact_private_key(key: str, value: Any) -> Any:
    """An interface value with a WireGuard private key hidden (others as they are)."""
    if not isinstance(value, dict):
        return value
    section = value.get("wireguard")
    if not isinstance(section, dict) or "private_key" not in section:
        return value
    return {**value, "wireguard": {**section, "private_key": REDACTED}}


class WireguardApi:
    def __init__(self, conn: VppConnection) -> None:
        self.conn = conn

    # ------------------------------------------------------------------ interfaces
    def create_interface(self, section: dict[str, Any]) -> int:
        instance = section["instance"]
        reply = self.conn.call("wireguard_interface_create", generate_key=False, interface={
            "user_instance": ANY if instance is None else instance,
            "private_key": key_bytes(section["private_key"]), "port": section["port"],
            "src_ip": section["src_addr"]})
        return int(reply.sw_if_index)

    def delete_interface(self, sw_if_index: int) -> None:
        self.conn.call("wireguard_interface_delete", sw_if_index=sw_if_index)

    def interfaces(self) -> dict[int, dict[str, Any]]:
        """Every WireGuard interface by sw_if_index, as the interface model's section."""
        return {int(i.sw_if_index): {"private_key": key_text(i.private_key),
                                     "port": int(i.port), "src_addr": str(i.src_ip),
                                     "instance": int(i.user_instance)}
                for i in (d.interface for d in self.conn.dump(
                    "wireguard_interface_dump", show_private_key=True, sw_if_index=ANY))}

    # ------------------------------------------------------------------ peers
    def add_peer(self, sw_if_index: int, peer: dict[str, Any]) -> int:
        reply = self.conn.call("wireguard_peer_add", peer={
            "public_key": key_bytes(peer["public_key"]), "port": peer["port"],
            "persistent_keepalive": peer["persistent_keepalive"], "table_id": peer["table"],
            "endpoint": peer["endpoint"], "sw_if_index": sw_if_index,
            "n_allowed_ips": len(peer["allowed_ips"]), "allowed_ips": peer["allowed_ips"]})
        return int(reply.peer_index)

    def remove_peer(self, peer_index: int) -> None:
        self.conn.call("wireguard_peer_remove", peer_index=peer_index)

    def peers(self) -> list[tuple[int, int, dict[str, Any]]]:
        """(peer index, sw_if_index, the peer model's fields but `interface`) of every peer."""
        result = []
        for d in self.conn.dump("wireguard_peers_dump", peer_index=ANY):
            p = d.peer
            result.append((int(p.peer_index), int(p.sw_if_index), {
                "public_key": key_text(p.public_key), "endpoint": str(p.endpoint),
                "port": int(p.port), "persistent_keepalive": int(p.persistent_keepalive),
                "table": int(p.table_id),
                "allowed_ips": [str(a) for a in list(p.allowed_ips)[:p.n_allowed_ips]]}))
        return result

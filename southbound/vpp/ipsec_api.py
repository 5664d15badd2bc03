"""The VPP calls of the IPsec models (ipsec.api of VPP 24.06), in the models' canonical form.

An SA is `ipsec_sad_entry_add_v2` / `ipsec_sad_entry_del`, read back by `ipsec_sa_v5_dump`; an
SPD is `ipsec_spd_add_del`, its policies `ipsec_spd_entry_add_del_v2`, its interfaces
`ipsec_interface_add_del_spd`, read back by `ipsec_spds_dump`, `ipsec_spd_dump` and
`ipsec_spd_interface_dump`; a tunnel protection is `ipsec_tunnel_protect_update` /
`ipsec_tunnel_protect_del`, read back by `ipsec_tunnel_protect_dump`. Key material goes to
VPP and comes back from its dump, and nowhere else: nothing here logs a request or puts one in
an error.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from southbound.vpp.connection import VppConnection

ANY = 0xFFFFFFFF
PROTOCOLS = {"esp": 50, "ah": 51}
# ipsec_crypto_alg: name -> (API value, cipher key length in bytes; None: no key)
CRYPTO_ALGS: dict[str, tuple[int, int | None]] = {
    "none": (0, None), "aes-cbc-128": (1, 16), "aes-cbc-192": (2, 24), "aes-cbc-256": (3, 32),
    "aes-ctr-128": (4, 16), "aes-ctr-192": (5, 24), "aes-ctr-256": (6, 32),
    "aes-gcm-128": (7, 16), "aes-gcm-192": (8, 24), "aes-gcm-256": (9, 32),
    "des-cbc": (10, 7), "3des-cbc": (11, 24), "chacha20-poly1305": (12, 32),
    "aes-null-gmac-128": (13, 16), "aes-null-gmac-192": (14, 24), "aes-null-gmac-256": (15, 32),
}
# ipsec_integ_alg (HMACs: keys of any length)
INTEG_ALGS = {"none": 0, "md5-96": 1, "sha1-96": 2, "sha-256-96": 3, "sha-256-128": 4,
              "sha-384-192": 5, "sha-512-256": 6}
FLAGS = {"use_esn": 1, "anti_replay": 2, "udp_encap": 16, "inbound": 64}
IS_TUNNEL = 4
ACTIONS = {"bypass": 0, "discard": 1, "protect": 3}
UDP_PORT = 4500
REPLAY_WINDOW = 64
ZERO4 = "0.0.0.0"


def _key(hex_text: str) -> dict[str, Any]:
    data = bytes.fromhex(hex_text)
    return {"length": len(data), "data": data}


def _hex(key: Any) -> str:
    return bytes(key.data[:key.length]).hex()


def _name(table: dict[str, Any], number: int) -> str:
    for name, value in table.items():
        if (value[0] if isinstance(value, tuple) else value) == number:
            return name
    return str(number)


class IpsecApi:
    def __init__(self, conn: VppConnection) -> None:
        self.conn = conn

    # ------------------------------------------------------------------ SAs
    def add_sa(self, sa_id: int, sa: dict[str, Any]) -> None:
        flags = sum(bit for name, bit in FLAGS.items() if sa[name])
        tunnel: dict[str, Any] = {"src": ZERO4, "dst": ZERO4}
        if sa["tunnel"] is not None:
            flags |= IS_TUNNEL
            tunnel = {"src": sa["tunnel"]["src"], "dst": sa["tunnel"]["dst"],
                      "table_id": sa["tunnel"]["table_id"]}
        self.conn.call("ipsec_sad_entry_add_v2", entry={
            "sad_id": sa_id, "spi": sa["spi"], "protocol": PROTOCOLS[sa["protocol"]],
            "crypto_algorithm": CRYPTO_ALGS[sa["crypto_alg"]][0],
            "crypto_key": _key(sa["crypto_key"]),
            "integrity_algorithm": INTEG_ALGS[sa["integ_alg"]],
            "integrity_key": _key(sa["integ_key"]),
            "flags": flags, "tunnel": tunnel, "salt": sa["salt"],
            "udp_src_port": sa["udp_src_port"], "udp_dst_port": sa["udp_dst_port"],
            "anti_replay_window_size": sa["anti_replay_window"]})

    def del_sa(self, sa_id: int) -> None:
        self.conn.call("ipsec_sad_entry_del", id=sa_id)

    def sas(self) -> dict[int, dict[str, Any]]:
        """Every SA by id, in the SA model's canonical form."""
        result = {}
        for d in self.conn.dump("ipsec_sa_v5_dump", sa_id=ANY):
            e = d.entry
            flags = int(e.flags)
            udp = bool(flags & FLAGS["udp_encap"])
            replay = bool(flags & FLAGS["anti_replay"])
            result[e.sad_id] = {
                "spi": e.spi, "protocol": _name(PROTOCOLS, int(e.protocol)),
                "crypto_alg": _name(CRYPTO_ALGS, int(e.crypto_algorithm)),
                "crypto_key": _hex(e.crypto_key),
                "integ_alg": _name(INTEG_ALGS, int(e.integrity_algorithm)),
                "integ_key": _hex(e.integrity_key),
                **{name: bool(flags & bit) for name, bit in FLAGS.items()},
                "udp_src_port": e.udp_src_port if udp else UDP_PORT,
                "udp_dst_port": e.udp_dst_port if udp else UDP_PORT,
                "anti_replay_window": e.anti_replay_window_size if replay else REPLAY_WINDOW,
                "tunnel": {"src": str(e.tunnel.src), "dst": str(e.tunnel.dst),
                           "table_id": e.tunnel.table_id} if flags & IS_TUNNEL else None,
                "salt": e.salt,
            }
        return result

    # ------------------------------------------------------------------ SPDs
    def add_del_spd(self, spd_id: int, is_add: bool) -> None:
        self.conn.call("ipsec_spd_add_del", is_add=is_add, spd_id=spd_id)

    def interface_spd(self, sw_if_index: int, spd_id: int, is_add: bool) -> None:
        self.conn.call("ipsec_interface_add_del_spd", is_add=is_add, sw_if_index=sw_if_index,
                       spd_id=spd_id)

    def add_del_policy(self, spd_id: int, policy: dict[str, Any], is_add: bool) -> None:
        self.conn.call("ipsec_spd_entry_add_del_v2", is_add=is_add, entry={
            "spd_id": spd_id, "priority": policy["priority"],
            "is_outbound": policy["direction"] == "outbound", "sa_id": policy["sa"] or 0,
            "policy": ACTIONS[policy["action"]], "protocol": policy["protocol"],
            "remote_address_start": policy["remote_addresses"][0],
            "remote_address_stop": policy["remote_addresses"][1],
            "local_address_start": policy["local_addresses"][0],
            "local_address_stop": policy["local_addresses"][1],
            "remote_port_start": policy["remote_ports"][0],
            "remote_port_stop": policy["remote_ports"][1],
            "local_port_start": policy["local_ports"][0],
            "local_port_stop": policy["local_ports"][1]})

    def spd_ids(self) -> list[int]:
        """SPD ids in VPP's pool order."""
        return [d.spd_id for d in self.conn.dump("ipsec_spds_dump")]

    def policies(self, spd_id: int) -> list[dict[str, Any]]:
        result = []
        for d in self.conn.dump("ipsec_spd_dump", spd_id=spd_id, sa_id=ANY):
            e = d.entry
            action = _name(ACTIONS, int(e.policy))
            result.append({
                "priority": e.priority,
                "direction": "outbound" if e.is_outbound else "inbound",
                "action": action, "sa": e.sa_id if action == "protect" else None,
                "protocol": e.protocol,
                "local_addresses": [str(e.local_address_start), str(e.local_address_stop)],
                "remote_addresses": [str(e.remote_address_start), str(e.remote_address_stop)],
                "local_ports": [e.local_port_start, e.local_port_stop],
                "remote_ports": [e.remote_port_start, e.remote_port_stop]})
        return result

    def interface_spd_indexes(self) -> dict[int, int]:
        """sw_if_index -> the SPD's pool index (VPP names it so, and no message maps an SPD id
        to its index)."""
        return {d.sw_if_index: d.spd_index
                for d in self.conn.dump("ipsec_spd_interface_dump", spd_index_valid=0)}

    # ------------------------------------------------------------------ tunnel protection
    def protect(self, sw_if_index: int, next_hop: str | None, sa_out: int,
                sa_in: list[int]) -> None:
        """Create or update (the SAs of) the protection of a tunnel."""
        self.conn.call("ipsec_tunnel_protect_update", tunnel={
            "sw_if_index": sw_if_index, "nh": next_hop or ZERO4, "sa_out": sa_out,
            "n_sa_in": len(sa_in), "sa_in": sa_in})

    def unprotect(self, sw_if_index: int, next_hop: str | None) -> None:
        self.conn.call("ipsec_tunnel_protect_del", sw_if_index=sw_if_index,
                       nh=next_hop or ZERO4)

    def protections(self) -> list[tuple[int, dict[str, Any]]]:
        """(sw_if_index, protection in the model's form), in VPP's order; the all-zeros next
        hop (a point-to-point tunnel's) is None."""
        result = []
        for d in self.conn.dump("ipsec_tunnel_protect_dump", sw_if_index=ANY):
            t = d.tun
            next_hop = None if t.nh.is_unspecified else str(t.nh)
            result.append((t.sw_if_index, {"sa_out": t.sa_out, "sa_in": sorted(t.sa_in),
                                           "next_hop": next_hop}))
        return result

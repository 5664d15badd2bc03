"""IPsec SAs and SPDs, as VPP 24.06 keeps them (src/vnet/ipsec/ipsec_sa.c, ipsec_spd.c,
ipsec_spd_policy.c, ipsec_api.c); no I/O.

- An SA is added once per id (ENTRY_ALREADY_EXISTS otherwise) with an unknown protocol
  (INVALID_PROTOCOL) or algorithm (INVALID_ALGORITHM) refused first, then a tunnel whose ends
  are of two families (INVALID_PROTOCOL), the same (SAME_SRC_DST) or in a missing table
  (NO_SUCH_FIB), a cipher key of the wrong length (KEY_LENGTH; HMAC keys may have any length)
  and AH without integrity (UNIMPLEMENTED). Its stat index is its pool slot.
- SAs are reference counted: `sad_entry_del` drops the API's lock (NO_SUCH_ENTRY for an unknown
  id); a PROTECT policy holds one more, so an SA still used by a policy answers 0 and stays (id,
  dump and all) until its last policy goes.
- `spd_add_del`: ENTRY_ALREADY_EXISTS / NO_SUCH_ENTRY; a deleted SPD leaves its interfaces and
  frees its policy lists (VPP does not drop the SA locks of those policies).
- `interface_add_del_spd`: an unknown SPD is SYSCALL_ERROR_1, an interface that has one already
  SYSCALL_ERROR_2; removal only needs the SPD to exist.
- `spd_entry_add_del_v2`: an unknown SPD or a PROTECT policy with an unknown SA is SYSCALL_ERROR_1,
  RESOLVE is UNIMPLEMENTED; policies are kept per type (direction x family x inbound action) in
  priority order, highest first, a new one before those of equal priority; nothing refuses a
  duplicate, and deleting a policy that is not there answers 0.
- Pools hand out the most recently freed slot first, as VPP's do; `spd_interface_dump` names the
  SPD by its pool index, as VPP does.
- Tunnel protection (ipsec_tun.c): `tunnel_protect_update` takes at most 4 inbound SAs
  (LIMIT_EXCEEDED); it looks each SA up (inbound first, then outbound) and locks it, an unknown
  one is INVALID_VALUE - and, as VPP does, the SAs locked before the refusal stay locked (their
  `sad_entry_del` then answers 0 and leaves them). A new protection needs a GRE or IPIP tunnel
  (the device classes with a tunnel description; anything else is INVALID_SW_IF_INDEX, again
  after the locks). A point-to-point tunnel has one protection, whatever the next hop (the one
  first given is kept as its key); a multipoint or TEB (ethernet) one has one per next hop.
  Updating an existing protection swaps its SAs. Each protection holds one lock on each of its
  SAs, so an SA in use stays until the protection goes; `tunnel_protect_del` of none is
  NO_SUCH_ENTRY. An inbound tunnel-mode SA of a protection is marked protected: `sa_v5_details`
  then names the interface of the first protection using it. Protections are walked in pool
  order.
Simplification: an interface that is deleted loses its SPD. Its tunnel protection stays, as in
VPP (nothing removes it; an API request cannot name the deleted interface).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Any

from kvmesh.vppemu import errors as E
from kvmesh.vppemu.addrindex import VppPool
from kvmesh.vppemu.errors import ApiError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

PROTO_ESP, PROTO_AH = 50, 51
# ipsec_crypto_alg -> cipher key length in bytes (None: any, the NONE algorithm)
CRYPTO_KEY_LENGTHS: dict[int, int | None] = {
    0: None, 1: 16, 2: 24, 3: 32, 4: 16, 5: 24, 6: 32, 7: 16, 8: 24, 9: 32, 10: 7, 11: 24,
    12: 32, 13: 16, 14: 24, 15: 32}
INTEG_ALGS = range(7)  # NONE .. SHA_512_256: HMAC keys of any length
FLAG_USE_ANTI_REPLAY, FLAG_IS_TUNNEL, FLAG_IS_TUNNEL_V6, FLAG_UDP_ENCAP = 2, 4, 8, 16
UDP_PORT_IPSEC = 4500
ACTION_BYPASS, ACTION_DISCARD, ACTION_RESOLVE, ACTION_PROTECT = range(4)
MAX_PROTECT_SA_IN = 4  # ITP_MAX_N_SA_IN
# foreach_ipsec_spd_policy_type: the order policies are kept (and dumped) in
POLICY_TYPES = ("ip4-outbound", "ip6-outbound", "ip4-inbound-protect", "ip6-inbound-protect",
                "ip4-inbound-bypass", "ip6-inbound-bypass", "ip4-inbound-discard",
                "ip6-inbound-discard")
INBOUND_TYPE = {ACTION_PROTECT: "inbound-protect", ACTION_BYPASS: "inbound-bypass",
                ACTION_DISCARD: "inbound-discard"}


@dataclass(frozen=True)
class Tunnel:
    src: IPAddress
    dst: IPAddress
    table_id: int
    encap_decap_flags: int = 0
    mode: int = 0
    flags: int = 0
    dscp: int = 0
    hop_limit: int = 0


@dataclass
class SecurityAssociation:
    sa_id: int
    spi: int
    protocol: int
    crypto_alg: int
    crypto_key: bytes
    integ_alg: int
    integ_key: bytes
    flags: int
    tunnel: Tunnel | None
    salt: int
    udp_src_port: int
    udp_dst_port: int
    anti_replay_window: int
    stat_index: int = 0
    locks: int = 1  # the API's lock, plus one per PROTECT policy and tunnel protection using it
    protected: bool = False  # IS_PROTECT: an inbound tunnel-mode SA of a tunnel protection


@dataclass(frozen=True)
class Policy:
    """One SPD entry; equal policies are VPP's `ipsec_policy_is_equal`."""

    spd_id: int
    priority: int
    is_outbound: bool
    sa_id: int
    action: int
    protocol: int
    remote: tuple[IPAddress, IPAddress]
    local: tuple[IPAddress, IPAddress]
    remote_ports: tuple[int, int]
    local_ports: tuple[int, int]

    @property
    def policy_type(self) -> str:
        family = "ip6" if self.remote[0].version == 6 else "ip4"
        return f"{family}-outbound" if self.is_outbound else \
            f"{family}-{INBOUND_TYPE[self.action]}"


@dataclass
class Spd:
    spd_id: int
    index: int
    policies: dict[str, list[Policy]] = field(
        default_factory=lambda: {t: [] for t in POLICY_TYPES})

    def all_policies(self) -> list[Policy]:
        return [p for t in POLICY_TYPES for p in self.policies[t]]


@dataclass
class TunnelProtection:
    index: int  # pool slot
    sw_if_index: int
    next_hop: IPAddress  # the key it was created with
    sa_out: int  # SA ids
    sa_in: list[int]


class Ipsec:
    def __init__(self, table_exists: Any, tunnel_is_p2p: Any) -> None:
        self._table_exists = table_exists  # (is_ip6, table_id) -> bool
        # sw_if_index -> whether the tunnel is point-to-point; None: not a GRE/IPIP tunnel
        self._tunnel_is_p2p = tunnel_is_p2p
        self.protections: dict[int, TunnelProtection] = {}  # by pool slot
        self._protect_pool = VppPool()
        self.sas: dict[int, SecurityAssociation] = {}  # by SA id
        self._sa_pool = VppPool()
        self.spds: dict[int, Spd] = {}  # by SPD id
        self._spd_pool = VppPool()
        self.interfaces: dict[int, int] = {}  # sw_if_index -> SPD pool index

    # ------------------------------------------------------------------ SAs
    def add_sa(self, sa: SecurityAssociation) -> int:
        if sa.protocol not in (PROTO_ESP, PROTO_AH):
            raise ApiError(E.INVALID_PROTOCOL, f"protocol {sa.protocol}")
        if sa.crypto_alg not in CRYPTO_KEY_LENGTHS or sa.integ_alg not in INTEG_ALGS:
            raise ApiError(E.INVALID_ALGORITHM, "unknown algorithm")
        if sa.flags & FLAG_IS_TUNNEL:
            self._check_tunnel(sa.tunnel)
        else:
            sa.tunnel = None
        if sa.sa_id in self.sas:
            raise ApiError(E.ENTRY_ALREADY_EXISTS, f"SA {sa.sa_id} exists")
        wanted = CRYPTO_KEY_LENGTHS[sa.crypto_alg]
        if wanted is not None and len(sa.crypto_key) != wanted:
            raise ApiError(E.KEY_LENGTH, "cipher key length")  # never the key itself
        if sa.protocol == PROTO_AH and sa.integ_alg == 0:
            raise ApiError(E.UNIMPLEMENTED, "AH without integrity")
        if sa.tunnel is not None and sa.tunnel.src.version == 6:
            sa.flags |= FLAG_IS_TUNNEL_V6
        if sa.flags & FLAG_UDP_ENCAP:
            sa.udp_src_port = sa.udp_src_port or UDP_PORT_IPSEC
            sa.udp_dst_port = sa.udp_dst_port or UDP_PORT_IPSEC
        sa.stat_index = self._sa_pool.get()
        sa.locks = 1
        self.sas[sa.sa_id] = sa
        return sa.stat_index

    def _check_tunnel(self, tunnel: Tunnel | None) -> None:
        if tunnel is None:
            raise ApiError(E.INVALID_PROTOCOL, "no tunnel")
        if tunnel.src.version != tunnel.dst.version:
            raise ApiError(E.INVALID_PROTOCOL, "tunnel ends of two families")
        if tunnel.src == tunnel.dst:
            raise ApiError(E.SAME_SRC_DST, "tunnel source is its destination")
        if not self._table_exists(tunnel.dst.version == 6, tunnel.table_id):
            raise ApiError(E.NO_SUCH_FIB, f"no table {tunnel.table_id}")

    def del_sa(self, sa_id: int) -> None:
        if sa_id not in self.sas:
            raise ApiError(E.NO_SUCH_ENTRY, f"no SA {sa_id}")
        self._unlock(sa_id)

    def _unlock(self, sa_id: int) -> None:
        sa = self.sas.get(sa_id)
        if sa is None:
            return
        sa.locks -= 1
        if sa.locks <= 0:
            del self.sas[sa_id]
            self._sa_pool.put(sa.stat_index)

    # ------------------------------------------------------------------ SPDs
    def add_del_spd(self, spd_id: int, is_add: bool) -> None:
        spd = self.spds.get(spd_id)
        if is_add:
            if spd is not None:
                raise ApiError(E.ENTRY_ALREADY_EXISTS, f"SPD {spd_id} exists")
            self.spds[spd_id] = Spd(spd_id, self._spd_pool.get())
            return
        if spd is None:
            raise ApiError(E.NO_SUCH_ENTRY, f"no SPD {spd_id}")
        for sw_if_index in [i for i, index in self.interfaces.items() if index == spd.index]:
            del self.interfaces[sw_if_index]
        del self.spds[spd_id]
        self._spd_pool.put(spd.index)

    def interface_spd(self, sw_if_index: int, spd_id: int, is_add: bool) -> None:
        spd = self.spds.get(spd_id)
        if spd is None:
            raise ApiError(E.SYSCALL_ERROR_1, f"no SPD {spd_id}")
        if is_add:
            if sw_if_index in self.interfaces:
                raise ApiError(E.SYSCALL_ERROR_2, "the interface has an SPD")
            self.interfaces[sw_if_index] = spd.index
        else:
            self.interfaces.pop(sw_if_index, None)

    def add_del_policy(self, policy: Policy, is_add: bool) -> int:
        """The policy's stat index (~0 on delete)."""
        if policy.action == ACTION_RESOLVE:
            raise ApiError(E.UNIMPLEMENTED, "unsupported action: 'resolve'")
        spd = self.spds.get(policy.spd_id)
        if spd is None:
            raise ApiError(E.SYSCALL_ERROR_1, f"no SPD {policy.spd_id}")
        policies = spd.policies[policy.policy_type]
        if not is_add:
            if policy in policies:
                policies.remove(policy)
                if policy.action == ACTION_PROTECT:
                    self._unlock(policy.sa_id)
            return 0xFFFFFFFF
        if policy.action == ACTION_PROTECT:
            sa = self.sas.get(policy.sa_id)
            if sa is None:
                raise ApiError(E.SYSCALL_ERROR_1, f"no SA {policy.sa_id}")
            sa.locks += 1
        position = next((i for i, p in enumerate(policies) if p.priority <= policy.priority),
                        len(policies))
        policies.insert(position, policy)
        return sum(len(s.all_policies()) for s in self.spds.values()) - 1

    # ------------------------------------------------------------------ tunnel protection
    def _find_protection(self, sw_if_index: int, next_hop: IPAddress) -> TunnelProtection | None:
        p2p = bool(self._tunnel_is_p2p(sw_if_index))
        for protection in self.protections.values():
            if protection.sw_if_index == sw_if_index and (p2p or protection.next_hop == next_hop):
                return protection
        return None

    def _find_and_lock(self, sa_id: int) -> SecurityAssociation:
        sa = self.sas.get(sa_id)
        if sa is None:
            raise ApiError(E.INVALID_VALUE, f"no SA {sa_id}")
        sa.locks += 1
        return sa

    def protect(self, sw_if_index: int, next_hop: IPAddress, sa_out: int,
                sa_in: list[int]) -> None:
        if len(sa_in) > MAX_PROTECT_SA_IN:
            raise ApiError(E.LIMIT_EXCEEDED, f"more than {MAX_PROTECT_SA_IN} inbound SAs")
        protection = self._find_protection(sw_if_index, next_hop)
        # VPP's own order; a refusal below leaves the locks taken so far (as VPP does).
        found = [self._find_and_lock(sa_id) for sa_id in sa_in]
        found.append(self._find_and_lock(sa_out))
        if protection is None:
            if self._tunnel_is_p2p(sw_if_index) is None:
                raise ApiError(E.INVALID_SW_IF_INDEX, "not a tunnel interface")
            protection = TunnelProtection(self._protect_pool.get(), sw_if_index, next_hop,
                                          sa_out, list(sa_in))
            self.protections[protection.index] = protection
        else:
            self._unconfigure(protection)
            protection.sa_out, protection.sa_in = sa_out, list(sa_in)
        self._configure(protection)
        for sa in found:
            self._unlock(sa.sa_id)

    def _configure(self, protection: TunnelProtection) -> None:
        for sa_id in (protection.sa_out, *protection.sa_in):
            self.sas[sa_id].locks += 1
        for sa_id in protection.sa_in:
            sa = self.sas[sa_id]
            sa.protected = sa.tunnel is not None

    def _unconfigure(self, protection: TunnelProtection) -> None:
        for sa_id in protection.sa_in:
            if sa_id in self.sas:
                self.sas[sa_id].protected = False
        for sa_id in (protection.sa_out, *protection.sa_in):
            self._unlock(sa_id)

    def unprotect(self, sw_if_index: int, next_hop: IPAddress) -> None:
        protection = self._find_protection(sw_if_index, next_hop)
        if protection is None:
            raise ApiError(E.NO_SUCH_ENTRY, "no tunnel protection")
        self._unconfigure(protection)
        del self.protections[protection.index]
        self._protect_pool.put(protection.index)

    def protections_in_order(self, sw_if_index: int | None = None) -> list[TunnelProtection]:
        return [p for _index, p in sorted(self.protections.items())
                if sw_if_index is None or p.sw_if_index == sw_if_index]

    def protected_interface(self, sa: SecurityAssociation) -> int | None:
        """The interface `sa_v5_details` names for a protected SA: its first protection's."""
        if not sa.protected:
            return None
        return next((p.sw_if_index for p in self.protections_in_order()
                     if sa.sa_id in (p.sa_out, *p.sa_in)), None)

    def forget_interface(self, sw_if_index: int) -> None:
        self.interfaces.pop(sw_if_index, None)

    def snapshot(self) -> dict[str, Any]:
        """The emulator's control view: no key material."""
        return {
            "sas": [{"id": sa.sa_id, "spi": sa.spi, "protocol": sa.protocol,
                     "locks": sa.locks} for sa in sorted(self.sas.values(),
                                                         key=lambda s: s.stat_index)],
            "spds": [{"id": spd.spd_id, "index": spd.index,
                      "policies": len(spd.all_policies())}
                     for spd in sorted(self.spds.values(), key=lambda s: s.index)],
            "interfaces": {str(i): index for i, index in sorted(self.interfaces.items())},
            "protections": [{"sw_if_index": p.sw_if_index, "sa_out": p.sa_out,
                             "sa_in": p.sa_in} for p in self.protections_in_order()],
        }

"""`vpp/ipsec/sa/<id>`: an IPsec security association (VPP's SAD entry).

    {"spi": 1001, "protocol": "esp",
     "crypto_alg": "aes-gcm-128", "crypto_key": "<32 hex digits>", "salt": 12345,
     "integ_alg": "none", "integ_key": "",
     "anti_replay": true, "use_esn": false, "inbound": false, "udp_encap": false,
     "tunnel": {"src": "192.0.2.1", "dst": "192.0.2.2", "table_id": 0}}   # null: transport

- `ipsec_sad_entry_add_v2` creates it; VPP cannot change an SA, so any change re-creates it
  (`ipsec_sad_entry_del` + add), the SPD policies that protect with it removed first and
  restored after (they depend on it). Read back by `ipsec_sa_v5_dump`.
- SAs carry no tag: those in VPP that the desired state does not name are reported with an
  unknown origin, so the scheduler keeps them OBTAINED (never changed or deleted).
- A tunnel in table N depends on `vpp/vrf/<ipv4|ipv6>/N` (N > 0).
- Key material (`crypto_key`, `integ_key`) is shown nowhere: the descriptor's `redact` replaces
  it with `<redacted>` in transaction records and their log, key timelines, graph snapshots and
  dumps, and no validation error or VPP error quotes it.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BeforeValidator, Field, model_validator

from scheduler import REDACTED, Dependency, Descriptor, ValueOrigin
from southbound.modelspec import ModelSpec
from southbound.validation import KEY_FIELD, FieldProblems, StrictModel, validate
from southbound.vpp import keys
from southbound.vpp.context import Context
from southbound.vpp.errors import NO_SUCH_ENTRY, VppApiError
from southbound.vpp.ipsec_api import CRYPTO_ALGS, REPLAY_WINDOW, UDP_PORT, IpsecApi
from southbound.vpp.models import MAX_U32, MAX_VRF, _ip, memoized, model_descriptor
from southbound.vpp.models.vrf import vrf_dependencies

PREFIX = "vpp/ipsec/sa/"
DESCRIPTOR = "vpp-ipsec-sa"
KEY_MAX = 128  # bytes: vl_api_key_t data[128]
SECRET_FIELDS = ("crypto_key", "integ_key")


def _hex_key(raw: Any) -> str:
    """Key material as lower-case hex; the errors never quote it."""
    if not isinstance(raw, str):
        raise ValueError("must be a string of hex digits")
    text = raw[2:] if raw[:2].lower() == "0x" else raw
    if len(text) % 2 or re.fullmatch(r"[0-9a-fA-F]*", text) is None:
        raise ValueError("must be hex digits, an even number of them (the value is not shown)")
    if len(text) > 2 * KEY_MAX:
        raise ValueError(f"must be at most {KEY_MAX} bytes ({2 * KEY_MAX} hex digits)")
    return text.lower()


KeyMaterial = Annotated[str, BeforeValidator(_hex_key), Field(
    description="hex digits (an optional 0x prefix), never shown back")]
IP = Annotated[str, AfterValidator(_ip)]
CryptoAlg = Literal[
    "none", "aes-cbc-128", "aes-cbc-192", "aes-cbc-256", "aes-ctr-128", "aes-ctr-192",
    "aes-ctr-256", "aes-gcm-128", "aes-gcm-192", "aes-gcm-256", "des-cbc", "3des-cbc",
    "chacha20-poly1305", "aes-null-gmac-128", "aes-null-gmac-192", "aes-null-gmac-256"]
IntegAlg = Literal["none", "md5-96", "sha1-96", "sha-256-96", "sha-256-128", "sha-384-192",
                   "sha-512-256"]


class SaTunnel(StrictModel):
    """Tunnel mode: the outer addresses (one family, not equal) and the table they are in."""

    src: IP = Field(description="local tunnel address")
    dst: IP = Field(description="remote tunnel address")
    table_id: int = Field(0, ge=0, le=MAX_VRF, description="table of the outer packets")

    @model_validator(mode="after")
    def _endpoints(self) -> SaTunnel:
        src, dst = ipaddress.ip_address(self.src), ipaddress.ip_address(self.dst)
        if src.version != dst.version:
            raise FieldProblems({"dst": "not of the source's address family"})
        if src == dst:
            raise FieldProblems({"dst": "the same as the source"})
        return self


class VppIpsecSa(StrictModel):
    """`vpp/ipsec/sa/<id>`: an IPsec security association (id 0..4294967295). Key lengths
    are VPP's: a cipher key of exactly its algorithm's size (e.g. 16 bytes for aes-gcm-128),
    HMAC keys of any size up to 128 bytes. Keys are never shown (history, dumps, logs)."""

    spi: int = Field(ge=0, le=MAX_U32, description="security parameter index")
    protocol: Literal["esp", "ah"] = Field("esp", description="esp or ah (integrity only)")
    crypto_alg: CryptoAlg = Field("none", description="cipher")
    crypto_key: KeyMaterial = ""
    integ_alg: IntegAlg = Field("none", description="integrity (HMAC)")
    integ_key: KeyMaterial = ""
    salt: int = Field(0, ge=0, le=MAX_U32, description="salt (GCM, CTR, ChaCha20)")
    use_esn: bool = Field(False, description="extended sequence numbers")
    anti_replay: bool = Field(False, description="anti-replay check (inbound)")
    anti_replay_window: int = Field(REPLAY_WINDOW, ge=64, le=MAX_U32,
                                    description="anti-replay window (only with anti_replay)")
    inbound: bool = Field(False, description="an inbound SA (else outbound)")
    udp_encap: bool = Field(False, description="NAT traversal (ESP in UDP)")
    udp_src_port: int = Field(UDP_PORT, ge=1, le=65535, description="only with udp_encap")
    udp_dst_port: int = Field(UDP_PORT, ge=1, le=65535, description="only with udp_encap")
    tunnel: SaTunnel | None = Field(None, description="tunnel mode (unset: transport mode)")

    @model_validator(mode="after")
    def _consistent(self) -> VppIpsecSa:
        problems = {}
        size = CRYPTO_ALGS[self.crypto_alg][1]
        if size is None and self.crypto_key:
            problems["crypto_key"] = "must be empty with crypto_alg none"
        elif size is not None and len(self.crypto_key) != 2 * size:
            problems["crypto_key"] = \
                f"must be {size} bytes ({2 * size} hex digits) for {self.crypto_alg}"
        if self.integ_alg == "none" and self.integ_key:
            problems["integ_key"] = "must be empty with integ_alg none"
        if self.protocol == "ah":
            if self.integ_alg == "none":
                problems["integ_alg"] = "AH needs an integrity algorithm"
            if self.crypto_alg != "none":
                problems["crypto_alg"] = "AH does not encrypt: none"
        if not self.udp_encap and (self.udp_src_port, self.udp_dst_port) != (UDP_PORT, UDP_PORT):
            problems["udp_encap"] = "UDP ports are only used with udp_encap"
        if not self.anti_replay and self.anti_replay_window != REPLAY_WINDOW:
            problems["anti_replay"] = "a window is only used with anti_replay"
        if problems:
            raise FieldProblems(problems)
        return self


def sa_id(key: str) -> int | None:
    return keys.u32_key_tail(key, PREFIX)


def sa_key(number: int) -> str:
    return f"{PREFIX}{number}"


@memoized
def check_sa(key: str, value: Any) -> dict[str, Any]:
    problems = {} if sa_id(key) is not None else \
        {KEY_FIELD: f"malformed key (vpp/ipsec/sa/<id 0..{MAX_U32}>)"}
    return validate(VppIpsecSa, key, value, key_problems=problems).model_dump()


def redact_sa(key: str, value: Any) -> Any:
    """The value with its key material replaced (an unreadable value: hidden whole)."""
    if not isinstance(value, dict):
        return REDACTED
    return {name: (REDACTED if name in SECRET_FIELDS and field else field)
            for name, field in value.items()}


def _dependencies(v: dict[str, Any]) -> Sequence[Dependency]:
    tunnel = v["tunnel"]
    if tunnel is None:
        return ()
    return vrf_dependencies(tunnel["table_id"], (ipaddress.ip_address(tunnel["dst"]).version == 6,))


def descriptors(ctx: Context) -> list[Descriptor]:
    api = IpsecApi(ctx.api.conn)

    def create(key: str, value: Any) -> None:
        api.add_sa(int(sa_id(key) or 0), check_sa(key, value))

    def delete(key: str, value: Any, metadata: Any) -> None:
        try:
            api.del_sa(int(sa_id(key) or 0))
        except VppApiError as exc:
            if exc.retval != NO_SUCH_ENTRY:
                raise

    def retrieve(correlate: list[tuple[str, Any, Any]]) -> list[tuple[str, Any, Any, Any]]:
        return [(sa_key(number), value, None, ValueOrigin.UNKNOWN)
                for number, value in api.sas().items()]

    return [model_descriptor(
        DESCRIPTOR, check_sa,
        lambda key: key.startswith(PREFIX) and "/" not in key[len(PREFIX):],
        depends_on=_dependencies,
        create=create,
        delete=delete,
        retrieve=retrieve,
        redact=redact_sa,
    )]


MODEL: ModelSpec[Context] = ModelSpec(
    "vpp/ipsec/sa", "vpp/ipsec/sa/<id>", re.compile(r"vpp/ipsec/sa/[^/]+"), VppIpsecSa,
    check_sa, descriptors,
    examples=(("vpp/ipsec/sa/10", {
        "spi": 1001, "crypto_alg": "aes-gcm-128", "crypto_key": "00112233445566778899aabbccddeeff",
        "salt": 305419896, "anti_replay": True,
        "tunnel": {"src": "192.0.2.1", "dst": "192.0.2.2"}}),),
)

"""`vpp/nat44/pool/<first ip>[-<last ip>]`: a range of NAT44 pool addresses.

    {"first_ip": "198.51.100.1", "last_ip": "198.51.100.4", "vrf": null, "twice_nat": false}

`nat44_add_del_address_range`; any change re-creates. Depends on NAT44 being enabled. Read back
by `nat44_address_dump` (one entry per address): a wanted range is reported when every address
of it is there as wanted; addresses no wanted range covers (VPP has no owner tag for them) are
reported OBTAINED, as ranges of consecutive addresses, and never removed (a range the scheduler
itself added stays its own).
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any

from pydantic import Field, ValidationInfo, model_validator

from scheduler import Descriptor, InvalidValueError, ValueOrigin
from southbound.modelspec import ModelSpec
from southbound.validation import KEY_FIELD, FieldProblems, StrictModel, validate
from southbound.vpp.context import Context
from southbound.vpp.errors import NO_SUCH_ENTRY, VppApiError
from southbound.vpp.models import MAX_VRF, memoized, model_descriptor
from southbound.vpp.nat44_api import ENABLED, Nat44Api, PoolAddress, ip4

PREFIX = "vpp/nat44/pool/"
DESCRIPTOR = "vpp-nat44-pool"



class VppNat44Pool(StrictModel):
    """`vpp/nat44/pool/<first ip>[-<last ip>]`: NAT44 pool addresses (the key says which; the
    value may repeat them and must then agree)."""

    first_ip: str | None = Field(None, description="first address (as in the key)")
    last_ip: str | None = Field(None, description="last address (as in the key; unset: first)")
    vrf: int | None = Field(None, ge=0, le=MAX_VRF,
                            description="the addresses' table (unset: none in particular)")
    twice_nat: bool = Field(False, description="a twice-NAT pool")

    @model_validator(mode="after")
    def _agrees_with_key(self, info: ValidationInfo) -> VppNat44Pool:
        first, last = (info.context or {}).get("range", (None, None))
        problems = {}
        for name, given, expected in (("first_ip", self.first_ip, first),
                                      ("last_ip", self.last_ip, last)):
            if given is not None and expected is not None and given != expected:
                problems[name] = f"{given} does not match the key's {expected}"
        if problems:
            raise FieldProblems(problems)
        return self


def key_range(key: str) -> tuple[str, str] | None:
    """(first, last) of a pool key, canonical, or None when the key is not one."""
    if not key.startswith(PREFIX) or key.count("/") != 3:
        return None
    first, _, last = key[len(PREFIX):].partition("-")
    try:
        low, high = ip4(first), ip4(last or first)
    except ValueError:
        return None
    return (low, high) if int(ipaddress.IPv4Address(low)) <= int(
        ipaddress.IPv4Address(high)) else None


def pool_key(first: str, last: str) -> str:
    return f"{PREFIX}{first}" if first == last else f"{PREFIX}{first}-{last}"


@memoized
def check_pool(key: str, value: Any) -> dict[str, Any]:
    found = key_range(key)
    problems = {} if found is not None else {
        KEY_FIELD: "must be vpp/nat44/pool/<first IPv4>[-<last IPv4>] with first <= last"}
    filled = dict(value) if isinstance(value, dict) else value
    if isinstance(filled, dict):
        for name in ("first_ip", "last_ip"):
            if isinstance(filled.get(name), str):
                try:
                    filled[name] = ip4(filled[name])
                except ValueError as exc:
                    problems[name] = str(exc)
    model = validate(VppNat44Pool, key, filled, key_problems=problems,
                     context={"range": found or (None, None)})
    assert found is not None
    return {"first_ip": found[0], "last_ip": found[1], "vrf": model.vrf,
            "twice_nat": model.twice_nat}


def _addresses(first: str, last: str) -> list[ipaddress.IPv4Address]:
    low, high = int(ipaddress.IPv4Address(first)), int(ipaddress.IPv4Address(last))
    return [ipaddress.IPv4Address(n) for n in range(low, high + 1)]


def descriptors(ctx: Context) -> list[Descriptor]:
    api = Nat44Api(ctx.api.conn)

    def create(key: str, value: Any) -> None:
        v = check_pool(key, value)
        api.address_range(v["first_ip"], v["last_ip"], v["vrf"], v["twice_nat"], True)

    def delete(key: str, value: Any, metadata: Any) -> None:
        v = check_pool(key, value)
        try:
            api.address_range(v["first_ip"], v["last_ip"], v["vrf"], v["twice_nat"], False)
        except VppApiError as exc:
            if exc.retval != NO_SUCH_ENTRY:
                raise
            # VPP stops at the first missing address: remove the others one by one.
            for address in _addresses(v["first_ip"], v["last_ip"]):
                try:
                    api.address_range(str(address), str(address), v["vrf"], v["twice_nat"],
                                      False)
                except VppApiError as inner:
                    if inner.retval != NO_SUCH_ENTRY:
                        raise


    def retrieve(correlate: list[tuple[str, Any, Any]]) -> list[tuple[str, Any, Any, Any]]:
        present = {a.address: a for a in api.addresses()}
        result: list[tuple[str, Any, Any, Any]] = []
        for key, value, _meta in correlate:
            try:
                v = check_pool(key, value)
            except InvalidValueError:
                continue
            wanted = _addresses(v["first_ip"], v["last_ip"])
            found = [present.get(address) for address in wanted]
            if all(f is not None and (f.vrf, f.twice_nat) == (v["vrf"], v["twice_nat"])
                   for f in found):
                result.append((key, v, None, ValueOrigin.FROM_NB))
                for address in wanted:
                    del present[address]
        for first, last, sample in _runs(sorted(present.values(), key=lambda a: a.address)):
            value = {"first_ip": str(first), "last_ip": str(last), "vrf": sample.vrf,
                     "twice_nat": sample.twice_nat}
            result.append((pool_key(str(first), str(last)), value, None, ValueOrigin.FROM_SB))
        return result

    return [model_descriptor(
        DESCRIPTOR, check_pool, lambda key: key.startswith(PREFIX) and key.count("/") == 3,
        depends_on=lambda v: (ENABLED,),
        create=create,
        delete=delete,
        retrieve=retrieve,
    )]


def _runs(addresses: list[PoolAddress]) -> list[tuple[ipaddress.IPv4Address,
                                                      ipaddress.IPv4Address, PoolAddress]]:
    """Consecutive addresses with the same table and kind, as (first, last, one of them)."""
    runs: list[tuple[ipaddress.IPv4Address, ipaddress.IPv4Address, PoolAddress]] = []
    for a in addresses:
        if runs and int(runs[-1][1]) + 1 == int(a.address) and \
                (runs[-1][2].vrf, runs[-1][2].twice_nat) == (a.vrf, a.twice_nat):
            runs[-1] = (runs[-1][0], a.address, runs[-1][2])
        else:
            runs.append((a.address, a.address, a))
    return runs


MODEL: ModelSpec[Context] = ModelSpec(
    "vpp/nat44/pool", "vpp/nat44/pool/<first ip>[-<last ip>]",
    re.compile(r"vpp/nat44/pool/[^/]+"), VppNat44Pool, check_pool, descriptors,
    examples=(("vpp/nat44/pool/198.51.100.1-198.51.100.4", {}),),
)

"""`vpp/ipsec/spd/<id>`: an IPsec security policy database, its policies and its interfaces.

    {"policies": [{"priority": 10, "direction": "outbound", "action": "protect", "sa": 10,
                   "protocol": "tcp", "local_addresses": ["10.0.0.0", "10.0.0.255"],
                   "remote_addresses": ["10.1.0.0", "10.1.0.255"], "remote_ports": [443, 443]},
                  {"priority": 0, "direction": "inbound", "action": "bypass"}],
     "interfaces": ["uplink"]}

- The SPD is `ipsec_spd_add_del`; each policy a derived value
  `vpp/ipsec/spd/<id>/policy/<digest>` (`ipsec_spd_entry_add_del_v2`; the digest names the
  policy's content, so editing one policy touches only it), a PROTECT policy depending on
  `vpp/ipsec/sa/<sa>`; each interface a derived value `vpp/ipsec/spd/<id>/interface/<name>`
  (`ipsec_interface_add_del_spd`) depending on `vpp/interface/<name>`. An interface has at most
  one SPD (VPP refuses a second).
- Policies are kept in VPP's own order (direction, family and inbound action; then priority,
  highest first); an unset address range is the whole of the policy's family (IPv4 unless an
  address says IPv6), unset ports are 0-65535, protocol 0 is any.
- Read back by `ipsec_spds_dump`, `ipsec_spd_dump` per SPD and `ipsec_spd_interface_dump`.
  VPP names an interface's SPD by its pool index, which no message maps to an SPD id: kvmesh
  learns the index of an SPD when it binds an interface to it (reading
  `ipsec_spd_interface_dump` after), and otherwise takes the n-th SPD of `ipsec_spds_dump`
  (VPP's pool order) as index n, which holds unless an SPD with a lower index was deleted and
  not replaced. SPDs the desired state does not name
  are reported with an unknown origin: OBTAINED, never changed or deleted.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import re
from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, model_validator

from scheduler import Dependency, Descriptor, InvalidValueError, ValueOrigin
from southbound.modelspec import ModelSpec
from southbound.validation import (
    KEY_FIELD,
    FieldProblems,
    FieldsInvalidError,
    StrictModel,
    validate,
)
from southbound.vpp import keys
from southbound.vpp.context import INTERFACE_DESCRIPTOR, Context
from southbound.vpp.errors import (
    INVALID_SW_IF_INDEX,
    NO_SUCH_ENTRY,
    SYSCALL_ERROR_1,
    MissingInterfaceError,
    VppApiError,
    is_retriable,
)
from southbound.vpp.ipsec_api import IpsecApi
from southbound.vpp.models import MAX_U32, VppName, listed_once, memoized, model_descriptor
from southbound.vpp.models.ipsec_sa import sa_key

PREFIX = "vpp/ipsec/spd/"
DESCRIPTOR = "vpp-ipsec-spd"
POLICY_DESCRIPTOR = "vpp-ipsec-spd-policy"
BINDING_DESCRIPTOR = "vpp-ipsec-spd-interface"
PROTOCOLS = {"icmp": 1, "tcp": 6, "udp": 17, "gre": 47, "esp": 50, "ah": 51, "icmpv6": 58}
I32 = 2**31
ANYWHERE = {4: ["0.0.0.0", "255.255.255.255"],
            6: ["::", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"]}
# VPP's policy types, in the order it keeps (and dumps) them
TYPE_ORDER = ("4-outbound", "6-outbound", "4-protect", "6-protect", "4-bypass", "6-bypass",
              "4-discard", "6-discard")
DIGEST = 12


def _range(pair: list[str]) -> list[str]:
    try:
        start, stop = (ipaddress.ip_address(a) for a in pair)
    except ValueError as exc:
        raise ValueError(f"must be [first, last] IP addresses: {exc}") from None
    if start.version != stop.version:
        raise ValueError("first and last are of two families")
    if int(start) > int(stop):
        raise ValueError(f"must be [first, last] with first <= last, got {pair}")
    return [str(start), str(stop)]


def _ports(pair: list[int]) -> list[int]:
    if pair[0] > pair[1]:
        raise ValueError(f"must be [low, high] with low <= high, got {pair}")
    return pair


def _protocol(protocol: int | str) -> int | str:
    if (isinstance(protocol, str) and protocol not in PROTOCOLS) or \
            (isinstance(protocol, int) and not 0 <= protocol <= 255):
        raise ValueError(f"must be 0..255 or one of {', '.join(PROTOCOLS)}, got {protocol!r}")
    return protocol


Range = Annotated[list[str], Field(min_length=2, max_length=2), AfterValidator(_range)]
Port = Annotated[int, Field(ge=0, le=65535)]
Ports = Annotated[list[Port], Field(min_length=2, max_length=2), AfterValidator(_ports)]


class SpdPolicy(StrictModel):
    """One policy: traffic it matches and what happens to it."""

    priority: int = Field(0, ge=-I32, le=I32 - 1, description="higher matches first")
    direction: Literal["inbound", "outbound"] = Field(description="inbound or outbound")
    action: Literal["bypass", "discard", "protect"] = Field(
        description="bypass IPsec, discard, or protect with `sa`")
    sa: int | None = Field(None, ge=0, le=MAX_U32, description="the vpp/ipsec/sa id (protect)")
    protocol: Annotated[int | str, AfterValidator(_protocol)] = Field(
        0, description="IP protocol: 0..255 (0: any) or a name (tcp, udp, esp, ...)")
    local_addresses: Range | None = Field(None, description="[first, last] (unset: all)")
    remote_addresses: Range | None = Field(None, description="[first, last] (unset: all)")
    local_ports: Ports = Field(default_factory=lambda: [0, 65535], description="[low, high]")
    remote_ports: Ports = Field(default_factory=lambda: [0, 65535], description="[low, high]")

    @model_validator(mode="after")
    def _consistent(self) -> SpdPolicy:
        problems = {}
        if (self.action == "protect") != (self.sa is not None):
            problems["sa"] = "required with action protect, and only with it"
        families = {ipaddress.ip_address(r[0]).version
                    for r in (self.local_addresses, self.remote_addresses) if r}
        if len(families) > 1:
            problems["remote_addresses"] = "not of the family of local_addresses"
        if problems:
            raise FieldProblems(problems)
        return self


class VppIpsecSpd(StrictModel):
    """`vpp/ipsec/spd/<id>`: an IPsec security policy database (id 1..4294967295): its
    policies and the interfaces it applies to (an interface has at most one SPD)."""

    policies: list[SpdPolicy] = Field(default_factory=list, description="the policies")
    interfaces: Annotated[list[VppName], AfterValidator(listed_once)] = Field(
        default_factory=list, description="vpp/interface names it applies to")


def spd_id(key: str) -> int | None:
    return keys.u32_key_tail(key, PREFIX) or None  # SPD ids start at 1


def spd_key(number: int) -> str:
    return f"{PREFIX}{number}"


def policy_key(number: int, digest: str) -> str:
    return f"{PREFIX}{number}/policy/{digest}"


def binding_key(number: int, iface: str) -> str:
    return f"{PREFIX}{number}/interface/{iface}"


def _derived_parts(key: str, kind: str) -> tuple[str, str] | None:
    if not key.startswith(PREFIX):
        return None
    parts = key[len(PREFIX):].split("/")
    if len(parts) != 3 or parts[1] != kind or not parts[2] or \
            spd_id(PREFIX + parts[0]) is None:
        return None
    return parts[0], parts[2]


def digest(policy: dict[str, Any]) -> str:
    """The name of a policy: its content (canonical JSON), hashed."""
    text = json.dumps(policy, sort_keys=True).encode()
    return hashlib.sha256(text).hexdigest()[:DIGEST]


def canonical_policy(policy: dict[str, Any]) -> dict[str, Any]:
    """Both ranges filled in and the protocol a number: the form VPP's dump gives back."""
    given = policy["local_addresses"] or policy["remote_addresses"]
    family = ipaddress.ip_address(given[0]).version if given else 4
    protocol = policy["protocol"]
    return {**policy, "protocol": PROTOCOLS.get(protocol, protocol) if isinstance(
        protocol, str) else protocol,
        "local_addresses": policy["local_addresses"] or list(ANYWHERE[family]),
        "remote_addresses": policy["remote_addresses"] or list(ANYWHERE[family])}


def vpp_order(policy: dict[str, Any]) -> tuple[int, int, str]:
    family = ipaddress.ip_address(policy["local_addresses"][0]).version
    kind = "outbound" if policy["direction"] == "outbound" else policy["action"]
    return TYPE_ORDER.index(f"{family}-{kind}"), -policy["priority"], digest(policy)


def canonical_spd(policies: list[dict[str, Any]], interfaces: list[str]) -> dict[str, Any]:
    return {"policies": sorted((canonical_policy(p) for p in policies), key=vpp_order),
            "interfaces": sorted(interfaces)}


@memoized
def check_spd(key: str, value: Any) -> dict[str, Any]:
    problems = {} if spd_id(key) is not None else \
        {KEY_FIELD: f"malformed key (vpp/ipsec/spd/<id 1..{MAX_U32}>)"}
    model = validate(VppIpsecSpd, key, value, key_problems=problems)
    result = canonical_spd([p.model_dump() for p in model.policies], model.interfaces)
    digests = [digest(p) for p in result["policies"]]
    if len(set(digests)) != len(digests):
        raise FieldsInvalidError(key, {"policies": "the same policy is listed twice"})
    return result


class SpdState:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.api = IpsecApi(ctx.api.conn)
        # SPD id -> VPP's pool index, learnt when kvmesh binds an interface (VPP shows an
        # interface's SPD by index only): exact where known, the dump's order elsewhere.
        self.indexes: dict[int, int] = {}

    # -------------------------------------------------------------- the SPD
    def spd_descriptor(self) -> Descriptor:
        return model_descriptor(
            DESCRIPTOR, check_spd, lambda key: spd_id(key) is not None,
            # The SPD itself is only its id: policies and interfaces are derived values.
            agree=lambda x, y: True,
            create=self.create,
            delete=self.delete,
            retrieve=self.retrieve,
            derived_values=self.derived_values,
            retrieve_dependencies=(INTERFACE_DESCRIPTOR,),
        )

    def create(self, key: str, value: Any) -> None:
        self.api.add_del_spd(int(spd_id(key) or 0), True)

    def delete(self, key: str, value: Any, metadata: Any) -> None:
        try:
            self.api.add_del_spd(int(spd_id(key) or 0), False)
        except VppApiError as exc:
            if exc.retval != NO_SUCH_ENTRY:
                raise

    @staticmethod
    def derived_values(key: str, value: Any) -> list[tuple[str, Any]]:
        try:
            spd = check_spd(key, value)
        except InvalidValueError:
            return []
        number = int(spd_id(key) or 0)
        return [(policy_key(number, digest(p)), {"spd": number, **p})
                for p in spd["policies"]] + \
            [(binding_key(number, iface), {"spd": number, "interface": iface})
             for iface in spd["interfaces"]]

    def retrieve(self, correlate: list[tuple[str, Any, Any]]) -> list[tuple[str, Any, Any, Any]]:
        numbers = self.api.spd_ids()
        self.indexes = {n: i for n, i in self.indexes.items() if n in numbers}
        by_index = {i: n for i, n in enumerate(numbers) if n not in self.indexes}
        by_index.update((i, n) for n, i in self.indexes.items())  # learnt: exact
        bound: dict[int, list[str]] = {}
        names = self.ctx.names_by_index  # refreshed: interfaces are retrieved first
        for sw_if_index, index in self.api.interface_spd_indexes().items():
            number = by_index.get(index)
            if number is not None:
                bound.setdefault(number, []).append(
                    names.get(sw_if_index, f"sw_if_index-{sw_if_index}"))
        return [(spd_key(number), canonical_spd(self.api.policies(number),
                                                bound.get(number, [])),
                 None, ValueOrigin.UNKNOWN) for number in numbers]

    # -------------------------------------------------------------- policies
    def policy_descriptor(self) -> Descriptor:
        return Descriptor(
            name=POLICY_DESCRIPTOR,
            key_selector=lambda key: _derived_parts(key, "policy") is not None,
            create=self.add_policy,
            delete=self.del_policy,
            dependencies=self.policy_dependencies,
            is_retriable_failure=is_retriable,
        )

    def add_policy(self, key: str, value: Any) -> None:
        self.api.add_del_policy(value["spd"], value, True)

    def del_policy(self, key: str, value: Any, metadata: Any) -> None:
        try:
            self.api.add_del_policy(value["spd"], value, False)
        except VppApiError as exc:
            if exc.retval != SYSCALL_ERROR_1:  # the SPD is gone, and its policies with it
                raise

    @staticmethod
    def policy_dependencies(key: str, value: Any) -> Sequence[Dependency]:
        if value.get("sa") is None:
            return ()
        return (Dependency(label=f"IPsec SA {value['sa']}", key=sa_key(value["sa"])),)

    # -------------------------------------------------------------- interfaces
    def binding_descriptor(self) -> Descriptor:
        return Descriptor(
            name=BINDING_DESCRIPTOR,
            key_selector=lambda key: _derived_parts(key, "interface") is not None,
            create=self.bind,
            delete=self.unbind,
            dependencies=lambda key, value: (Dependency(
                label=f"interface {value['interface']}",
                key=keys.interface_key(value["interface"])),),
            is_retriable_failure=is_retriable,
        )

    def bind(self, key: str, value: Any) -> None:
        sw_if_index = self.ctx.sw_if_index(value["interface"])
        self.api.interface_spd(sw_if_index, value["spd"], True)
        index = self.api.interface_spd_indexes().get(sw_if_index)
        if index is not None:
            self.indexes[value["spd"]] = index

    def unbind(self, key: str, value: Any, metadata: Any) -> None:
        try:
            self.api.interface_spd(self.ctx.sw_if_index(value["interface"]), value["spd"], False)
        except MissingInterfaceError:
            return  # the interface is gone, and its SPD with it
        except VppApiError as exc:
            if exc.retval not in (INVALID_SW_IF_INDEX, SYSCALL_ERROR_1):
                raise


def descriptors(ctx: Context) -> list[Descriptor]:
    state = SpdState(ctx)
    return [state.spd_descriptor(), state.policy_descriptor(), state.binding_descriptor()]


MODEL: ModelSpec[Context] = ModelSpec(
    "vpp/ipsec/spd", "vpp/ipsec/spd/<id>", re.compile(r"vpp/ipsec/spd/[^/]+"), VppIpsecSpd,
    check_spd, descriptors,
    examples=(("vpp/ipsec/spd/1", {
        "policies": [
            {"priority": 10, "direction": "outbound", "action": "protect", "sa": 10,
             "remote_addresses": ["10.1.0.0", "10.1.0.255"]},
            {"priority": 10, "direction": "inbound", "action": "protect", "sa": 20,
             "remote_addresses": ["10.1.0.0", "10.1.0.255"]},
            {"priority": 0, "direction": "inbound", "action": "bypass", "protocol": "esp"}],
        "interfaces": ["uplink"]}),),
)

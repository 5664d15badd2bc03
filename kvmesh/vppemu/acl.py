"""The acl plugin's state: ACLs by index and the ACL lists of interfaces (no I/O).

As VPP 24.06 (src/plugins/acl/acl.c) does it:
- `add_replace` with index ~0 creates (lowest free index), with an existing index replaces the
  rules and tag in place, with a missing index refuses with NO_SUCH_ENTRY; every rule is checked
  first (a prefix with host bits set: INVALID_SRC/DST_ADDRESS, a port range first > last:
  INVALID_VALUE_2) and a refused request changes nothing;
- `delete` refuses a missing index (NO_SUCH_ENTRY), an ACL still applied to an interface
  (ACL_IN_USE_INBOUND / ACL_IN_USE_OUTBOUND) and one in a lookup context of another plugin (ABF:
  ACL_IN_USE_BY_LOOKUP_CONTEXT);
- a lookup context's ACLs are set whole (lookup_context.c): an undefined ACL or one listed twice
  leaves them as they were;
- `set_interface_lists` replaces both lists of an interface: an undefined ACL (NO_SUCH_ENTRY) or
  one listed twice in a direction (ENTRY_ALREADY_EXISTS) refuses;
- an interface that is deleted loses its lists (VPP's interface delete callback).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Hashable
from dataclasses import dataclass, field

from kvmesh.vppemu import errors as E
from kvmesh.vppemu.errors import ApiError

INVALID_INDEX = 0xFFFFFFFF

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class AclRule:
    action: int  # 0 deny, 1 permit, 2 permit+reflect
    src: Network
    dst: Network
    proto: int
    sport: tuple[int, int]
    dport: tuple[int, int]
    tcp_flags_mask: int = 0
    tcp_flags_value: int = 0


@dataclass
class Acl:
    index: int
    tag: str
    rules: list[AclRule]


@dataclass
class InterfaceLists:
    ingress: list[int] = field(default_factory=list)
    egress: list[int] = field(default_factory=list)


class AclTable:
    def __init__(self) -> None:
        self.acls: dict[int, Acl] = {}
        self.lists: dict[int, InterfaceLists] = {}  # sw_if_index -> its ACL lists
        self.contexts: dict[Hashable, list[int]] = {}  # lookup context -> the ACLs it holds

    def add_replace(self, index: int, tag: str, rules: list[AclRule]) -> int:
        for rule in rules:
            for first, last in (rule.sport, rule.dport):
                if first > last:
                    raise ApiError(E.INVALID_VALUE_2, f"port range {first}-{last}")
        if index == INVALID_INDEX:
            index = next(i for i in range(len(self.acls) + 1) if i not in self.acls)
        elif index not in self.acls:
            raise ApiError(E.NO_SUCH_ENTRY, f"no ACL {index} to replace")
        self.acls[index] = Acl(index, tag, list(rules))
        return index

    def delete(self, index: int) -> None:
        if index not in self.acls:
            raise ApiError(E.NO_SUCH_ENTRY, f"no ACL {index}")
        if any(index in lists.ingress for lists in self.lists.values()):
            raise ApiError(E.ACL_IN_USE_INBOUND, f"ACL {index} is applied inbound")
        if any(index in lists.egress for lists in self.lists.values()):
            raise ApiError(E.ACL_IN_USE_OUTBOUND, f"ACL {index} is applied outbound")
        if any(index in acls for acls in self.contexts.values()):
            raise ApiError(E.ACL_IN_USE_BY_LOOKUP_CONTEXT, f"ACL {index} is in a lookup context")
        del self.acls[index]

    def set_interface_lists(self, sw_if_index: int, ingress: list[int], egress: list[int]) -> None:
        for index in (*ingress, *egress):
            if index not in self.acls:
                raise ApiError(E.NO_SUCH_ENTRY, f"ACL {index} is not defined")
        for direction in (ingress, egress):
            if len(set(direction)) != len(direction):
                raise ApiError(E.ENTRY_ALREADY_EXISTS, "an ACL is listed twice")
        if ingress or egress:
            self.lists[sw_if_index] = InterfaceLists(list(ingress), list(egress))
        else:
            self.lists.pop(sw_if_index, None)

    def set_context_acls(self, context: Hashable, acls: list[int]) -> bool:
        """acl_plugin_set_acl_vec_for_context: False (nothing changed) for an undefined ACL or
        one listed twice; VPP's callers ignore the answer."""
        if any(index not in self.acls for index in acls) or len(set(acls)) != len(acls):
            return False
        self.contexts[context] = list(acls)
        return True

    def put_context(self, context: Hashable) -> None:
        """acl_plugin_put_lookup_context_index: the context and its hold on its ACLs go."""
        self.contexts.pop(context, None)

    def interface_lists(self, sw_if_index: int) -> InterfaceLists:
        return self.lists.get(sw_if_index, InterfaceLists())

    def forget_interface(self, sw_if_index: int) -> None:
        self.lists.pop(sw_if_index, None)

    def snapshot(self) -> dict[str, object]:
        return {
            "acls": [{"index": a.index, "tag": a.tag, "rules": len(a.rules)}
                     for a in sorted(self.acls.values(), key=lambda a: a.index)],
            "interfaces": {str(idx): {"ingress": lists.ingress, "egress": lists.egress}
                           for idx, lists in sorted(self.lists.items())},
        }

"""ACL-based forwarding (the abf plugin), as VPP 24.06 keeps it (src/plugins/abf/abf_policy.c,
abf_itf_attach.c, abf_api.c); no I/O.

- A policy (by its u32 id) is an ACL index and a FIB path list. `policy_update` creates a
  missing one (the ACL is not checked) or adds paths to it: a path already there (the same
  next hop and interface, or table; weight and preference are not part of a path's identity) is
  not added again, and another ACL is INVALID_VALUE. `policy_delete` of an unknown id is
  INVALID_VALUE; it removes the given paths (those not there are ignored) and, with the last
  one, drops the API's hold on the policy.
- A policy lives while held: by the API from its creation until its last path goes, and by each
  attachment. A policy attached when its last path goes stays (without paths) until its last
  attachment goes; paths added to it then do not take the API's hold again, as in VPP.
- Attachments are keyed by (policy id, interface) - not by family - so a second one is
  ENTRY_ALREADY_EXISTS whatever its family; a missing one to remove is NO_SUCH_ENTRY. The
  interface is not checked (VPP does not). The attachments of an (interface, family) are kept in
  priority order, lowest first, and their ACLs, in that order, are the ACL lookup context of
  that (interface, family): while in it an ACL cannot be deleted (ACL_IN_USE_BY_LOOKUP_CONTEXT);
  an undefined ACL or one twice leaves the context as it was (VPP ignores that refusal).
- Paths are kept in VPP's order (fib_path_cmp_for_sort: preference, then path type - attached
  next hop, attached, recursive, deaggregate -, family, next hop, interface or table).
- Policies and attachments are walked in pool order.
Differences, where VPP 24.06 has no answer of its own: attaching an unknown policy (VPP asserts
in a debug build and reads an invalid pool element otherwise) is NO_SUCH_ENTRY; so is removing
an attachment with the other family (VPP finds it, then fails to find it in that family's list);
removing paths from a policy that has none left (VPP reads a freed path list) changes nothing.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Any

from kvmesh.vppemu import errors as E
from kvmesh.vppemu.acl import AclTable
from kvmesh.vppemu.addrindex import VppPool
from kvmesh.vppemu.errors import ApiError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
NO_INTERFACE = 0xFFFFFFFF
# fib_path_type, in the order VPP sorts paths by (fib_path.h)
ATTACHED_NEXT_HOP, ATTACHED, RECURSIVE, DEAG = 0, 1, 2, 5


@dataclass(frozen=True)
class FibPath:
    """A path as VPP keeps it: the next hop is the family's zero address when there is none,
    the table only counts without an interface."""

    next_hop: IPAddress
    sw_if_index: int = NO_INTERFACE
    table_id: int = 0
    weight: int = 1
    preference: int = 0

    @property
    def path_type(self) -> int:
        if self.sw_if_index != NO_INTERFACE:
            return ATTACHED if self.next_hop.is_unspecified else ATTACHED_NEXT_HOP
        return DEAG if self.next_hop.is_unspecified else RECURSIVE

    def identity(self) -> tuple[int, ...]:
        """fib_path_cmp: what makes two paths the same one (not weight or preference)."""
        where = self.sw_if_index if self.sw_if_index != NO_INTERFACE else self.table_id
        return (self.path_type, self.next_hop.version, int(self.next_hop), where)

    def sort_key(self) -> tuple[int, ...]:
        return (self.preference, *self.identity())


@dataclass
class Policy:
    index: int  # pool slot
    policy_id: int
    acl_index: int
    paths: list[FibPath]
    api_hold: bool = True
    attachments: int = 0

    def add_paths(self, paths: list[FibPath]) -> None:
        known = {p.identity() for p in self.paths}
        for path in paths:
            if path.identity() not in known:
                self.paths.append(path)
                known.add(path.identity())
        self.paths.sort(key=FibPath.sort_key)


@dataclass
class Attachment:
    index: int  # pool slot
    policy_id: int
    sw_if_index: int
    priority: int
    is_ipv6: bool
    acl_index: int  # the policy's, when attached


@dataclass
class Abf:
    acl: AclTable
    policies: dict[int, Policy] = field(default_factory=dict)  # by policy id
    attachments: dict[tuple[int, int], Attachment] = field(default_factory=dict)
    _policy_pool: VppPool = field(default_factory=VppPool)
    _attach_pool: VppPool = field(default_factory=VppPool)

    # ------------------------------------------------------------------ policies
    def policy_update(self, policy_id: int, acl_index: int, paths: list[FibPath]) -> None:
        policy = self.policies.get(policy_id)
        if policy is None:
            policy = Policy(self._policy_pool.get(), policy_id, acl_index, [])
            self.policies[policy_id] = policy
            policy.paths = sorted(paths, key=FibPath.sort_key)  # a new list: no dedup
            return
        if policy.acl_index != acl_index:
            raise ApiError(E.INVALID_VALUE, f"policy {policy_id} has ACL {policy.acl_index}")
        if policy.paths:
            policy.add_paths(paths)
        else:
            policy.paths = sorted(paths, key=FibPath.sort_key)

    def policy_delete(self, policy_id: int, paths: list[FibPath]) -> None:
        policy = self.policies.get(policy_id)
        if policy is None:
            raise ApiError(E.INVALID_VALUE, f"no policy {policy_id}")
        if not policy.paths:
            return
        gone = {p.identity() for p in paths}
        policy.paths = [p for p in policy.paths if p.identity() not in gone]
        if not policy.paths and policy.api_hold:
            policy.api_hold = False
            self._release_if_unheld(policy)

    def _release_if_unheld(self, policy: Policy) -> None:
        if not policy.api_hold and policy.attachments == 0:
            del self.policies[policy.policy_id]
            self._policy_pool.put(policy.index)

    # ------------------------------------------------------------------ attachments
    def attach(self, policy_id: int, sw_if_index: int, priority: int, is_ipv6: bool) -> None:
        policy = self.policies.get(policy_id)
        if policy is None:
            raise ApiError(E.NO_SUCH_ENTRY, f"no policy {policy_id}")
        if (policy_id, sw_if_index) in self.attachments:
            raise ApiError(E.ENTRY_ALREADY_EXISTS, "attached to this interface already")
        self.attachments[(policy_id, sw_if_index)] = Attachment(
            self._attach_pool.get(), policy_id, sw_if_index, priority, is_ipv6,
            policy.acl_index)
        policy.attachments += 1
        self._set_lookup_context(sw_if_index, is_ipv6)

    def detach(self, policy_id: int, sw_if_index: int, is_ipv6: bool) -> None:
        attachment = self.attachments.get((policy_id, sw_if_index))
        if attachment is None or attachment.is_ipv6 != is_ipv6:
            raise ApiError(E.NO_SUCH_ENTRY, "no such attachment")
        del self.attachments[(policy_id, sw_if_index)]
        self._attach_pool.put(attachment.index)
        self._set_lookup_context(sw_if_index, is_ipv6)
        policy = self.policies[policy_id]
        policy.attachments -= 1
        self._release_if_unheld(policy)

    def attached(self, sw_if_index: int, is_ipv6: bool) -> list[Attachment]:
        """The attachments of an (interface, family), in VPP's order: priority, lowest first."""
        found = [a for a in self.attachments.values()
                 if a.sw_if_index == sw_if_index and a.is_ipv6 == is_ipv6]
        return sorted(found, key=lambda a: a.priority)

    def _set_lookup_context(self, sw_if_index: int, is_ipv6: bool) -> None:
        attached = self.attached(sw_if_index, is_ipv6)
        context = ("abf", sw_if_index, is_ipv6)
        if not attached:
            self.acl.put_context(context)
        elif not self.acl.set_context_acls(context, [a.acl_index for a in attached]):
            self.acl.contexts.setdefault(context, [])  # acquired, its ACLs unchanged

    # ------------------------------------------------------------------ dumps
    def policies_in_order(self) -> list[Policy]:
        return sorted(self.policies.values(), key=lambda p: p.index)

    def attachments_in_order(self) -> list[Attachment]:
        return sorted(self.attachments.values(), key=lambda a: a.index)

    def snapshot(self) -> dict[str, Any]:
        return {
            "policies": [{"id": p.policy_id, "acl": p.acl_index, "paths": len(p.paths)}
                         for p in self.policies_in_order()],
            "attachments": [{"policy": a.policy_id, "sw_if_index": a.sw_if_index,
                             "priority": a.priority, "is_ipv6": a.is_ipv6}
                            for a in self.attachments_in_order()],
        }

"""The VPP calls of the ABF model (abf.api of VPP 24.06): a policy is `abf_policy_add_del`
(paths added to, or removed from, the policy of an id), an attachment `abf_itf_attach_add_del`;
both read back by their dumps."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from southbound.vpp.binapi import RoutePath, route_path

if TYPE_CHECKING:
    from southbound.vpp.connection import VppConnection


@dataclass(frozen=True)
class AbfPolicyDetails:
    policy_id: int
    acl_index: int
    paths: tuple[RoutePath, ...]


@dataclass(frozen=True)
class AbfAttachDetails:
    policy_id: int
    sw_if_index: int
    priority: int
    is_ipv6: bool


class AbfApi:
    def __init__(self, conn: VppConnection) -> None:
        self.conn = conn

    def add_del_paths(self, policy_id: int, acl_index: int, paths: list[dict[str, Any]],
                      is_add: bool) -> None:
        """Add paths to a policy (creating it), or remove them (the last one removes it)."""
        self.conn.call("abf_policy_add_del", is_add=is_add, policy={
            "policy_id": policy_id, "acl_index": acl_index, "n_paths": len(paths),
            "paths": paths})

    def attach(self, policy_id: int, sw_if_index: int, priority: int, is_ipv6: bool,
               is_add: bool) -> None:
        self.conn.call("abf_itf_attach_add_del", is_add=is_add, attach={
            "policy_id": policy_id, "sw_if_index": sw_if_index, "priority": priority,
            "is_ipv6": is_ipv6})

    def policies(self) -> list[AbfPolicyDetails]:
        return [AbfPolicyDetails(d.policy.policy_id, d.policy.acl_index,
                                 tuple(route_path(p) for p in d.policy.paths))
                for d in self.conn.dump("abf_policy_dump")]

    def attachments(self) -> list[AbfAttachDetails]:
        return [AbfAttachDetails(d.attach.policy_id, d.attach.sw_if_index, d.attach.priority,
                                 bool(d.attach.is_ipv6))
                for d in self.conn.dump("abf_itf_attach_dump")]

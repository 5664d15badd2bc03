"""Bond interfaces and their members, as VPP 24.06's bonding code keeps them
(src/vnet/bonding/cli.c, bond_api.c).

- `bond_create2`: a mode out of 1..5 or a load-balance algorithm above L23 is INVALID_ARGUMENT;
  the bond is `BondEthernet<id>`, `id` the one asked for or else its device instance (the lowest
  free), INSTANCE_IN_USE when that id is taken; round-robin, broadcast and active-backup force
  their own algorithm (RR, BC, AB); an ethernet interface (MTU 9000), link up.
- `bond_add_member`: the bond must be a bond (INVALID_INTERFACE), the member not a member yet
  (VALUE_EXIST) and not a bond itself (INVALID_INTERFACE).
- `bond_detach_member`: an interface that is no member is INVALID_INTERFACE.
- `bond_delete`: anything but a bond is INVALID_SW_IF_INDEX; its members are detached.
Simplifications: the LACP plugin counts as loaded and no partner ever answers (a LACP bond has
no active member), a member is active in the other modes while it is admin up, an interface
deleted while a member leaves its bond.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kvmesh.vppemu import errors as E
from kvmesh.vppemu.addrindex import InstancePool
from kvmesh.vppemu.errors import ApiError
from kvmesh.vppemu.plane import Plane

MODE_ROUND_ROBIN, MODE_ACTIVE_BACKUP, MODE_XOR, MODE_BROADCAST, MODE_LACP = range(1, 6)
LB_L2, LB_L34, LB_L23, LB_RR, LB_BC, LB_AB = range(6)
FORCED_LB = {MODE_ROUND_ROBIN: LB_RR, MODE_BROADCAST: LB_BC, MODE_ACTIVE_BACKUP: LB_AB}
INVALID_INDEX = 0xFFFFFFFF


@dataclass
class Bond:
    bond_id: int
    dev_instance: int
    mode: int
    lb: int
    numa_only: bool
    gso: bool
    members: list[int] = field(default_factory=list)  # member sw_if_index, in order added


@dataclass(frozen=True)
class Member:
    bond: int  # the bond's sw_if_index
    passive: bool
    long_timeout: bool


class Bonds:
    """The bonds of one dataplane and who is a member of which."""

    def __init__(self, dataplane: Plane) -> None:
        self._dp = dataplane
        self.bonds: dict[int, Bond] = {}  # bond sw_if_index -> bond
        self.members: dict[int, Member] = {}  # member sw_if_index -> membership
        self._dev_instances = InstancePool()

    def create(self, mode: int, lb: int, numa_only: bool, gso: bool, mac: bytes | None,
               wanted_id: int) -> int:
        if not MODE_ROUND_ROBIN <= mode <= MODE_LACP:
            raise ApiError(E.INVALID_ARGUMENT, f"invalid bond mode {mode}")
        if lb > LB_L23:
            raise ApiError(E.INVALID_ARGUMENT, f"invalid load-balance {lb}")
        dev_instance = self._dev_instances.take()
        bond_id = dev_instance if wanted_id == INVALID_INDEX else wanted_id
        if any(b.bond_id == bond_id for b in self.bonds.values()):
            self._dev_instances.release(dev_instance)
            raise ApiError(E.INSTANCE_IN_USE, f"BondEthernet{bond_id} exists")
        iface = self._dp.add_ethernet_interface("bond", f"BondEthernet{bond_id}", "bond", mac,
                                                instance=bond_id)
        self.bonds[iface.sw_if_index] = Bond(bond_id, dev_instance, mode,
                                             FORCED_LB.get(mode, lb), numa_only, gso)
        return iface.sw_if_index

    def delete(self, sw_if_index: int) -> Bond:
        """Forget a bond (the dataplane removes its interface); INVALID_SW_IF_INDEX when the
        interface is not a bond."""
        bond = self.bonds.get(sw_if_index)
        if bond is None:
            raise ApiError(E.INVALID_SW_IF_INDEX, f"sw_if_index {sw_if_index} is not a bond")
        for member in list(bond.members):
            self.members.pop(member, None)
        del self.bonds[sw_if_index]
        self._dev_instances.release(bond.dev_instance)
        return bond

    def add_member(self, member: int, bond_sw_if_index: int, passive: bool,
                   long_timeout: bool) -> None:
        self._dp.interface(member)  # VALIDATE_SW_IF_INDEX
        bond = self.bonds.get(bond_sw_if_index)
        if bond is None:
            raise ApiError(E.INVALID_INTERFACE, "bond interface not found")
        if member in self.members:
            raise ApiError(E.VALUE_EXIST, "interface was already added as member")
        if member in self.bonds:
            raise ApiError(E.INVALID_INTERFACE, "bond interface cannot be added as member")
        self.members[member] = Member(bond_sw_if_index, passive, long_timeout)
        bond.members.append(member)

    def detach_member(self, member: int) -> None:
        self._dp.interface(member)  # VALIDATE_SW_IF_INDEX
        membership = self.members.pop(member, None)
        if membership is None:
            raise ApiError(E.INVALID_INTERFACE, "interface was not a member")
        self.bonds[membership.bond].members.remove(member)

    def forget_interface(self, sw_if_index: int) -> None:
        """An interface deleted while a member leaves its bond."""
        membership = self.members.pop(sw_if_index, None)
        if membership is not None and membership.bond in self.bonds:
            self.bonds[membership.bond].members.remove(sw_if_index)

    def active_members(self, bond: Bond) -> int:
        if bond.mode == MODE_LACP:
            return 0  # no LACP partner ever answers here
        return sum(1 for m in bond.members if self._dp.interfaces[m].admin_up)

    def snapshot(self) -> list[dict[str, Any]]:
        return [{"sw_if_index": idx, "id": b.bond_id, "mode": b.mode, "lb": b.lb,
                 "members": list(b.members)} for idx, b in sorted(self.bonds.items())]

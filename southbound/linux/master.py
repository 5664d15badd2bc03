"""Descriptor of ``linux/interface/<name>/master``: enslaving an interface to its bridge.

Derived from the interface value's ``master`` field and dependent on the bridge (a kvmesh
interface or a host link of that name), so the interface exists and works on its own while the
bridge is missing, and joins it as soon as it exists. Removing the binding releases the interface
only if it is still enslaved to *that* bridge (it may have been moved meanwhile).
"""

from __future__ import annotations

from typing import Any

from scheduler import Dependency
from southbound.linux import keys
from southbound.linux.context import PluginContext
from southbound.linux.interface import link_dependency

NAME = "linux-interface-master"


class MasterDescriptor:
    name = NAME

    def __init__(self, context: PluginContext) -> None:
        self.ctx = context

    @staticmethod
    def key_selector(key: str) -> bool:
        return keys.parse_master_key(key) is not None

    @staticmethod
    def dependencies(key: str, value: Any) -> list[Dependency]:
        bridge = value.get("master") if isinstance(value, dict) else None
        if not bridge:
            return []
        return [link_dependency(f"bridge {bridge}", bridge)]

    def create(self, key: str, value: Any) -> None:
        self._enslave(key, value)

    def update(self, key: str, old: Any, new: Any, metadata: Any) -> None:
        self._enslave(key, new)

    def delete(self, key: str, value: Any, metadata: Any) -> None:
        name = value["interface"]
        link = self.ctx.client.get_link(name)
        if link is None or link.master is None:
            return
        bridge = self.ctx.links.lookup(value["master"])
        if bridge is not None and link.master != bridge:
            return  # enslaved elsewhere since: not this binding's to undo
        self.ctx.client.set_link(link.index, f"release {name} from bridge {value['master']}",
                                 master=0)

    def _enslave(self, key: str, value: Any) -> None:
        name, bridge = value["interface"], value["master"]
        purpose = f"enslave {name} to bridge {bridge}"
        bridge_index = self.ctx.links.require(bridge, purpose)
        self.ctx.links.with_index(
            name, purpose,
            lambda index: self.ctx.client.set_link(index, purpose, master=bridge_index))

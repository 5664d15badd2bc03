"""The interface types issue 19 added to `vpp/interface/<name>`: sub-interfaces, VXLAN tunnels
and memif, i.e. what the interface descriptor does differently for each of them."""

from __future__ import annotations

from typing import Any

from scheduler import Dependency


def type_dependencies(v: dict[str, Any]) -> list[Dependency]:
    return []

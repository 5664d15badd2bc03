"""Dependencies on a link, shared by every Linux model: "depends on link <dev>".

A link is either a kvmesh interface (``linux/interface/<name>``, the model in
``southbound/linux/models/interface.py``) or a link kvmesh does not own, reported as the
OBTAINED ``linux/interface/host/<name>``; a value that needs the link waits (PENDING) until one
of them exists.
"""

from __future__ import annotations

from scheduler import Dependency
from southbound.linux import keys

# The interface model's descriptor (``southbound/linux/models/interface.py``): a model whose
# Retrieve reuses the link dump names it in ``retrieve_dependencies``.
NAME = "linux-interface"


def link_dependency(label: str, name: str) -> Dependency:
    """Satisfied by a kvmesh interface or a host link of that name."""
    wanted = (keys.interface_key(name), keys.host_key(name))
    return Dependency(label=label, any_of=lambda key: key in wanted, key_prefixes=wanted)

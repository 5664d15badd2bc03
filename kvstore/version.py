"""The software version: the one place it is written.

setup.cfg reads it (``version = attr:``), so the installed metadata
(``importlib.metadata.version("kvmesh")``), ``kvmesh --version`` and what a node reports to its
peers all agree. It lives in the lowest layer because the KvStore node reports it too, and
imports only run upward (kvstore <- scheduler <- southbound <- kvmesh).

Released versions and the commits they were cut from are listed in tests/compat/RELEASES.
"""

__version__ = "0.5.0.dev0"

# The KvStore wire protocol this release speaks, and the oldest one it still speaks. DESIGN
# (docs/compatibility.md): fields are only added to if/KvStore.thrift (optional, new ids), which
# an older node skips, so adding one does not change the protocol. PROTOCOL_VERSION is bumped
# only when an older node could misread what this one sends (a field's meaning changes, a new
# command is required, a value an old node would merge wrongly...); MIN_PROTOCOL_VERSION rises
# when this release stops speaking an old protocol. A 0.4.0 node sends no version: protocol 1.
# Peers agree on the highest protocol both speak, or refuse the peering (kvstore/protocol.py).
PROTOCOL_VERSION = 1
MIN_PROTOCOL_VERSION = 1

"""The software version: the one place it is written.

setup.cfg reads it (``version = attr:``), so the installed metadata
(``importlib.metadata.version("kvmesh")``), ``kvmesh --version`` and what a node reports to its
peers all agree. It lives in the lowest layer because the KvStore node reports it too, and
imports only run upward (kvstore <- scheduler <- southbound <- kvmesh).

Released versions and the commits they were cut from are listed in tests/compat/RELEASES.
"""

__version__ = "0.5.0.dev0"

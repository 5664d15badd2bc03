"""The three pyroute2 names the Linux southbound uses, without the rest of pyroute2.

Importing anything from pyroute2 first runs ``pyroute2/__init__.py``, which imports every API
of the library (NDB with its sqlite3 store, IPDB, IPSet, IPVS, nl80211, WireGuard, devlink,
plan9, ...: 163 modules, unittest and multiprocessing among them). ``IPRoute``, ``IPRSocket`` and
``NetlinkError`` need 99 of them; the others cost an agent ~5 MiB of RSS (issue 21).

So, when pyroute2 is not loaded yet, this module puts the package in ``sys.modules`` without
running its ``__init__`` (a list of imports: no side effect is skipped) and imports the three
from their submodules. The package's own names (``pyroute2.NDB``, ``from pyroute2 import
IPRoute``) still work anywhere in the process: the first one asked for runs the real
``__init__`` (a module ``__getattr__``, PEP 562), which then loads everything as usual.
"""

from __future__ import annotations

import importlib.util
import sys
import threading
from typing import Any

_init_lock = threading.RLock()  # re-entrant: the package's __init__ may look up its own names


def _register_package_without_init() -> None:
    spec = importlib.util.find_spec("pyroute2")
    if spec is None or spec.loader is None:
        raise ImportError("pyroute2 is not installed", name="pyroute2")
    loader = spec.loader
    package = importlib.util.module_from_spec(spec)  # __path__ set, body not run
    ran = False

    def package_getattr(name: str) -> Any:
        nonlocal ran
        if importlib.util.find_spec(f"pyroute2.{name}") is not None:
            # A submodule (`from pyroute2 import config`, in pyroute2's own modules): not
            # having it yet, the import system imports it (and then sets it here).
            raise AttributeError(name)
        with _init_lock:
            if not ran:
                ran = True
                loader.exec_module(package)
        try:
            return package.__dict__[name]
        except KeyError:
            raise AttributeError(f"module 'pyroute2' has no attribute {name!r}") from None

    package.__getattr__ = package_getattr  # type: ignore[method-assign]
    sys.modules["pyroute2"] = package


if "pyroute2" not in sys.modules:
    _register_package_without_init()

# Below the registration on purpose: with it, these imports run no pyroute2/__init__.py.
from pyroute2.iproute.linux import IPRoute  # noqa: E402
from pyroute2.netlink.exceptions import NetlinkError  # noqa: E402
from pyroute2.netlink.rtnl.iprsocket import IPRSocket  # noqa: E402

__all__ = ["IPRSocket", "IPRoute", "NetlinkError"]

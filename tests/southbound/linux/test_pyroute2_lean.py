"""southbound.linux.pyroute2_lean: the Linux southbound's three pyroute2 names without the rest
of pyroute2, and pyroute2's own names still there for whoever asks (each case in a fresh
interpreter: what is imported is the point)."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

SAME_NAMES = """
import pyroute2
from pyroute2 import NDB  # a name of the package's whole surface: its __init__ runs now
same = [getattr(pyroute2, name) is getattr(lean, name)
        for name in ("IPRoute", "IPRSocket", "NetlinkError")]
"""


def run(code: str) -> Any:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_the_southbound_loads_only_what_it_uses_and_pyroute2_stays_whole() -> None:
    out = run("import json, sys\n"
              "import southbound.linux.netlink\n"
              "from southbound.linux import pyroute2_lean as lean\n"
              "first = sorted(m for m in sys.modules if m.startswith('pyroute2'))\n"
              + SAME_NAMES +
              "print(json.dumps({'first': first, 'same': same,\n"
              "                  'ndb': 'pyroute2.ndb.main' in sys.modules}))\n")
    assert "pyroute2.iproute.linux" in out["first"]
    for whole_surface_only in ("pyroute2.ndb.main", "pyroute2.ipdb", "pyroute2.ipset",
                               "pyroute2.netlink.nl80211", "pyroute2.plan9.server"):
        assert whole_surface_only not in out["first"]
    assert out["same"] == [True, True, True]
    assert out["ndb"]


def test_with_pyroute2_already_loaded_the_names_are_its_own() -> None:
    out = run("import json, sys\n"
              "import pyroute2\n"
              "from southbound.linux import pyroute2_lean as lean\n"
              + SAME_NAMES +
              "print(json.dumps({'same': same}))\n")
    assert out["same"] == [True, True, True]

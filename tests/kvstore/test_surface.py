"""kvstore's public surface: code outside kvstore/ imports `kvstore` itself, not the modules
behind it (the core, the node's shells, the generated Thrift types)."""

from __future__ import annotations

import ast
from pathlib import Path

import kvstore

ROOT = Path(__file__).parents[2]
# The chaos simulation drives the sans-I/O core (KvStoreDb, FloodProtocol, SyncSession) with
# no node around it: it is the core's own test harness, so it may reach behind the surface.
CORE_HARNESS = ("kvmesh/chaos/sim.py", "kvmesh/chaos/model.py")


def _internal_imports(path: Path) -> list[str]:
    found: list[str] = []
    text = path.read_text()
    if "kvstore" not in text:
        return found
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("kvstore."):
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}: from {node.module} import")
        elif isinstance(node, ast.ImportFrom) and node.module == "kvstore":
            found += [f"{path.relative_to(ROOT)}:{node.lineno}: {a.name} is not in the surface"
                      for a in node.names if a.name not in kvstore.__all__]
        elif isinstance(node, ast.Import):
            found += [f"{path.relative_to(ROOT)}:{node.lineno}: import {a.name}"
                      for a in node.names if a.name.startswith("kvstore.")]
    return found


def test_outside_code_imports_only_the_surface() -> None:
    files = [p for top in ("kvmesh", "scheduler", "southbound") for p in (ROOT / top).rglob("*.py")
             if str(p.relative_to(ROOT)) not in CORE_HARNESS]
    assert any("kvmesh/cli" in str(p) for p in files) and any("agent" in str(p) for p in files)
    assert [hit for path in files for hit in _internal_imports(path)] == []


def test_the_surface_is_whole() -> None:
    for name in kvstore.__all__:
        assert getattr(kvstore, name) is not None, name
    from kvstore.client import KvStoreClient
    from kvstore.gen.kvstore_thrift.ttypes import Value

    assert kvstore.KvStoreClient is KvStoreClient and kvstore.Value is Value

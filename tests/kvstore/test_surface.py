"""kvstore's public surface: code outside kvstore/ imports `kvstore` itself, not the modules
behind it (the core, the node's shells, the generated Thrift types)."""

from __future__ import annotations

import ast
from pathlib import Path

import kvstore
from tests.util import modules_loaded

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


def test_lazy_surface_agrees_with_its_type_checking_imports() -> None:
    """kvstore/__init__.py names each public name twice (for type checkers, and where to load it
    from on first use): both lists and __all__ agree, and every name loads."""
    import ast
    from pathlib import Path

    import kvstore

    tree = ast.parse(Path(kvstore.__file__).read_text())
    typed: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            for stmt in node.body:
                assert isinstance(stmt, ast.ImportFrom)
                typed.update(alias.name for alias in stmt.names)
    assert typed == set(kvstore.__all__) == set(kvstore._MODULE_OF)
    for name in kvstore.__all__:
        assert getattr(kvstore, name) is not None


def test_the_client_surface_does_not_load_the_node() -> None:
    assert modules_loaded("from kvstore import KvStoreClient, Value, stats",
                          ("kvstore.node", "kvstore.storage", "sqlite3")) == set()

"""The agent stays split along its jobs: no class in kvmesh/agent/ grows past 20 methods."""

from __future__ import annotations

import ast
from pathlib import Path

import kvmesh.agent

MAX_METHODS = 20


def test_no_agent_class_keeps_more_than_20_methods() -> None:
    too_big = []
    for path in sorted(Path(kvmesh.agent.__file__).parent.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                methods = [f for f in node.body
                           if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)]
                if len(methods) > MAX_METHODS:
                    too_big.append(f"{path.name}:{node.name} ({len(methods)} methods)")
    assert not too_big, too_big

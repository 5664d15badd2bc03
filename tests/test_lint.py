"""The code base stays ruff- and mypy-clean (configuration in pyproject.toml and setup.cfg)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def tool(name: str) -> str:
    found = BIN / name
    if found.exists():
        return str(found)
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} is not installed")
    return path


def test_ruff_is_clean() -> None:
    result = subprocess.run([tool("ruff"), "check", "--quiet", "."], cwd=REPO,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_is_clean() -> None:
    result = subprocess.run([tool("mypy")], cwd=REPO, capture_output=True, text=True,
                            timeout=600)  # what setup.cfg's [mypy] `files` lists
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-2000:]

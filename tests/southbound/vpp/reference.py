"""Where VPP 24.06's generated API definitions are (reference data, outside the repository).

`../shared/reference/vpp_real/` beside the repository (for a git worktree: beside its main
checkout too), or the directory named by `KVMESH_VPP_REFERENCE`. Tests that need it skip with a
message when it is absent.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[3]
RELATIVE = Path("shared") / "reference" / "vpp_real"
SECTIONS = ("messages", "types", "unions", "enums", "enumflags")


def _main_checkout(repo: Path) -> Path | None:
    """The main checkout of a git worktree (whose `.git` is a file naming the git dir)."""
    git = repo / ".git"
    if not git.is_file():
        return None
    text = git.read_text().strip()
    if not text.startswith("gitdir:"):
        return None
    gitdir = Path(text.split(":", 1)[1].strip())  # <main>/.git/worktrees/<name>
    return gitdir.parents[2] if len(gitdir.parents) > 2 else None


def reference_dir() -> Path | None:
    candidates = []
    if os.environ.get("KVMESH_VPP_REFERENCE"):
        candidates.append(Path(os.environ["KVMESH_VPP_REFERENCE"]))
    candidates.append(REPO.parent / RELATIVE)
    main = _main_checkout(REPO)
    if main is not None:
        candidates.append(main.parent / RELATIVE)
    for candidate in candidates:
        if (candidate / "memclnt.api.json").is_file():
            return candidate
    return None


def require_reference_dir() -> Path:
    found = reference_dir()
    if found is None:
        pytest.skip(f"VPP 24.06 reference definitions not found ({REPO.parent / RELATIVE}; "
                    "set KVMESH_VPP_REFERENCE to compare against them)")
    return found


def without_comment(item: list[Any]) -> list[Any]:
    """A definition as compared: the generator's doc comment is not part of the contract."""
    if item and isinstance(item[-1], dict) and "crc" in item[-1]:
        return [*item[:-1], {k: v for k, v in item[-1].items() if k != "comment"}]
    return item


class Reference:
    """Every definition of the reference files, by section and name."""

    def __init__(self, directory: Path) -> None:
        self.definitions: dict[tuple[str, str], list[Any]] = {}
        self.aliases: dict[str, Any] = {}
        self.services: dict[str, Any] = {}
        for path in sorted(directory.glob("*.api.json")):
            doc = json.loads(path.read_text())
            for section in SECTIONS:
                for item in doc.get(section, []):
                    self.definitions[(section, item[0])] = without_comment(item)
            self.aliases.update(doc.get("aliases", {}))
            self.services.update(doc.get("services", {}))

    def section_of(self, name: str) -> str | None:
        for section in SECTIONS:
            if (section, name) in self.definitions:
                return section
        return None

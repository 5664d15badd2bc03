"""Fixtures of the compatibility tests: released versions' code, run from the repository's
history (tools/compat/release_tree.py). A clone that lacks a release's commit fetches it, or the
tests FAIL saying so: compatibility is never skipped."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tools.compat.release_tree import (
    ReleaseTreeError,
    export_release,
    imported_from,
    release_env,
    releases,
)

COMPAT_DIR = Path(__file__).resolve().parent


def corpus_dir(version: str) -> Path:
    return COMPAT_DIR / version


@pytest.fixture(scope="session")
def release_tree(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """release_tree(version): that release's packages in a directory of their own, checked to
    be what its processes import (cwd: the directory's parent, outside both trees)."""
    made: dict[str, Path] = {}

    def get(version: str) -> Path:
        if version not in made:
            root = tmp_path_factory.mktemp(f"release-{version}")
            try:
                tree = export_release(version, root / "tree")
                imported_from(tree, root)
            except ReleaseTreeError as exc:
                pytest.fail(f"release {version}: {exc}")
            made[version] = tree
        return made[version]

    return get


def release_launch_env(tree: Path) -> dict[str, str]:
    """The environment a release's process is started with (plus PYTHONUNBUFFERED for logs)."""
    return {**release_env(tree), "PYTHONUNBUFFERED": "1"}


ALL_RELEASES = list(releases())

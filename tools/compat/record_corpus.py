"""Record the golden corpus of a release: `.venv/bin/python -m tools.compat.record_corpus VERSION`.

Cut a release (docs/compatibility.md, "Cutting a release"): add `VERSION COMMIT` to
tests/compat/RELEASES, run this, commit tests/compat/VERSION/. The corpus is written by the
release's own code: its packages are exported from the repository's history into a temporary
directory (tools/compat/release_tree.py) and tools/compat/recorder.py runs with that tree first
on the path, with this venv's interpreter and dependencies, from a directory outside both trees.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from tools.compat.release_tree import REPO, export_release, imported_from, release_env, releases

RECORDER = Path(__file__).with_name("recorder.py")


def record(version: str, out: Path) -> None:
    commit = releases()[version]
    work = Path(tempfile.mkdtemp(prefix="kvm-corpus-"))
    try:
        tree = export_release(version, work / "tree")
        where = imported_from(tree, work)
        print(f"release {version} ({commit[:12]}) exported; its code imports from {where}")
        staging = work / "out"
        # The recorder is copied out of this tree: run from here, its directory would be first
        # on sys.path (harmless today, but nothing of this tree should be importable there).
        recorder = work / "recorder.py"
        shutil.copy(RECORDER, recorder)
        subprocess.run([sys.executable, str(recorder), str(staging), "--version", version,
                        "--commit", commit], cwd=work, check=True,
                       env={**os.environ, **release_env(tree)})
        if out.exists():
            shutil.rmtree(out)
        shutil.copytree(staging, out)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    sizes = {p.name: p.stat().st_size for p in sorted(out.iterdir())}
    print(f"corpus of {version} in {out}: {sizes}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("version", help="a version listed in tests/compat/RELEASES")
    parser.add_argument("--out", type=Path, help="default: tests/compat/VERSION")
    args = parser.parse_args()
    record(args.version, args.out or REPO / "tests" / "compat" / args.version)
    return 0


if __name__ == "__main__":
    sys.exit(main())

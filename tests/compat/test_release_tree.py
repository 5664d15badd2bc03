"""tools/compat/release_tree.py's unpacking: safe on an interpreter with tarfile's "data" filter
(3.11.4 and later) and on one without it (Debian 12's 3.11.2)."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from tools.compat.release_tree import ReleaseTreeError, extract_safely


def _archive(*members: tuple[str, bytes | None, bytes]) -> io.BytesIO:
    """(name, symlink target or None, content) each."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, link, content in members:
            info = tarfile.TarInfo(name)
            if link is not None:
                info.type, info.linkname = tarfile.SYMTYPE, link.decode()
                archive.addfile(info)
            else:
                info.size = len(content)
                archive.addfile(info, io.BytesIO(content))
    buffer.seek(0)
    return buffer


@pytest.mark.parametrize("with_filter", [True, False])
def test_plain_files_are_unpacked_and_an_escaping_member_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, with_filter: bool) -> None:
    if not with_filter:
        monkeypatch.delattr(tarfile, "data_filter", raising=False)
    elif not hasattr(tarfile, "data_filter"):
        pytest.skip("this interpreter's tarfile has no filters (before 3.11.4)")
    good = _archive(("kvstore/a.py", None, b"A = 1\n"), ("kvmesh/b/c.py", None, b""))
    with tarfile.open(fileobj=good, mode="r|") as archive:
        extract_safely(archive, tmp_path / "ok")
    assert (tmp_path / "ok" / "kvstore" / "a.py").read_bytes() == b"A = 1\n"
    assert (tmp_path / "ok" / "kvmesh" / "b" / "c.py").is_file()
    for bad in (_archive(("../outside.py", None, b"x")),
                _archive(("kvstore/link", b"/etc/passwd", b""))):
        with pytest.raises((ReleaseTreeError, tarfile.TarError)), \
                tarfile.open(fileobj=bad, mode="r|") as archive:
            extract_safely(archive, tmp_path / "bad")
    assert not (tmp_path / "outside.py").exists()

"""The committed generated code must match what `thrift` produces from if/KvStore.thrift."""

from __future__ import annotations

import filecmp
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
GEN = REPO / "kvstore" / "gen" / "kvstore_thrift"


@pytest.mark.skipif(
    shutil.which("thrift") is None,
    reason="thrift compiler not installed (Debian: apt-get install thrift-compiler)",
)
def test_generated_code_is_current(tmp_path: Path) -> None:
    subprocess.run(
        [str(REPO / "tools" / "gen_thrift.sh"), str(tmp_path)], check=True, cwd=REPO
    )
    fresh = tmp_path / "kvstore_thrift"
    fresh_files = sorted(p.name for p in fresh.iterdir() if p.suffix == ".py")
    committed_files = sorted(p.name for p in GEN.iterdir() if p.suffix == ".py")
    assert fresh_files == committed_files
    _, mismatch, errors = filecmp.cmpfiles(fresh, GEN, fresh_files, shallow=False)
    assert not mismatch and not errors, (
        f"kvstore/gen is stale for {mismatch + errors}: run tools/gen_thrift.sh and commit"
    )


def test_generated_code_uses_slots_and_accelerated_protocol() -> None:
    from thrift.protocol import fastbinary  # the C extension must be importable

    from kvstore.gen.kvstore_thrift.constants import TTL_INFINITY
    from kvstore.gen.kvstore_thrift.ttypes import Value

    assert fastbinary.encode_binary is not None
    assert Value.__slots__ == ("version", "originator_id", "value", "ttl_ms", "ttl_version", "hash")
    assert Value().ttl_ms == TTL_INFINITY

"""docs/linux.md's table of kernel refusals says what southbound/linux/errors.py does."""

from __future__ import annotations

import errno
from pathlib import Path

from southbound.linux.errors import TRANSIENT_ERRNOS

DOC = Path(__file__).resolve().parents[3] / "docs" / "linux.md"


def test_the_doc_lists_each_retriable_errno_as_retriable_and_no_other() -> None:
    """ENETUNREACH was retried (RETRYING for minutes) while the doc said 'not retriable'."""
    rows = [line for line in DOC.read_text().splitlines() if line.startswith("| ")]
    retriable = " ".join(row for row in rows if row.endswith("retriable failure |")
                         or "| retriable failure" in row)
    not_retriable = " ".join(row for row in rows if "not retriable" in row)
    for code in TRANSIENT_ERRNOS:
        name = f"`{errno.errorcode[code]}`"
        assert name in retriable, f"{name} is retried but docs/linux.md does not say so"
        assert name not in not_retriable, f"docs/linux.md calls {name} not retriable"

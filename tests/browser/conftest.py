"""Browser tests: Debian's Chromium driven by Playwright for Python (marker `browser`).

Playwright's own browser download cannot work here: the tests launch `/usr/bin/chromium`
(tools/setup.sh installs it). A failing test leaves a screenshot and the page's HTML in
`<pytest basetemp>/browser-artifacts/`, named after the test (the path is printed).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kvmesh.netlab import in_namespace

CHROMIUM = "/usr/bin/chromium"

needs_browser = pytest.mark.skipif(
    not os.path.exists(CHROMIUM) or shutil.which("dot") is None,
    reason="needs Debian's chromium and Graphviz (tools/setup.sh)")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[Any]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    setattr(item, f"report_{report.when}", report)


@pytest.fixture(scope="session")
def playwright() -> Iterator[Any]:
    """One Playwright for the session (its sync API runs one instance per thread)."""
    playwright_api = pytest.importorskip("playwright.sync_api")
    with playwright_api.sync_playwright() as started:
        yield started


@contextlib.contextmanager
def chromium_in(playwright: Any, namespace: str, directory: Path) -> Iterator[Any]:
    """Chromium running inside `namespace` (kvmesh.netlab.in_namespace): there it does not see
    the host's links come and go with other tests' namespaces, which makes it abort requests
    (ERR_NETWORK_CHANGED)."""
    launched = playwright.chromium.launch(
        executable_path=str(in_namespace(namespace, CHROMIUM, directory)))
    try:
        yield launched
    finally:
        launched.close()


def open_page(browser: Any, request: pytest.FixtureRequest,
              tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A fresh browser context (no cookies) and page; on failure its screenshot and HTML."""
    context = browser.new_context(ignore_https_errors=True)  # the cluster's own CA
    opened = context.new_page()
    opened.set_default_timeout(10_000)
    try:
        yield opened
    finally:
        report = getattr(request.node, "report_call", None)
        if report is not None and report.failed:
            artifacts = tmp_path_factory.getbasetemp() / "browser-artifacts"
            artifacts.mkdir(exist_ok=True)
            stem = request.node.name.replace("/", "_")
            for target in context.pages:
                index = context.pages.index(target)
                shot = artifacts / f"{stem}-{index}.png"
                target.screenshot(path=str(shot), full_page=True)
                Path(artifacts / f"{stem}-{index}.html").write_text(target.content())
                print(f"browser artifact: {shot}")
        context.close()

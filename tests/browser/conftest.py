"""Headless Chromium for the browser tests, driven by Playwright.

Playwright never downloads a browser here: it launches the system Chromium (Debian's
``/usr/bin/chromium``, or ``$NSIGHT_MAGIC_CHROMIUM``) with every background-network feature
off, since the machines running these tests have no internet (without those flags Chromium
keeps retrying its update/sync/field-trial endpoints). When Chromium or Playwright is missing the
tests skip with the reason, so ``make test`` passes on a machine without them.

Screenshots go to ``build/screenshots/`` (git-ignored) for a person to look at."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
SCREENSHOTS = REPO / "build" / "screenshots"
CHROMIUM = Path(os.environ.get("NSIGHT_MAGIC_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    # Keep each phase's report on the test item, so fixtures can react to a failed test
    # (a screenshot of the page as it was).
    report = yield
    setattr(item, f"report_{report.when}", report)
    return report


def failed(request: pytest.FixtureRequest) -> bool:
    report = getattr(request.node, "report_call", None)
    return report is not None and report.failed


def require(module: str) -> None:
    """Skip the test (with the reason) when ``module`` is not installed."""
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed (pip install '.[browser]')")


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    """One headless system Chromium for the session."""
    if not CHROMIUM.exists():
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium)")
    require("playwright")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        chromium = pw.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
        )
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """A fresh browser context and page per test (no shared cookies or storage)."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    try:
        yield context.new_page()
    finally:
        context.close()


@pytest.fixture(scope="session")
def screenshots() -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    return SCREENSHOTS


@pytest.fixture(scope="session")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One JupyterLab server for the session's browser tests (``lab.start_lab``)."""
    require("jupyterlab")
    require("ipykernel")
    from .lab import start_lab

    root = tmp_path_factory.mktemp("lab_root")
    home = tmp_path_factory.mktemp("lab_home")
    with start_lab(root, home) as server:
        yield server


@pytest.fixture
def offline_page(
    request: pytest.FixtureRequest, browser: Any, screenshots: Path
) -> Iterator[tuple[Any, list[str]]]:
    """A page that may load file: and data: URLs only; the refused URLs are listed."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    refused = refuse_other_urls(context, ("file:", "data:"))
    page = context.new_page()
    try:
        yield page, refused
        if failed(request):
            page.screenshot(path=str(screenshots / f"static_failure_{request.node.name}.png"))
    finally:
        context.close()


def refuse_other_urls(context: Any, allowed: tuple[str, ...]) -> list[str]:
    """Every request of ``context`` whose URL starts with none of ``allowed`` is aborted, as on
    a machine with no internet; the returned list collects the refused URLs."""
    refused: list[str] = []

    def route(request_route: Any) -> None:
        if request_route.request.url.startswith(allowed):
            request_route.continue_()
        else:
            refused.append(request_route.request.url)
            request_route.abort()

    context.route("**/*", route)
    return refused

"""Browser test fixtures: a real ``berth run --demo`` host and Debian's Chromium driven by Playwright.

Playwright drives the system browser (``/usr/bin/chromium``) through ``executable_path``; its own browser
downloads (``playwright install``) are never used.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from web_ui_kit import (
    CHROMIUM_ARGS,
    OPEN_DESCRIPTORS,
    REPO_ROOT,
    BerthHost,
    chromium_path,
    in_ci,
    start_host,
    stop_host,
)

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page, Playwright


def _open_descriptors_host(
    tmp_path_factory: pytest.TempPathFactory, name: str, gateway: str | None = None
) -> Iterator[BerthHost]:
    """A demo host over :data:`OPEN_DESCRIPTORS`, with ``gateway`` as its ``gateway.yaml`` when given."""
    root = tmp_path_factory.mktemp(name)
    descriptors = root / "descriptors"
    descriptors.mkdir()
    for file_name, text in {**OPEN_DESCRIPTORS, **({"gateway.yaml": gateway} if gateway else {})}.items():
        (descriptors / file_name).write_text(text)
    host = start_host(descriptors, root / "var", root / "berth.log")
    yield host
    stop_host(host)


@pytest.fixture(scope="module")
def open_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BerthHost]:
    """A demo host with ``auth: none``, tenant/project ``default/default`` and the ``hello`` bundle as default."""
    yield from _open_descriptors_host(tmp_path_factory, "open-host")


@pytest.fixture(scope="module")
def limited_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BerthHost]:
    """The open host's descriptors with a tight request rate for tenant ``default`` (6 a minute, burst 12)."""
    gateway = "auth: {mode: none}\nlimits: {default: {requests_per_minute: 6, burst: 12}}\n"
    yield from _open_descriptors_host(tmp_path_factory, "limited-host", gateway)


@pytest.fixture(scope="module")
def keyed_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BerthHost]:
    """A demo host over a copy of the repository's descriptors (API keys, tenants acme and globex)."""
    root = tmp_path_factory.mktemp("keyed-host")
    descriptors = root / "descriptors"
    shutil.copytree(REPO_ROOT / "descriptors", descriptors, ignore=shutil.ignore_patterns("schema", "var"))
    bundles = descriptors / "bundles.yaml"  # its folder bundles are relative to the repository's descriptors
    bundles.write_text(bundles.read_text().replace("path: ../bundles/", f"path: {REPO_ROOT}/bundles/"))
    host = start_host(descriptors, root / "var", root / "berth.log")
    yield host
    stop_host(host)


@pytest.fixture(scope="module")
def playwright_driver() -> Iterator[Playwright]:
    """Playwright's sync driver (skips outside CI when the package is missing; fails under CI)."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        if in_ci():
            pytest.fail("the playwright package is not installed (required under CI=true)")
        pytest.skip("the playwright package is not installed")
    with sync_playwright() as driver:
        yield driver


@pytest.fixture(scope="module")
def browser(playwright_driver: Playwright) -> Iterator[Browser]:
    """Debian's Chromium, headless (skips outside CI when it is missing; fails under CI)."""
    executable = chromium_path()
    if not Path(executable).exists():
        if in_ci():
            pytest.fail(f"no chromium at {executable} (required under CI=true)")
        pytest.skip("no chromium on PATH")
    launched = playwright_driver.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
    yield launched
    launched.close()


@dataclass
class PageErrors:
    """Uncaught errors of the page's scripts."""

    errors: list[str] = field(default_factory=list)


@pytest.fixture
def page_errors() -> PageErrors:
    """Collects uncaught script errors; tests fail when any happened."""
    return PageErrors()


@pytest.fixture
def page(browser: Browser, page_errors: PageErrors) -> Iterator[Page]:
    """A fresh browser context (empty local storage) and page; fails the test on uncaught script errors."""
    # Playwright's string predicates (wait_for_function) are evaluated in the page, which the UI's CSP forbids;
    # test_browser_hardening.py drives the UI with its policy enforced, without them.
    context = browser.new_context(viewport={"width": 1400, "height": 900}, locale="en-US", bypass_csp=True)
    context.set_default_timeout(10_000)
    opened = context.new_page()
    opened.on("pageerror", lambda error: page_errors.errors.append(str(error)))
    yield opened
    context.close()
    assert page_errors.errors == [], f"uncaught errors in the page: {page_errors.errors}"
